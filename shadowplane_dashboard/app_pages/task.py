"""Task: one task's evidence. Where it stands and why (the decisions in the policy's own
sentences, with their evidence and example results), the promotion gate, its grade (the
four dimensions against the tiers and what would change the tier), the metrics over
time per length bucket with the rules' thresholds, the cost against the cloud baseline
and the input lengths against the baseline (what the net_savings and input_shift rules
read, with a banner while a shift's re-grade is due), route accuracy and the comparator's
calibration, alerts, a routing what-if, and the config versions side by side. Admins
promote, roll back, re-arm and unblock here, each with a reason."""

from __future__ import annotations

import streamlit as st

from shadowplane_dashboard import common
from shadowplane_dashboard.task import sections

principal = common.require("read")
url = common.database_url()
st.title("Task")

task = sections.task_picker(url)
shown = sections.standing(url, task)
sections.decisions(shown)
sections.gate(shown)
sections.grade(shown)
if common.can(principal, "admin"):
    sections.admin_actions(shown, principal)
sections.evidence_over_time(shown)
sections.cost(shown)
sections.input_lengths(shown)
sections.route_accuracy(shown)
sections.alerts(shown)
sections.routing_whatif(shown)
sections.config_versions(shown)

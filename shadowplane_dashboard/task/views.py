"""What the Task page's sections say, as plain functions of the loaded data: which task is
shown, the decisions with their evidence, the gate, blocked models, alerts and config
versions in sentences and table rows. Untrusted text goes through `formats.line`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from controlplane.ingest.buckets import bucket_labels
from controlplane.ingest.schemas import SKIPPABLE
from shadowplane_dashboard import charts
from shadowplane_dashboard.formats import (
    count,
    decimal,
    level,
    line,
    moment,
    number,
    percent,
    seconds_shown,
    span,
)

# How much of an unknown `?task=` the page echoes.
ASKED_SHOWN = 100
# How many alerts the page also writes out as text under their table.
ALERTS_AS_TEXT = 20

Row = Mapping[str, Any]


@dataclass
class Shown:
    """The task the page shows and what was loaded for it, which every section reads."""

    url: str
    task: str
    state: dict[str, Any]
    config: dict[str, Any]
    decisions: list[dict[str, Any]] = field(default_factory=list)
    versions: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def boundaries(self) -> tuple[int, ...]:
        return tuple(self.config["length_buckets"])

    @property
    def seconds(self) -> bool:
        """Whether the page writes times to the second (windows not whole minutes)."""
        return seconds_shown(self.config["window_seconds"])

    @property
    def buckets(self) -> list[str]:
        return bucket_labels(self.boundaries)

    @cached_property
    def events(self) -> pd.DataFrame:
        """The decisions and alerts as events on the charts' time axis."""
        return charts.events(self.decisions, self.alerts)

    def cell_bounds(self, decision: Row) -> tuple[int, ...]:
        """The length buckets of the config version a decision judged under (its example
        results are picked by that version's buckets)."""
        evidence = decision.get("evidence") or {}
        judged = next(
            (v["config"] for v in self.versions if v["version"] == evidence.get("config_version")),
            self.config,
        )
        return tuple(judged.get("length_buckets", self.boundaries))


# --- which task ---------------------------------------------------------------------------


def rolled_back_first(views: Iterable[Row]) -> list[str]:
    """Task names, rolled-back tasks first: they are why someone opens this page at night."""
    ordered = sorted(views, key=lambda v: (v["stage"] != "rolled_back", v["task"]))
    return [v["task"] for v in ordered]


def pick(asked: str | None, names: list[str], *, linked: str | None, current: str | None) -> str:
    """The task to show. A `?task=` link followed within the session wins over the last
    pick (`current`), unless it is the link already followed (`linked`); an unknown name
    or no pick falls back to the first task."""
    if asked in names and (asked != linked or current is None):
        return asked
    return current if current in names else names[0]


def unknown_task(asked: str, names: list[str]) -> str:
    echo = asked if len(asked) <= ASKED_SHOWN else asked[:ASKED_SHOWN] + "…"
    return f"There is no task named {line(repr(echo))}. Pick one of the {len(names)} tasks below."


def stage_line(task: str, state: Row, *, seconds: bool = False) -> str:
    return (
        f"**{line(task)}** is in **{line(state['stage_words'])}** since "
        f"{moment(state['stage_changed_at'], seconds=seconds)}, config version "
        f"{state['config_version']}."
    )


# --- decisions ----------------------------------------------------------------------------


# The rules judged over a trailing span, whose rollbacks carry a "span" of evidence.
SPAN_RULES = ("net_savings", "input_shift")
# Actions whose name reads poorly in a heading, in words.
ACTION_WORDS = {"needs_regrade": "re-grade needed", "regraded": "re-graded"}


def decision_heading(decision: Row, *, seconds: bool = False) -> str:
    before, after = decision["stage_before"], decision["stage_after"]
    stages = f"stays {after}" if before and before == after else f"{before or '—'} → {after or '—'}"
    action = ACTION_WORDS.get(decision["action"], decision["action"])
    rule = (
        f" · rule {line(decision['rule'])} in {line(decision['bucket'])}"
        if decision["rule"]
        else ""
    )
    return (
        f"**{moment(decision['created_at'], seconds=seconds)}** · {line(action)} by "
        f"**{line(decision['actor'])}** ({line(stages)}){rule}"
    )


def evidence_kind(decision: Row) -> str | None:
    """Which evidence a decision carries: a CUSUM's "steps", a verdict per "windows", a
    span rule's "span" (net_savings, input_shift), the "gate" a promotion passed, or None."""
    evidence = decision.get("evidence") or {}
    if evidence.get("how") in SPAN_RULES and evidence.get("span"):
        return "span"
    if evidence.get("steps"):
        return "steps"
    if evidence.get("windows"):
        return "windows"
    return "gate" if "gate" in evidence else None


def bound_name(evidence: Row) -> str:
    confidence = evidence.get("confidence")
    return "bound" if confidence in (None, "point") else f"{level(confidence)} bound"


def counts(w: Row) -> str:
    return f"{number(w['num'])}/{number(w['den'])}"


def window_rows(evidence: Row) -> pd.DataFrame:
    """The windows a rule judged: counts, estimate, bound, threshold, verdict (rates in
    percent, as the sentences write them)."""
    bound = bound_name(evidence)
    return pd.DataFrame(
        [
            {
                "window": span(w["window_start"], w["window_end"]),
                "counts": counts(w),
                "estimate": percent(w["estimate"]),
                bound: percent(w["bound"]),
                "threshold": number(w["threshold"]),
                "verdict": w["verdict"],
            }
            for w in evidence.get("windows") or []
        ]
    )


def window_lines(evidence: Row) -> str:
    bound = bound_name(evidence)
    return "\n".join(
        f"- {span(w['window_start'], w['window_end'])}: {counts(w)} = {percent(w['estimate'])}, "
        f"{bound} {percent(w['bound'])}, threshold {number(w['threshold'])}: **{line(w['verdict'])}**"
        for w in evidence.get("windows") or []
    )


def step_rows(evidence: Row) -> pd.DataFrame:
    """A CUSUM's run: per window its counts, its evidence (the log-likelihood ratio), what
    the cap let count of it and the running sum."""
    return pd.DataFrame(
        [
            {
                "window": span(s["window_start"], s["window_end"]),
                "counts": counts(s),
                "estimate": percent(s["estimate"]),
                "evidence": decimal(s["contribution"], signed=True),
                "counted": decimal(s["counted"], signed=True),
                "sum": decimal(s["sum"]),
            }
            for s in evidence.get("steps") or []
        ]
    )


def step_lines(evidence: Row) -> str:
    return "\n".join(
        f"- {span(s['window_start'], s['window_end'])}: {counts(s)} = {percent(s['estimate'])}, "
        f"evidence {decimal(s['contribution'], signed=True)}, "
        f"counted {decimal(s['counted'], signed=True)}, sum **{decimal(s['sum'])}**"
        for s in evidence.get("steps") or []
    )


def omitted_steps(evidence: Row) -> str | None:
    omitted = evidence.get("steps_omitted")
    if not omitted:
        return None
    return (
        f"The run began {count(omitted)} windows before the first shown: the evidence keeps the "
        "latest windows of a long run."
    )


def cusum_explained(evidence: Row) -> str:
    cap = evidence.get("cap")
    capped = f"; each window counts at most {number(cap)}" if cap is not None else ""
    return (
        f"Evidence is the window's log-likelihood ratio: how much likelier its counts are "
        f"if the rate moved past the threshold by {number(evidence.get('min_effect', 0))} than "
        f"if it sits at the threshold. The sum adds each window's evidence{capped}, never "
        f"goes below 0, and fires at h = {number(evidence.get('h', 0))}."
    )


def bad_windows(decision: Row) -> Sequence[Row]:
    """The windows whose example results are shown: the CUSUM's windows that added to its
    sum, or the windows judged a breach."""
    evidence = decision.get("evidence") or {}
    if evidence.get("steps"):
        return [s for s in evidence["steps"] if s["counted"] > 0]
    return [w for w in evidence.get("windows") or [] if w["verdict"] == "breach"]


def models_seen(evidence: Row) -> str | None:
    if not evidence.get("models"):
        return None
    return "Edge models seen in these windows (blocked from auto-promotion): " + ", ".join(
        line(m) for m in evidence["models"]
    )


def example_heading(window: Row, cell: str) -> str:
    return f"Example results of {span(window['window_start'], window['window_end'])} ({line(cell)})"


def example_line(result: Row, *, seconds: bool = False) -> str:
    degraded = (
        f", degraded ({line(result['degrade_reason'] or 'no reason given')})"
        if result["degraded"]
        else ""
    )
    return (
        f"Request {line(result['request_id'])} at {moment(result['ts'], seconds=seconds)}: "
        f"{result['input_tokens']} input tokens, "
        f"outcome **{line(result['comparison']['outcome'] or 'none')}**, "
        f"served by {line(result['served'])}{degraded}{not_run(result.get('skipped'))}"
    )


# How a result's `skipped` sides read.
_SIDE_WORDS = {"edge": "the edge", "cloud": "the cloud", "cloud_repeat": "the cloud's repeat"}


def not_run(skipped: Mapping[str, str | None] | None) -> str:
    """The sides the router said it did not run, with why (", the cloud not run (budget)"),
    in the contract's order: without them a missing side reads as lost. A reason its task's
    policy did not keep (`none`) is said so, and an empty one."""
    if not skipped:
        return ""
    said = [
        f"{_SIDE_WORDS[side]} not run ({_why(skipped[side])})"
        for side in SKIPPABLE
        if side in skipped
    ]
    return ", " + ", ".join(said)


def _why(reason: str | None) -> str:
    if reason is None:
        return "its reason not kept"
    return line(reason) if reason.strip() else "no reason given"


def gate_passed(evidence: Row) -> str | None:
    """A promotion's gate verdict in a sentence (None: it carries none)."""
    verdict = evidence.get("gate")
    if verdict is None:
        return None
    forced = " It was forced past the gate (audited)." if evidence.get("forced") else ""
    passed = "passed" if verdict["passed"] else "did not pass"
    reasons = "; ".join(line(r) for r in verdict["reasons"])
    return f"The gate {passed} then{': ' + reasons if reasons else ''}.{forced}"


def moves(state: Row) -> list[tuple[str, str, bool]]:
    """The stage moves an admin's buttons offer: (kind, label, disabled at this stage)."""
    stage = state["stage"]
    return [
        ("promote", f"Promote from {line(state['stage_words'])}", stage in ("full", "rolled_back")),
        ("rollback", "Roll back to the cloud", stage in ("cloud", "rolled_back")),
        ("rearm", "Re-arm to shadow", stage != "rolled_back"),
    ]


# --- the gate, blocked models, alerts -----------------------------------------------------


def gate_sentence(gate: Row) -> str:
    verdict = "passes" if gate["passed"] else "does not pass"
    reasons = "; ".join(line(r) for r in gate["reasons"])
    return (
        f"The gate {verdict} over the last {gate['windows']} windows closed in "
        f"{line(gate['stage'])}" + (f": {reasons}." if reasons else ".")
    )


def gate_rows(gate: Row) -> list[dict[str, Any]]:
    return [{"bucket": bucket, **view} for bucket, view in gate["buckets"].items()]


GATE_COLUMNS = [
    "bucket",
    "verdict",
    "results",
    "pairs",
    "agreement",
    "lower bound",
    "edge failures",
    "upper bound",
]


def gate_table(rows: Sequence[Row]) -> pd.DataFrame:
    """The gate's buckets as a table, its rates in percent as the sentences write them."""
    return pd.DataFrame(
        [
            {
                "bucket": r["bucket"],
                "verdict": r["verdict"],
                "results": r.get("results"),
                "pairs": r["pairs"],
                "agreement": percent(r["agreement"]),
                "lower bound": percent(r["agreement_low"]),
                "edge failures": percent(r.get("edge_fail_rate")),
                "upper bound": percent(r.get("edge_fail_rate_high")),
            }
            for r in rows
        ],
        columns=GATE_COLUMNS,
    )


def gate_lines(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"- {line(row['bucket'])}: **{line(row['verdict'])}** — {row['pairs']} pairs, "
        f"agreement {percent(row['agreement'])} (lower bound {percent(row['agreement_low'])})"
        for row in rows
    )


def blocked_line(block: Row) -> str:
    return (
        f"Edge model {line(block['model'])} is blocked from auto-promotion since "
        f"{moment(block['blocked_at'])} (decision #{block['decision_id']})."
    )


def no_runs(needed: float | None) -> str:
    return (
        f"It has no eval runs. Unblocking needs a run on the current regression eval set at "
        f"{percent(needed)} accuracy or more (Eval sets page), or force."
    )


def run_lines(runs: Sequence[Row]) -> str:
    return "\n".join(
        f"- {line(r['layer'])}: {percent(r['accuracy'])} of {r['n']} items"
        f"{'' if r['current'] else ' (an older version of the set)'}, {moment(r['created_at'])}"
        for r in runs
    )


ALERT_COLUMNS = ["opened", "kind", "state", "message", "acknowledged_by"]


def alert_rows(alerts: Sequence[Row], *, seconds: bool = False) -> pd.DataFrame:
    """The alerts' table: when each opened (as every time on the page), kind, state,
    message and who acknowledged it."""
    return pd.DataFrame(
        [{"opened": moment(a["opened_at"], seconds=seconds), **a} for a in alerts],
        columns=ALERT_COLUMNS,
    )


def alert_lines(alerts: Sequence[Row], *, seconds: bool = False) -> str:
    return "\n".join(
        f"- {moment(a['opened_at'], seconds=seconds)} · {line(a['kind'])} ({line(a['state'])}): "
        f"{line(a['message'])}"
        for a in alerts[:ALERTS_AS_TEXT]
    )


RUN_COLUMNS = ["layer", "accuracy", "n", "correct", "current", "actor", "run at"]


def run_rows(runs: Sequence[Row]) -> pd.DataFrame:
    """A blocked model's eval runs as a table, each with when it ran (as every time on the
    page)."""
    return pd.DataFrame(
        [
            {**r, "accuracy": percent(r["accuracy"]), "run at": moment(r["created_at"])}
            for r in runs
        ],
        columns=RUN_COLUMNS,
    )


# --- config versions ----------------------------------------------------------------------


def only_version(version: Row) -> str:
    return (
        f"Only version {version['version']} exists, applied by {line(version['created_by'])} "
        f"at {moment(version['created_at'])}; a changed config applied later shows here "
        "beside it."
    )


def what_changed(older: int, newer: int, changes: Sequence[Row]) -> str:
    if not changes:
        return f"Versions {older} and {newer} hold the same config."
    return f"What changed from version {older} to {newer}:\n" + "\n".join(
        f"- {line(c['path'])}: {line(repr(c['before']))} → {line(repr(c['after']))}"
        for c in changes
    )


def version_caption(version: Row) -> str:
    current = " (current)" if version["current"] else ""
    return (
        f"Version {version['version']}{current}, applied by {line(version['created_by'])} at "
        f"{moment(version['created_at'])}"
    )

"""controlplane.rollout.taskview.span_evidence, what the Task page's Cost and Input lengths
sections load, on SQLite and PostgreSQL: window rows stored for the test as the metrics
pass stores them, read back up to the newest closed window (an open one is not read),
over each rule's span, cut at the stage's start; the baseline kept on the task; the
re-grade mark, which GET /v1/tasks/{task} gives too. Figures are computed by hand."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from controlplane.db import session_scope
from controlplane.metrics import lengths
from controlplane.metrics.repository import empty_metrics, lock_window, upsert_metrics
from controlplane.models import Task
from controlplane.rollout.configs import apply_config
from controlplane.rollout.taskview import span_evidence
from tests.conftest import Api

TASK = "ticket_classify"
HOUR = 3600
T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
CONFIG = {
    "task": TASK,
    "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
    "window_seconds": HOUR,
    "fixed_cost_per_day": 24,
    "rollback": {
        "rules": [
            {"metric": "net_savings", "op": ">=", "threshold": 0, "span": "3h", "min_samples": 10},
            {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": "2h"},
        ]
    },
}
# Hour k: (results, edge, cloud, cloud baseline, inputs in bin 5, inputs in bin 6). Hour 0
# lies before the 3h span that ends with hour 3; hour 4 is still open.
HOURS = [
    (50, 9.0, 9.0, 9.0, 50, 0),
    (100, 1.0, 2.0, 6.0, 100, 0),
    (200, 2.0, 3.0, 10.0, 100, 100),
    (100, 1.0, 1.0, 4.0, 0, 100),
    (80, 5.0, 5.0, 0.0, 0, 80),
]
BASELINE = {"counts": [100 if i == 5 else 0 for i in range(lengths.BINS)], "over_cap": 0}


def store(api: Api) -> None:
    """The config, the windows (all closed but the last) and the task in canary since
    before them with a kept baseline."""
    with session_scope(api.engine) as session:
        task_id = apply_config(session, CONFIG, actor="test").task_id
        for k, (n, edge, cloud, base, short, long) in enumerate(HOURS):
            start = T0 + timedelta(hours=k)
            window = lock_window(session, task_id, start, start + timedelta(hours=1), [512], 2)
            row = empty_metrics("all")
            row.update(n_results=n, edge_cost=edge, cloud_cost=cloud, baseline_cost=base)
            row["input_hist"] = [short if i == 5 else long if i == 6 else 0 for i in range(15)]
            upsert_metrics(session, window, [row])
            if k < len(HOURS) - 1:
                window.closed_at = start + timedelta(hours=1, minutes=2)
        session.execute(
            update(Task)
            .where(Task.name == TASK)
            .values(
                stage="canary",
                stage_changed_at=T0 - timedelta(hours=1),
                input_baseline={**BASELINE, "source": "the offload grade of 2026-11-29"},
            )
        )


def read(api: Api) -> dict[str, Any]:
    with session_scope(api.engine) as session:
        found = span_evidence(session, TASK)
    assert found is not None
    return found


def psi(now: tuple[int, int], base: tuple[int, int]) -> float:
    """The index over the two bins either side holds, 0.5 added to each count."""
    a = [x + 0.5 for x in now]
    b = [x + 0.5 for x in base]
    return sum(
        (x / sum(a) - y / sum(b)) * math.log((x / sum(a)) / (y / sum(b)))
        for x, y in zip(a, b, strict=True)
    )


def test_cost_and_lengths_are_read_over_each_rules_span_up_to_the_newest_closed_window(
    api: Api,
) -> None:
    store(api)
    found = read(api)
    cost = found["cost"]
    # Hours 1-3: savings 3 + 5 + 2 = 10, fixed 24 a day over 3 hours = 3, net 7.
    assert [w["window_start"] for w in cost["windows"]] == [
        T0 + timedelta(hours=k) for k in (1, 2, 3)
    ]
    assert (cost["since"], cost["until"], cost["cut"]) == (
        T0 + timedelta(hours=1),
        T0 + timedelta(hours=4),
        None,
    )
    terms = cost["terms"]
    assert (terms["results"], terms["paid"], terms["baseline_cost"]) == (400, 10.0, 20.0)
    assert (terms["savings"], terms["fixed_cost"], terms["net_savings"]) == (10.0, 3.0, 7.0)
    assert [w["net_savings"] for w in cost["windows"]] == [3.0 - 1, 5.0 - 1, 2.0 - 1]
    assert cost["rule"]["name"] == "net_savings >= 0 over 3h"
    assert cost["rule"]["verdict"] == "ok"

    shift = found["lengths"]
    # The alert's and the rule's 2h: hours 2 and 3, 100 short and 200 long inputs.
    assert (shift["since"], shift["until"]) == (T0 + timedelta(hours=2), T0 + timedelta(hours=4))
    assert shift["now"][5:7] == [100, 200] and shift["results"] == 300
    assert shift["baseline"]["source"] == "the offload grade of 2026-11-29"
    assert shift["baseline"]["n"] == 100 and shift["over_cap_baseline"] == 0
    assert shift["psi"] == pytest.approx(psi((100, 200), (100, 0)))
    assert shift["bins"][5:7] == ["256-511", "512-1023"]
    assert shift["alert_line"] == 0.1
    rule = shift["rule"]
    assert (rule["name"], rule["statistic"]) == ("input_shift <= 0.25 over 2h", shift["psi"])
    # A span of two windows is judged in two runs of one: hour 2 (100 short, 100 long) and
    # hour 3 (100 long), each far from the baseline's all-short inputs.
    assert [q["results"] for q in rule["quarters"]] == [200, 100]
    assert [q["psi"] for q in rule["quarters"]] == [
        pytest.approx(psi((100, 100), (100, 0))),
        pytest.approx(psi((0, 100), (100, 0))),
    ]
    assert rule["verdict"] == "breach"
    assert (found["needs_regrade"], found["shifted_at"]) == (False, None)


def test_the_stage_cuts_the_spans_and_the_regrade_mark_is_read_and_served(api: Api) -> None:
    store(api)
    shifted = T0 + timedelta(hours=2, minutes=5)
    with session_scope(api.engine) as session:
        session.execute(
            update(Task)
            .where(Task.name == TASK)
            .values(
                stage_changed_at=T0 + timedelta(hours=1, minutes=30),
                needs_regrade=True,
                shifted_at=shifted,
                input_baseline=None,
            )
        )
    found = read(api)
    # The stage's first window is hour 2: hours 2 and 3, savings 7, fixed 2, net 5.
    cost = found["cost"]
    assert cost["cut"] == "stage" and cost["since"] == T0 + timedelta(hours=2)
    assert (cost["terms"]["savings"], cost["terms"]["net_savings"]) == (7.0, 5.0)
    # No baseline kept and no offload grade: nothing to compare; the rule says why.
    shift = found["lengths"]
    assert shift["baseline"] is None and shift["psi"] is None
    assert shift["rule"]["verdict"] == "insufficient"
    assert shift["rule"]["why"].startswith("no baseline")
    assert found["needs_regrade"] is True and found["shifted_at"] == shifted

    view = api.client.get(f"/v1/tasks/{TASK}", headers=api.headers("read")).json()
    assert view["needs_regrade"] is True
    assert datetime.fromisoformat(view["shifted_at"]) == shifted
    other = api.client.get("/v1/tasks/invoice_extract", headers=api.headers("read")).json()
    assert (other["needs_regrade"], other["shifted_at"]) == (False, None)


def test_a_task_without_windows_or_a_name_unknown(api: Api) -> None:
    with session_scope(api.engine) as session:
        assert span_evidence(session, "no_such_task") is None
        empty = span_evidence(session, "invoice_extract")
    assert empty == {"needs_regrade": False, "shifted_at": None, "cost": None, "lengths": None}

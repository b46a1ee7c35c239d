"""The metrics task with short windows, and generated results with every shape a router sends."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from tests.conftest import Api

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
WINDOW = 60
LATENESS = 30
METRICS_TASK: dict[str, Any] = {
    "task": "metrics_task",
    "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint"]},
    "window_seconds": WINDOW,
    "allowed_lateness_seconds": LATENESS,
    "prices": {"edge": {"in": 0.0001, "out": 0.0002}, "cloud": {"in": 0.003, "out": 0.006}},
    "fixed_cost_per_day": 86.4,
    "alerts": {"baseline_windows": 6, "silence_windows": 3},
}
LABELS = ["refund", "exchange", "complaint"]


def generated_result(rng: random.Random, i: int, start: datetime, span: float) -> dict[str, Any]:
    """One result of metrics_task with a random mix of every field the metrics read."""
    tokens = rng.choice([rng.randrange(1, 128), rng.randrange(128, 512), rng.randrange(512, 2048)])
    served = rng.choice(["edge", "cloud", "cloud"])
    degraded = served == "cloud" and rng.random() < 0.2
    shape = rng.random()
    truth = rng.choice(LABELS)
    edge: dict[str, Any] | None = {
        "output": truth if rng.random() < 0.8 else rng.choice(LABELS + ["nonsense"]),
        "model": "small@3",
    }
    cloud: dict[str, Any] | None = {"output": truth, "model": "large@7"}
    assert edge is not None and cloud is not None
    if shape < 0.1:
        edge = {"error": rng.choice(["timeout", "exception"]), "output": None}
    elif shape < 0.15:
        edge["valid"] = False
    elif shape < 0.2:
        cloud = None
        served = "edge"
        degraded = False
    elif shape < 0.25:
        edge = None
        served = "cloud"
        degraded = False
    elif shape < 0.28:
        cloud = {"error": "timeout", "output": None}
    for side, base in ((edge, 40.0), (cloud, 400.0)):
        if side is None:
            continue
        if rng.random() < 0.85:
            side["latency_ms"] = round(rng.uniform(base * 0.5, base * 3), 2)
        if rng.random() < 0.6:
            side["ttfb_ms"] = round(rng.uniform(base * 0.1, base), 2)
        if rng.random() < 0.5:
            side["input_tokens"] = tokens
        if rng.random() < 0.5:
            side["output_tokens"] = rng.randrange(1, 20)
        if rng.random() < 0.3:
            side["cost"] = round(rng.uniform(0, 0.01), 6)
    if served == "edge" and edge is None:
        served = "cloud"
    if served == "cloud" and cloud is None:
        served = "edge"
    if degraded and edge is None:
        degraded = False
    return {
        "request_id": f"g-{i}",
        "task": "metrics_task",
        "ts": (start + timedelta(seconds=rng.uniform(0, span))).isoformat(),
        "input_tokens": tokens,
        "decision": rng.choice(["edge", "cloud"]),
        "served": served,
        "degraded": degraded,
        "degrade_reason": "low_confidence" if degraded else None,
        "edge": edge,
        "cloud": cloud,
    }


def post_all(api: Api, results: list[dict[str, Any]]) -> None:
    for start in range(0, len(results), 500):
        report = api.post_results({"results": results[start : start + 500]}).json()
        assert report["rejected"] == [], report["rejected"][:3]


def settle_scans(api: Api, now: datetime) -> None:
    """Let the window scans move past what they have read: on PostgreSQL they read results
    again until every transaction that was running at the last scan has ended (other tests'
    writes end in moments); then one plan, which moves the mark. SQLite: one plan."""
    from controlplane.db import session_scope
    from controlplane.metrics.service import RESULTS_SCAN, plan
    from controlplane.models import ScanMark

    if api.engine.dialect.name == "postgresql":
        with session_scope(api.engine) as session:
            mark = session.get(ScanMark, RESULTS_SCAN)
            xmax = mark.last_xmax if mark is not None else None
        deadline = time.monotonic() + 30
        with api.engine.connect() as probe:
            while xmax is not None:
                xmin = probe.execute(
                    text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                ).scalar_one()
                probe.rollback()
                if int(xmin) >= xmax:
                    break
                assert time.monotonic() < deadline, "a transaction stayed open for 30 s"
                time.sleep(0.05)
    with session_scope(api.engine) as session:
        plan(session, now)


def apply_metrics_task(api: Api, **changes: Any) -> None:
    """A new config version of the metrics task with `changes`, waited for until the task's
    runtime reads it (a new version applies within a second)."""
    from controlplane.catalog.service import task_runtimes
    from controlplane.db import session_scope

    answer = api.client.post("/v1/tasks", json={**METRICS_TASK, **changes}, headers=api.headers())
    assert answer.status_code == 201, answer.text
    deadline = time.monotonic() + 10
    while True:
        with session_scope(api.engine) as session:
            config = task_runtimes(session, {"metrics_task"})["metrics_task"].config
        if all(getattr(config, k) == v for k, v in changes.items()):
            return
        assert time.monotonic() < deadline, "the new config never applied"
        time.sleep(0.1)


def stored_results(api: Api, task: str = "metrics_task") -> int:
    """How many results of the task are stored."""
    from sqlalchemy import func, select

    from controlplane.db import session_scope
    from controlplane.models import Result, Task

    with session_scope(api.engine) as session:
        query = (
            select(func.count())
            .select_from(Result)
            .join(Task, Task.id == Result.task_id)
            .where(Task.name == task)
        )
        return int(session.scalar(query) or 0)

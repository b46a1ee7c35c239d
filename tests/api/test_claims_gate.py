"""README and docs/evidence.md claim: the promotion gate blocks on a low agreement bound, on
edge failures over the `offload_fail_rate` rule, and on too few samples. Each reason alone,
on PostgreSQL, through `GET /v1/tasks/{task}/gate` and a promotion without `force` (409
naming it, the stage unchanged), next to a healthy task the same gate lets through."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.grading_support import give_offload_grade
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
WINDOW, LATENESS = 60, 30
PER_WINDOW = 60  # results per window, all in bucket 128-511
WINDOWS = 2
LOW_BOUND = "agreement lower bound"
FAILURES = "edge failure rate upper bound"
TOO_FEW = "insufficient evidence"
TASKS = ("healthy_task", "low_task", "failing_task", "sparse_task")


def config(name: str) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        # The offload rule sets the gate's failure limit; `off`, so that it never fires and
        # the gate's own check is the only one that can block.
        "rollback": {
            "rules": [{"metric": "offload_fail_rate", "op": "<=", "threshold": 0.1, "mode": "off"}]
        },
        "promotion": {
            "min_windows": WINDOWS,
            "min_samples_per_bucket": 50,
            "agreement_lower_bound": 0.8,
            "canary_steps": [50],
        },
    }


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            for name in TASKS:
                apply_config(session, config(name), actor="test")
        yield api


def results(task: str, start: datetime, k: int) -> list[dict[str, Any]]:
    """Window k of a task: healthy (2% conflicts), low (30% conflicts), failing (30% edge
    timeouts) or sparse (20 results: 40 pairs in all, short of 50, yet enough for
    the failure bound to clear 10% with no failure)."""
    n = 20 if task == "sparse_task" else PER_WINDOW
    out = []
    for i in range(n):
        edge: dict[str, Any] = {"output": "refund", "model": "small@3"}
        if task == "low_task" and i < 0.3 * n:
            edge["output"] = "exchange"
        elif task == "failing_task" and i < 0.3 * n:
            edge = {"output": None, "error": "timeout", "model": "small@3"}
        elif task == "healthy_task" and i < 1:
            edge["output"] = "exchange"
        out.append(
            make_result(
                request_id=f"{task}-{k}-{i}",
                task=task,
                ts=(start + timedelta(seconds=k * WINDOW + i * 30 / n)).isoformat(),
                input_tokens=300,
                edge=edge,
            )
        )
    return out


def gate(api: Api, task: str) -> dict[str, Any]:
    answer = api.client.get(f"/v1/tasks/{task}/gate", headers=api.headers("read"))
    assert answer.status_code == 200
    return dict(answer.json())


def kinds(reasons: list[str]) -> set[str]:
    """Which of the gate's reasons the sentences name."""
    return {kind for kind in (LOW_BOUND, FAILURES, TOO_FEW) for r in reasons if kind in r}


def close_windows(api: Api, task: str) -> None:
    """The task in shadow with WINDOWS windows of its results closed in it. The other tasks
    keep their creation time, later than the pass's clock: it computes none of their (empty)
    windows."""
    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW) - timedelta(seconds=8 * WINDOW)
    with session_scope(api.engine) as session:
        earlier = start - timedelta(hours=1)
        session.execute(
            update(Task)
            .where(Task.name == task)
            .values(created_at=earlier, stage_changed_at=earlier)
        )
    for k in range(WINDOWS):
        post_all(api, results(task, start, k))
    run_pass(api.engine, start + timedelta(seconds=WINDOWS * WINDOW + LATENESS))


def promote(api: Api, task: str) -> Any:
    return api.client.post(
        f"/v1/tasks/{task}/promote", json={"reason": "gate?"}, headers=api.headers()
    )


@pytest.mark.parametrize(
    ("task", "reason", "verdict"),
    [
        ("low_task", LOW_BOUND, "fail"),
        ("failing_task", FAILURES, "fail"),
        ("sparse_task", TOO_FEW, "insufficient evidence"),
    ],
)
def test_the_gate_blocks_naming_its_reason(api: Api, task: str, reason: str, verdict: str) -> None:
    close_windows(api, task)
    seen = gate(api, task)
    assert seen["stage"] == "shadow" and seen["windows"] == WINDOWS
    assert seen["passed"] is False
    # The one reason, for the bucket that had the traffic and for all buckets together.
    assert kinds(seen["reasons"]) == {reason}, seen["reasons"]
    assert any(r.startswith("bucket 128-511: ") for r in seen["reasons"]), seen["reasons"]
    assert seen["buckets"]["128-511"]["verdict"] == verdict
    assert seen["buckets"]["0-127"]["verdict"] == "no traffic"

    refused = promote(api, task)
    assert refused.status_code == 409
    assert refused.json()["detail"]["gate"]["reasons"] == seen["reasons"]
    assert gate(api, task)["stage"] == "shadow"
    assert api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"] == (
        "shadow"
    )


def test_the_same_gate_lets_a_healthy_task_through(api: Api) -> None:
    # Leaving shadow also needs an `offload` grade: traffic from before the stage's windows.
    give_offload_grade(api.url, "healthy_task")
    close_windows(api, "healthy_task")
    seen = gate(api, "healthy_task")
    assert seen["passed"] is True and seen["reasons"] == []
    assert seen["buckets"]["128-511"]["verdict"] == "pass"
    assert promote(api, "healthy_task").status_code == 200
    assert gate(api, "healthy_task")["stage"] == "canary"

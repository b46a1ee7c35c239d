"""An evaluation that fails in one in-process pass is run again by the next pass, even when
no window of its task closes then (before, it waited for the task's next window to close)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane import scheduler
from controlplane.db import session_scope
from controlplane.models import Task
from tests.conftest import Api, make_result
from tests.windowdata import LATENESS, WINDOW, post_all


def test_a_failed_evaluation_is_retried_by_the_next_pass(
    metrics_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    with session_scope(metrics_api.engine) as session:
        task_id = session.query(Task.id).filter(Task.name == "metrics_task").scalar()
    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW) - timedelta(seconds=3 * WINDOW)
    post_all(
        metrics_api,
        [
            make_result(
                request_id=f"r-{i}",
                task="metrics_task",
                ts=(start + timedelta(seconds=i)).isoformat(),
            )
            for i in range(5)
        ],
    )
    real = scheduler.evaluate_rollout
    calls: list[int] = []

    def flaky(session: Any, task_id: int, **kwargs: Any) -> Any:
        calls.append(task_id)
        if len([c for c in calls if c == task_id]) == 1:
            raise RuntimeError("the database hiccuped")
        return real(session, task_id, **kwargs)

    monkeypatch.setattr(scheduler, "evaluate_rollout", flaky)
    first = scheduler.run_pass(metrics_api.engine, start + timedelta(seconds=WINDOW + LATENESS))
    assert ("metrics_task", "rollout") in [(f.task, f.stage) for f in first.failed]
    assert task_id in first.unevaluated
    # The next pass: no window of the task closes at this clock, yet its evaluation runs again.
    second = scheduler.run_pass(
        metrics_api.engine,
        start + timedelta(seconds=WINDOW + LATENESS + 1),
        retry=first.unevaluated,
    )
    assert not [c for c in second.windows if c.task_id == task_id and c.action == "closed"]
    assert calls.count(task_id) == 2
    assert second.failed == [] and second.unevaluated == set()
    # Without the retry set, a pass at that clock would not have evaluated the task at all.
    third = scheduler.run_pass(metrics_api.engine, start + timedelta(seconds=WINDOW + LATENESS + 2))
    assert calls.count(task_id) == 2 and third.unevaluated == set()

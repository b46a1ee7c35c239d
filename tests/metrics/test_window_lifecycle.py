"""Windows over time: open windows change, closed ones only count late results, every pass is idempotent."""

from __future__ import annotations

import random
import threading
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.db import in_transaction, session_scope
from controlplane.metrics.service import compute_window, plan
from controlplane.models import Task, Window, WindowMetrics
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.windowdata import LATENESS, T0, WINDOW, generated_result, post_all, settle_scans


def _result(i: int, seconds: float, tokens: int = 300, **overrides: Any) -> dict[str, Any]:
    return make_result(
        request_id=f"w-{i}",
        task="metrics_task",
        ts=(T0 + timedelta(seconds=seconds)).isoformat(),
        input_tokens=tokens,
        **overrides,
    )


def _rows(api: Api) -> dict[str, dict[str, Any]]:
    response = api.client.get(
        "/v1/tasks/metrics_task/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(seconds=WINDOW)).isoformat()},
        headers=api.headers("read"),
    )
    assert response.status_code == 200, response.text
    return {row["bucket"]: row for row in response.json()["windows"]}


def test_a_late_result_changes_an_open_window_and_only_n_late_of_a_closed_one(
    metrics_api: Api,
) -> None:
    post_all(metrics_api, [_result(i, 10 + i) for i in range(10)])
    run_pass(metrics_api.engine, T0 + timedelta(seconds=30))
    first = _rows(metrics_api)
    assert first["all"]["n_results"] == 10 and first["all"]["closed"] is False

    # Still open (end + lateness not reached): a result for it changes its metrics.
    post_all(metrics_api, [_result(100, 50, tokens=40, edge={"output": "exchange"})])
    run_pass(metrics_api.engine, T0 + timedelta(seconds=WINDOW + LATENESS - 1))
    second = _rows(metrics_api)
    assert second["all"]["n_results"] == 11 and second["all"]["n_pairs"] == 11
    assert second["all"]["agreement_num"] == 10 and second["0-127"]["n_results"] == 1
    assert second["all"]["closed"] is False

    close = T0 + timedelta(seconds=WINDOW + LATENESS)
    run_pass(metrics_api.engine, close)
    closed = _rows(metrics_api)
    assert closed["all"]["closed"] is True
    assert closed["all"]["closed_at"].startswith(close.isoformat().replace("+00:00", ""))

    # After closing: two late results (two buckets) and one resent duplicate.
    late = [_result(200, 20, tokens=40), _result(201, 21, tokens=900, edge={"output": "exchange"})]
    post_all(metrics_api, [*late, _result(0, 10)])
    run_pass(metrics_api.engine, close + timedelta(seconds=5))
    after = _rows(metrics_api)
    assert after["all"]["n_late"] == 2
    assert after["0-127"]["n_late"] == 1 and after["512-2047"]["n_late"] == 1
    assert after["128-511"]["n_late"] == 0
    for bucket, row in after.items():
        unchanged = {k: v for k, v in row.items() if k != "n_late"}
        assert unchanged == {k: v for k, v in closed[bucket].items() if k != "n_late"}, bucket


def _metric_rows(api: Api) -> list[tuple[Any, ...]]:
    with session_scope(api.engine) as session:
        return [
            tuple(getattr(m, c.key) for c in WindowMetrics.__table__.columns if c.key != "id")
            for m in session.scalars(
                select(WindowMetrics).order_by(WindowMetrics.window_start, WindowMetrics.bucket)
            )
        ]


def test_a_window_computed_twice_has_one_row_per_bucket_with_the_same_values(
    metrics_api: Api,
) -> None:
    post_all(metrics_api, [_result(i, i, tokens=50 + 40 * i) for i in range(40)])
    now = T0 + timedelta(seconds=WINDOW + LATENESS)
    run_pass(metrics_api.engine, now)
    once = _metric_rows(metrics_api)
    with session_scope(metrics_api.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == "metrics_task"))
    assert task_id is not None
    # Recompute the closed window's job directly, and run the whole pass again.
    in_transaction(
        metrics_api.engine, lambda s: compute_window(s, task_id=task_id, window_start=T0, now=now)
    )
    run_pass(metrics_api.engine, now)
    assert _metric_rows(metrics_api) == once
    window_rows = [r for r in once if r[2] == T0]
    assert sorted(r[3] for r in window_rows) == ["0-127", "128-511", "2048+", "512-2047", "all"]


@pytest.mark.integration
def test_two_jobs_computing_one_window_at_once_leave_one_row_per_bucket(
    pg_url: str,
) -> None:
    from controlplane.rollout.configs import apply_config
    from tests.conftest import make_api
    from tests.windowdata import METRICS_TASK

    with contextmanager(make_api)(pg_url) as api:
        with session_scope(api.engine) as session:
            task = apply_config(session, METRICS_TASK, actor="test")
            task_id = session.scalar(select(Task.id).where(Task.name == task.task))
        assert task_id is not None
        post_all(api, [_result(i, i % 50, tokens=30 * i) for i in range(200)])
        open_now = T0 + timedelta(seconds=10)
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def job(now: Any) -> None:
            try:
                barrier.wait()
                in_transaction(
                    api.engine,
                    lambda s: compute_window(s, task_id=task_id, window_start=T0, now=now),
                )
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        # Two computing the open window, two closing it, all at the same moment.
        close_now = T0 + timedelta(seconds=WINDOW + LATENESS)
        threads = [
            threading.Thread(target=job, args=(n,))
            for n in (open_now, open_now, close_now, close_now)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with session_scope(api.engine) as session:
            counts = session.execute(
                select(WindowMetrics.bucket, func.count(), func.max(WindowMetrics.n_results))
                .group_by(WindowMetrics.bucket)
                .order_by(WindowMetrics.bucket)
            ).all()
            windows = session.scalars(select(Window)).all()
        assert [(b, n) for b, n, _ in counts] == [
            ("0-127", 1),
            ("128-511", 1),
            ("2048+", 1),
            ("512-2047", 1),
            ("all", 1),
        ]
        assert dict((b, m) for b, _, m in counts)["all"] == 200
        assert len(windows) == 1 and windows[0].closed_at == close_now


def test_plan_lists_open_recent_and_touched_windows_and_skips_closed_quiet_ones(
    metrics_api: Api,
) -> None:
    post_all(metrics_api, [_result(i, i) for i in range(5)])
    now = T0 + timedelta(seconds=3 * WINDOW + LATENESS)
    with session_scope(metrics_api.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == "metrics_task"))
        jobs = plan(session, now).jobs
    # The task was created just now (real clock), so only the window with results is due.
    assert [(j.task_id, j.window_start) for j in jobs] == [(task_id, T0)]
    run_pass(metrics_api.engine, now)
    # Once the scans have moved past what the pass read, a quiet plan lists nothing.
    settle_scans(metrics_api, now)
    with session_scope(metrics_api.engine) as session:
        assert plan(session, now + timedelta(seconds=1)).jobs == []
    # A late result brings the closed window back, for its n_late only.
    post_all(metrics_api, [_result(99, 30)])
    with session_scope(metrics_api.engine) as session:
        assert [(j.task_id, j.window_start) for j in plan(session, now).jobs] == [(task_id, T0)]


@pytest.mark.integration
def test_a_large_window_read_in_parallel_slices_gives_the_same_figures(
    pg_metrics_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.metrics import repository

    rng = random.Random(11)
    post_all(pg_metrics_api, [generated_result(rng, i, T0, WINDOW) for i in range(1200)])
    with session_scope(pg_metrics_api.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == "metrics_task"))
    assert task_id is not None
    now = T0 + timedelta(seconds=5)

    def compute() -> list[tuple[Any, ...]]:
        in_transaction(
            pg_metrics_api.engine,
            lambda s: compute_window(s, task_id=task_id, window_start=T0, now=now),
        )
        return _metric_rows(pg_metrics_api)

    whole = compute()
    # Three slices on three connections (the window held 1,200 results when last computed).
    monkeypatch.setattr(repository, "PARALLEL_MIN_ROWS", 1000)
    monkeypatch.setattr(repository.os, "cpu_count", lambda: 3)
    sliced = compute()
    assert len(sliced) == len(whole) == 5
    for a, b in zip(whole, sliced, strict=True):
        for x, y in zip(a, b, strict=True):
            # Float sums added in another order may differ in the last bits; nothing else may.
            assert x == (pytest.approx(y, rel=1e-12) if isinstance(y, float) else y)

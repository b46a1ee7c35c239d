"""A task's `window_seconds` or length buckets changed by a new config version: windows never
overlap, each keeps the span it was made with, and every stored result is counted exactly
once, in one window's `n_results` or `n_late`. Before, open windows were recomputed with the
new length over each other (11 results counted 19 times), a shorter length made windows
inside closed ones, a late result for a window of the old length was counted nowhere, and
the old buckets' rows stood beside the new ones with stale counts. Real PostgreSQL, the
API and the scheduler's own pass."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.fields import ALL
from controlplane.metrics.windows import EPOCH
from controlplane.models import Task, Window, WindowMetrics
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.windowdata import (
    LATENESS,
    T0,
    WINDOW,
    apply_metrics_task,
    post_all,
    stored_results,
)

pytestmark = pytest.mark.integration


def _result(name: str, seconds: float, tokens: int = 300) -> dict[str, Any]:
    return make_result(
        request_id=name,
        task="metrics_task",
        ts=(T0 + timedelta(seconds=seconds)).isoformat(),
        input_tokens=tokens,
    )


def _windows(api: Api) -> list[tuple[datetime, datetime, list[int], dict[str, tuple[int, int]]]]:
    with session_scope(api.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == "metrics_task"))
        windows = session.scalars(
            select(Window).where(Window.task_id == task_id).order_by(Window.window_start)
        ).all()
        out = []
        for w in windows:
            rows = session.scalars(select(WindowMetrics).where(WindowMetrics.window_id == w.id))
            out.append(
                (
                    w.window_start,
                    w.window_end,
                    list(w.length_buckets),
                    {r.bucket: (r.n_results, r.n_late) for r in rows},
                )
            )
        return out


def _assert_each_result_counted_once(api: Api) -> list[tuple[datetime, datetime]]:
    windows = _windows(api)
    spans = [(start, end) for start, end, _, _ in windows]
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"windows overlap: {spans}"
    for start, _, buckets, rows in windows:
        assert set(rows) == {*bucket_labels(buckets), ALL}, (start, buckets, sorted(rows))
    counted = sum(rows[ALL][0] + rows[ALL][1] for _, _, _, rows in windows)
    stored = stored_results(api)
    assert counted == stored, f"{stored} results stored, {counted} counted: {windows}"
    return spans


def test_windows_made_longer_while_some_are_open(pg_metrics_api: Api) -> None:
    api = pg_metrics_api
    post_all(api, [_result(f"a-{i}", 5 + 15 * i) for i in range(11)])  # 02:00:05 to 02:02:35
    # 02:00 closes; 02:01 and 02:02 are open.
    run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS + 5))
    apply_metrics_task(api, window_seconds=2 * WINDOW)
    post_all(api, [_result(f"b-{i}", 170 + 20 * i) for i in range(6)])  # 02:02:50 to 02:04:30
    for k in range(1, 9):
        run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS + 5 + 60 * k))
    spans = _assert_each_result_counted_once(api)
    # The three one-minute windows kept their span; one runs from 02:03 to the next
    # two-minute boundary; then two-minute windows from 02:04.
    seconds = [((s - T0).total_seconds(), (e - T0).total_seconds()) for s, e in spans]
    assert seconds[:5] == [(0, 60), (60, 120), (120, 180), (180, 240), (240, 360)], seconds


def test_windows_made_shorter_and_a_late_result_for_a_long_one(pg_metrics_api: Api) -> None:
    api = pg_metrics_api
    apply_metrics_task(api, window_seconds=2 * WINDOW)
    post_all(api, [_result(f"a-{i}", 10 + 20 * i) for i in range(6)])  # in 02:00-02:02
    run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS + 1))
    apply_metrics_task(api, window_seconds=WINDOW)
    # Late for the closed two-minute window, in its second minute.
    post_all(api, [_result("late", 90)])
    post_all(api, [_result(f"b-{i}", 130 + 20 * i) for i in range(3)])  # 02:02:10 on
    for k in range(1, 5):
        run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS + 1 + 30 * k))
    spans = _assert_each_result_counted_once(api)
    assert spans[0] == (T0, T0 + timedelta(seconds=2 * WINDOW)), spans
    assert _windows(api)[0][3][ALL] == (6, 1)


def test_length_buckets_changed_while_a_window_is_open(pg_metrics_api: Api) -> None:
    api = pg_metrics_api
    post_all(api, [_result(f"a-{i}", 5 + 5 * i, tokens=300) for i in range(3)])
    run_pass(api.engine, T0 + timedelta(seconds=30))  # the window is open
    apply_metrics_task(api, length_buckets=[100])
    post_all(api, [_result(f"b-{i}", 25 + 5 * i, tokens=50) for i in range(3)])
    run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS + 1))
    _assert_each_result_counted_once(api)
    first = _windows(api)[0]
    assert first[2] == [100]
    assert first[3] == {"0-99": (3, 0), "100+": (3, 0), ALL: (6, 0)}, first[3]


def test_the_rules_number_only_windows_of_the_current_length(pg_metrics_api: Api) -> None:
    """After 60 → 90 s the one-minute windows 02:00 and 02:01 would both be window 80 by
    start // 90; the rules (rollout.repository.stage_windows, the span rules' shift reads)
    read the new length's windows from the change on, each numbered once."""
    from controlplane.catalog.service import task_runtimes
    from controlplane.metrics import shift
    from controlplane.rollout.repository import stage_windows

    api = pg_metrics_api
    post_all(api, [_result(f"a-{i}", 5 + 15 * i) for i in range(8)])  # 02:00:05 to 02:01:50
    run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS + 1))
    apply_metrics_task(api, window_seconds=90)
    post_all(api, [_result(f"b-{i}", 130 + 30 * i) for i in range(12)])  # 02:02:10 on
    for k in range(1, 12):
        run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS + 1 + 45 * k))
    _assert_each_result_counted_once(api)
    with session_scope(api.engine) as session:
        runtime = task_runtimes(session, {"metrics_task"})["metrics_task"]
        task = session.scalars(select(Task).where(Task.name == "metrics_task")).one()
        task.stage_changed_at = T0 - timedelta(hours=1)  # the windows are in its stage
        judged = stage_windows(session, task, runtime.config)
        spans = shift.span_windows(session, task.id, 90, T0)
    numbers = [n for n, _ in judged]
    assert numbers and len(numbers) == len(set(numbers)), numbers
    assert all(n * 90 >= (T0 - EPOCH).total_seconds() + 180 for n in numbers), numbers
    assert [w.window for w in spans] == sorted({w.window for w in spans}), spans

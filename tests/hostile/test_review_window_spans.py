"""Hostile review of afc766c (windows keep the span they were made with), a947ee5 and f9b4161
(the scan mark waits for the writers it saw). The invariant: every stored result of a task
is counted exactly once, in one window's `n_results` or `n_late`; a task's windows never
overlap; and what reads the windows (the close lag, the rules) reads them sensibly across a
`window_seconds` change. Each test is a defect found on real PostgreSQL through the API and
the scheduler's own functions; each was a strict xfail, now fixed."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from controlplane.db import session_scope
from controlplane.ingest import service as ingest_service
from controlplane.ingest import validation
from controlplane.ingest.scoring import IngestContext
from controlplane.metrics import repository
from controlplane.metrics import service as metrics
from controlplane.metrics.fields import ALL
from controlplane.metrics.windows import boundary_after
from controlplane.models import Result, ScanMark, Task, Window, WindowMetrics
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


def _result(name: str, at: datetime, **overrides: Any) -> dict[str, Any]:
    return make_result(request_id=name, task="metrics_task", ts=at.isoformat(), **overrides)


def _task_id(api: Api) -> int:
    with session_scope(api.engine) as session:
        found = session.scalar(select(Task.id).where(Task.name == "metrics_task"))
        assert found is not None
        return int(found)


def _windows(api: Api) -> list[tuple[datetime, datetime, int, int]]:
    """(start, end, n_results, n_late) of bucket `all` of each window, by start."""
    with session_scope(api.engine) as session:
        rows = session.execute(
            select(
                Window.window_start,
                Window.window_end,
                WindowMetrics.n_results,
                WindowMetrics.n_late,
            )
            .join(WindowMetrics, WindowMetrics.window_id == Window.id)
            .where(Window.task_id == _task_id(api), WindowMetrics.bucket == ALL)
            .order_by(Window.window_start)
        ).all()
        return [(s, e, int(n), int(late)) for s, e, n, late in rows]


def _assert_each_result_counted_once(api: Api) -> None:
    windows = _windows(api)
    spans = [(start, end) for start, end, _, _ in windows]
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"windows overlap: {spans}"
    counted = sum(n + late for _, _, n, late in windows)
    stored = stored_results(api)
    assert counted == stored, f"{stored} results stored, {counted} counted: {windows}"


def test_close_lag_is_zero_while_a_longer_window_is_legitimately_open(
    pg_metrics_api: Api,
) -> None:
    api = pg_metrics_api
    apply_metrics_task(api, window_seconds=600)
    with session_scope(api.engine) as session:
        created = session.scalar(select(Task.created_at).where(Task.name == "metrics_task"))
    assert created is not None
    # The first ten-minute boundary after the task was made: the pass at base + 30 s closes
    # the window before it and makes [base, base + 10 min), open until base + 10.5 min.
    base = boundary_after(created, 600)
    run_pass(api.engine, base + timedelta(seconds=LATENESS))
    apply_metrics_task(api, window_seconds=WINDOW)  # one-minute windows from now on
    at = base + timedelta(seconds=300)
    report = run_pass(api.engine, at)
    assert report.failed == []
    spans = [(s - base, e - base) for s, e, _, _ in _windows(api) if s >= base]
    # The ten-minute window keeps its span and is not due to close before base + 630 s.
    assert spans == [(timedelta(0), timedelta(seconds=600))], spans
    with session_scope(api.engine) as session:
        lags = {row.task: row.close_lag_seconds for row in metrics.lag(session, at)}
    assert lags["metrics_task"] == 0.0, lags


def _mark(api: Api) -> tuple[int, int, int]:
    with session_scope(api.engine) as session:
        mark = session.get(ScanMark, metrics.RESULTS_SCAN)
        assert mark is not None and mark.last_xmax is not None
        return mark.previous_id, mark.last_id, mark.last_xmax


def _settled_by_then(api: Api, xmax: int) -> None:
    """Wait until every transaction older than `xmax` has ended. Only those can hold the
    mark back (any begun since has a newer id): other tests' short writes end in moments."""
    deadline = time.monotonic() + 20
    with api.engine.connect() as probe:
        while time.monotonic() < deadline:
            xmin = probe.execute(
                text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            ).scalar_one()
            probe.rollback()
            if int(xmin) >= xmax:
                return
            time.sleep(0.05)


def test_a_writer_that_commits_between_the_scan_and_the_horizon_is_counted(
    pg_metrics_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = pg_metrics_api
    post_all(api, [_result(f"on-time-{i}", T0 + timedelta(seconds=10 + 5 * i)) for i in range(3)])
    close = T0 + timedelta(seconds=WINDOW + LATENESS)
    run_pass(api.engine, close)
    # A late result in an ingest transaction that takes its time: its id drawn now.
    valid, rejected = validation.validate_body(
        orjson.dumps({"results": [_result("slow-late", T0 + timedelta(seconds=20))]}), 1000
    )
    assert rejected == []
    slow = Session(api.engine)
    try:
        report = ingest_service.ingest(
            slow, valid, [], close, IngestContext(max_backfill=timedelta(days=36500))
        )
        assert report.accepted == 1
        # Another result, for the next window, is committed past it; a pass counts that one.
        quick = _result("quick", T0 + timedelta(seconds=WINDOW + 25))
        assert api.post_results(quick).json()["accepted"] == 1
        _settled_by_then(api, _mark(api)[2])
        run_pass(api.engine, close + timedelta(seconds=10))
        previous_id, last_id, _ = _mark(api)
        with session_scope(api.engine) as session:
            quick_id = session.scalar(select(Result.id).where(Result.request_id == "quick"))
        # The mark moved to the quick result; the scans still start before the slow one's.
        assert quick_id is not None and previous_id < quick_id - 1 and last_id == quick_id

        # The next pass scans while the slow writer is still open; the writer commits
        # right after that scan, and every other older transaction ends, before anything
        # else the pass reads.
        real = repository.windows_with_new_results

        def scan_then_commit(session: Session, *args: Any) -> Any:
            found = real(session, *args)
            if slow.in_transaction():
                slow.commit()
                mark = session.get(ScanMark, metrics.RESULTS_SCAN)
                assert mark is not None and mark.last_xmax is not None
                _settled_by_then(api, mark.last_xmax)
            return found

        monkeypatch.setattr(repository, "windows_with_new_results", scan_then_commit)
        run_pass(api.engine, close + timedelta(seconds=20))
        monkeypatch.setattr(repository, "windows_with_new_results", real)
    finally:
        slow.close()
    for k in range(3, 6):
        run_pass(api.engine, close + timedelta(seconds=10 * k))
    assert stored_results(api) == 5
    _assert_each_result_counted_once(api)


def test_two_passes_across_a_length_change_never_make_overlapping_windows(
    pg_metrics_api: Api,
) -> None:
    api = pg_metrics_api
    post_all(api, [_result(f"r-{i}", T0 + timedelta(seconds=10 + 20 * i)) for i in range(6)])
    now = T0 + timedelta(seconds=100)
    task_id = _task_id(api)
    # One pass plans under one-minute windows: jobs for 02:00 and 02:01.
    with session_scope(api.engine) as session:
        stale = metrics.plan(session, now).jobs
    assert [j.window_start for j in stale if j.task_id == task_id][:2] == [
        T0,
        T0 + timedelta(seconds=WINDOW),
    ], stale
    apply_metrics_task(api, window_seconds=2 * WINDOW)
    # Another pass, planned after the change, computes 02:00 (a two-minute window) while
    # the first computes its 02:01: each in its own transaction, as run_pass does.
    first = Session(api.engine)
    done: list[Any] = []

    def the_other_pass() -> None:
        with session_scope(api.engine) as second:
            done.append(
                metrics.compute_window(
                    second, task_id=task_id, window_start=T0 + timedelta(seconds=WINDOW), now=now
                )
            )

    other = threading.Thread(target=the_other_pass)
    try:
        made = metrics.compute_window(first, task_id=task_id, window_start=T0, now=now)
        assert made.n_results == 6
        other.start()
        # The other pass waits for this one's new window (it must not make its own beside
        # it); this one commits a moment later.
        other.join(timeout=1.0)
        assert other.is_alive(), "the other pass made its window without waiting"
        first.commit()
    finally:
        first.close()
    other.join(timeout=30)
    assert not other.is_alive()
    # It computed the two-minute window the first pass made.
    assert [(c.window_start, c.n_results) for c in done] == [(T0, 6)], done
    _assert_each_result_counted_once(api)

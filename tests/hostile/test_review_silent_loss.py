"""Hostile review: data accepted by ingest that no window ever counts, with nothing said.

The house rule: nothing accepted is lost, and whatever is dropped is counted and said. A
closed window counts a result that arrives after it closed in its `n_late` (docs/evidence.md,
"Windows"), so every stored result of a task is in exactly one window's `n_results` or
`n_late`. Each test below finds a stored result that is in neither, on real PostgreSQL,
through the API and the scheduler's own pass. Both were strict xfails; both are fixed
(afc766c: windows keep their span; the scan mark waits for the writers it saw).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy.orm import Session

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.ingest import service, validation
from controlplane.ingest.scoring import IngestContext
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.windowdata import LATENESS, METRICS_TASK, T0, WINDOW, post_all, stored_results


def _result(name: str, seconds: float, **overrides: Any) -> dict[str, Any]:
    return make_result(
        request_id=name,
        task="metrics_task",
        ts=(T0 + timedelta(seconds=seconds)).isoformat(),
        **overrides,
    )


def _counted(api: Api) -> dict[str, tuple[int, int]]:
    """Each window's (n_results, n_late) of bucket `all`, by window start, from the API."""
    response = api.client.get(
        "/v1/tasks/metrics_task/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()},
        headers=api.headers("read"),
    )
    assert response.status_code == 200, response.text
    return {
        row["window_start"]: (row["n_results"], row["n_late"])
        for row in response.json()["windows"]
        if row["bucket"] == "all"
    }


def _wait_for_window_seconds(api: Api, seconds: int) -> None:
    # A new config version applies within a second (catalog.service.RuntimeCache).
    deadline = time.monotonic() + 10
    while True:
        with session_scope(api.engine) as session:
            runtime = task_runtimes(session, {"metrics_task"})["metrics_task"]
        if runtime.config.window_seconds == seconds:
            return
        assert time.monotonic() < deadline, "the new config never applied"
        time.sleep(0.1)


@pytest.mark.integration
def test_a_late_result_after_window_seconds_changed_is_counted_late(
    pg_metrics_api: Api,
) -> None:
    api = pg_metrics_api
    # Two one-minute windows, 02:00 and 02:01, three results each; both closed.
    post_all(api, [_result(f"on-time-{i}", 10 + 20 * i) for i in range(6)])
    run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS + 1))
    before = _counted(api)
    assert sum(n for n, _ in before.values()) == 6 and sum(late for _, late in before.values()) == 0

    # The task's next config version has two-minute windows (a plain config change).
    changed = api.client.post(
        "/v1/tasks", json={**METRICS_TASK, "window_seconds": 2 * WINDOW}, headers=api.headers()
    )
    assert changed.status_code == 201, changed.text
    _wait_for_window_seconds(api, 2 * WINDOW)

    # A result for 02:01:30 (inside the closed 02:01 window) arrives late; it is accepted.
    answer = api.post_results({"results": [_result("late", 90)]}).json()
    assert answer == {"accepted": 1, "duplicates": 0, "rejected": []}
    run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS + 5))

    after = _counted(api)
    stored = stored_results(api)
    counted = sum(n + late for n, late in after.values())
    # Every stored result is in some window, on time or late: 7 stored, 7 counted.
    assert stored == 7
    assert counted == stored, f"{stored} results stored, {counted} in the windows: {after}"


@pytest.mark.integration
def test_a_late_batch_committed_after_two_passes_is_counted_late(
    pg_metrics_api: Api,
) -> None:
    api = pg_metrics_api
    post_all(api, [_result(f"on-time-{i}", 10 + 5 * i) for i in range(3)])
    close = T0 + timedelta(seconds=WINDOW + LATENESS)
    run_pass(api.engine, close)
    assert _counted(api)[T0.isoformat()] == (3, 0)

    # A late result for the closed window, in an ingest transaction that takes its time
    # (waiting on a lock, a slow disk): its row's id is drawn now, committed later. This is
    # the endpoint's own path: validate the body, then ingest.ingest in one transaction.
    body = orjson.dumps({"results": [_result("slow-late", 20)]})
    valid, rejected = validation.validate_body(body, 1000)
    assert rejected == []
    slow = Session(api.engine)
    try:
        report = service.ingest(
            slow,
            valid,
            [],
            T0 + timedelta(seconds=WINDOW + LATENESS + 1),
            IngestContext(max_backfill=timedelta(days=36500)),
        )
        assert report.accepted == 1

        # Meanwhile another late result is posted and committed, and two passes run.
        assert api.post_results(_result("quick-late", 25)).json()["accepted"] == 1
        run_pass(api.engine, close + timedelta(seconds=10))
        run_pass(api.engine, close + timedelta(seconds=20))
        assert _counted(api)[T0.isoformat()] == (3, 1)
        slow.commit()
    finally:
        slow.close()

    # The slow batch is stored, and the passes after it go on.
    run_pass(api.engine, close + timedelta(seconds=30))
    run_pass(api.engine, close + timedelta(seconds=40))
    assert stored_results(api) == 5
    window = _counted(api)[T0.isoformat()]
    assert window == (3, 2), f"5 results stored in the 02:00 window, counted as {window}"

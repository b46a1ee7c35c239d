"""Daily partitions on PostgreSQL: results and payloads land in their day's partition, the
days ahead are created (by `migrate`, the beat's job and the in-process scheduler), retention
drops whole days with their counts, and a request id counts once across days. SQLite keeps
one table behind the same repository."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select, text

from controlplane.db import get_engine, session_scope
from controlplane.ingest.retention import prune
from controlplane.models import Result, ResultKey, WindowMetrics
from controlplane.models.partitions import (
    DAYS_AHEAD,
    ensure_partitions,
    is_partitioned,
    keep_partitions,
    partition_days,
)
from controlplane.scheduler import InProcessScheduler, run_pass
from tests.conftest import Api, make_api, make_result
from tests.liveapi import run_cli
from tests.windowdata import post_all

pytestmark = pytest.mark.integration

TODAY = datetime.now(UTC).date()
MIDNIGHT = datetime.combine(TODAY, datetime.min.time(), tzinfo=UTC)


def conflicts(prefix: str, start: datetime, step: timedelta, n: int) -> list[dict[str, Any]]:
    """`n` results `step` apart from `start`, each a conflict (which keeps its payload)."""
    return [
        make_result(
            request_id=f"{prefix}-{i}",
            ts=(start + i * step).isoformat(),
            edge={"output": "exchange"},
        )
        for i in range(n)
    ]


def _rows(api: Api, table: str) -> int:
    with get_engine(api.url).connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()


def _tables(api: Api) -> set[str]:
    return set(inspect(get_engine(api.url)).get_table_names())


def test_results_and_payloads_land_in_their_days_partition(pg_api: Api) -> None:
    yesterday = MIDNIGHT - timedelta(days=1)
    post_all(
        pg_api,
        conflicts("y", yesterday, timedelta(hours=1), 3)
        + conflicts("t", MIDNIGHT, timedelta(seconds=1), 25),
    )
    y, t = f"{yesterday:%Y%m%d}", f"{MIDNIGHT:%Y%m%d}"
    assert (_rows(pg_api, f"results_p{y}"), _rows(pg_api, f"payloads_p{y}")) == (3, 3)
    # 25 results: the COPY path, straight into the partitioned tables.
    assert (_rows(pg_api, f"results_p{t}"), _rows(pg_api, f"payloads_p{t}")) == (25, 25)
    assert _rows(pg_api, "results_default") == _rows(pg_api, "payloads_default") == 0
    assert _rows(pg_api, "result_keys") == 28


def test_a_request_id_counts_once_across_days_even_sent_at_once(pg_api: Api) -> None:
    """No unique key spans partitions: result_keys does. Two routers send the same request
    ids at the same moment with `ts` on different days; each id is stored once."""
    ids = [f"race-{i}" for i in range(60)]
    answers: list[dict] = []

    def send(day: datetime) -> None:
        body = {"results": [make_result(request_id=r, ts=day.isoformat()) for r in ids]}
        answers.append(pg_api.post_results(body).json())

    threads = [
        threading.Thread(target=send, args=(MIDNIGHT - timedelta(days=d),)) for d in (1, 2, 3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(a["accepted"] for a in answers) == [0, 0, 60]
    assert sum(a["duplicates"] for a in answers) == 120
    with session_scope(pg_api.engine) as session:
        assert session.scalar(select(func.count()).select_from(Result)) == 60
        assert session.scalar(select(func.count()).select_from(ResultKey)) == 60


def test_days_ahead_are_created_and_a_day_the_default_holds_is_left_alone(pg_api: Api) -> None:
    engine = pg_api.engine
    with engine.begin() as conn:
        assert is_partitioned(conn)
        have = set(partition_days(conn))
    # `migrate` made yesterday to DAYS_AHEAD days ahead.
    assert {TODAY + timedelta(days=d) for d in range(-1, DAYS_AHEAD + 1)} <= have
    later = TODAY + timedelta(days=20)
    # A row of a day no partition covers sits in the default partition...
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO results_default (task_id, request_id, ts, received_at, input_tokens,"
                " decision, served, degraded, config_version, bucket, comparator,"
                " comparator_version, edge_ran, cloud_ran) SELECT id, 'far', :ts, :ts, 1, 'edge',"
                " 'edge', false, 1, '-', 'label', 1, true, true FROM tasks LIMIT 1"
            ),
            {"ts": datetime.combine(later, datetime.min.time(), tzinfo=UTC)},
        )
    # ...so keeping partitions up to that day skips it (PostgreSQL would refuse it), makes
    # the others, and a second run makes nothing.
    with engine.begin() as conn:
        created = ensure_partitions(conn, later - timedelta(days=1), behind=0, ahead=2)
    assert created.skipped == [later]
    assert created.days == [later - timedelta(days=1), later + timedelta(days=1)]
    with engine.begin() as conn:
        again = ensure_partitions(conn, later - timedelta(days=1), behind=0, ahead=2)
    assert (again.days, again.skipped) == ([], [later])


def test_the_beat_job_creates_the_days_ahead(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from shadowplane_workers import jobs
    from shadowplane_workers.schedule import PARTITIONS_JOB, beat_schedule

    monkeypatch.setattr(jobs, "get_engine", lambda: get_engine(pg_url))
    assert beat_schedule(jobs.get_settings())["day-partitions"]["task"] == PARTITIONS_JOB
    week = MIDNIGHT + timedelta(days=7)
    made = jobs.keep_partitions_job.apply(kwargs={"now": week.isoformat()}).get()
    expected = [
        (TODAY + timedelta(days=d)).isoformat() for d in range(DAYS_AHEAD + 1, 7 + DAYS_AHEAD + 1)
    ]
    assert made == expected
    with get_engine(pg_url).connect() as conn:
        assert (week + timedelta(days=DAYS_AHEAD)).date() in partition_days(conn)


def test_the_in_process_scheduler_creates_the_days_ahead(pg_url: str) -> None:
    engine = get_engine(pg_url)
    last = TODAY + timedelta(days=DAYS_AHEAD)
    with engine.begin() as conn:
        for table in ("payloads", "results"):
            conn.execute(text(f"DROP TABLE {table}_p{last:%Y%m%d}"))
        assert last not in partition_days(conn)
    scheduler = InProcessScheduler(engine, 3600, veto=0.0)
    scheduler.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if last in partition_days(conn):
                    break
            time.sleep(0.2)
    finally:
        scheduler.stop()
    with engine.connect() as conn:
        assert last in partition_days(conn)


def test_prune_drops_whole_days_and_counts_them(pg_api: Api) -> None:
    engine = pg_api.engine
    with engine.begin() as conn:
        ensure_partitions(conn, TODAY, behind=45, ahead=0)
    old_day = MIDNIGHT - timedelta(days=40)
    cut = MIDNIGHT - timedelta(days=30) + timedelta(hours=12)  # mid-day
    results = (
        conflicts("old", old_day, timedelta(minutes=1), 30)
        # The day the cut-off falls in: before and after it.
        + conflicts("cut", cut - timedelta(hours=6), timedelta(hours=12), 2)
        + [make_result(request_id=f"new-{i}", ts=MIDNIGHT.isoformat()) for i in range(4)]
    )
    post_all(pg_api, results)
    run_pass(engine, old_day + timedelta(hours=2))
    with session_scope(engine) as session:
        windows = session.scalar(select(func.count()).select_from(WindowMetrics))
    assert windows

    pruned = prune(engine, before=cut, batch_size=7)
    # The old day is dropped whole: no row deleted one by one; its 30 results and their
    # payloads counted; its key rows gone (deleted in batches: they are narrow).
    assert pruned.days_dropped == [TODAY - timedelta(days=d) for d in range(45, 30, -1)]
    assert f"results_p{old_day:%Y%m%d}" not in _tables(pg_api)
    assert f"payloads_p{old_day:%Y%m%d}" not in _tables(pg_api)
    assert (pruned.results, pruned.payloads, pruned.batches) == (30, 30, 0)
    assert pruned.keys == 30
    # The cut-off's day stays whole until it is wholly older: the cut-off became its midnight.
    assert pruned.before == MIDNIGHT - timedelta(days=30)
    with session_scope(engine) as session:
        left = sorted(session.scalars(select(Result.request_id)))
        assert left == ["cut-0", "cut-1", *[f"new-{i}" for i in range(4)]]
        assert session.scalar(select(func.count()).select_from(ResultKey)) == 6
        assert session.scalar(select(func.count()).select_from(WindowMetrics)) == windows
    # A resend of a dropped result is new again (its key went with it); of a kept one, not.
    again = pg_api.post_results(
        {
            "results": [
                make_result(request_id="old-0", ts=MIDNIGHT.isoformat()),
                make_result(request_id="cut-0", ts=MIDNIGHT.isoformat()),
            ]
        }
    ).json()
    assert (again["accepted"], again["duplicates"]) == (1, 1)


def test_prune_deletes_rows_of_the_default_partition_in_batches(pg_api: Api) -> None:
    # 70 days back: older than any partition `migrate` makes, so in the default partition.
    far = MIDNIGHT - timedelta(days=70)
    post_all(pg_api, conflicts("far", far, timedelta(seconds=1), 12))
    assert _rows(pg_api, "results_default") == 12
    pruned = prune(pg_api.engine, before=MIDNIGHT - timedelta(days=30), batch_size=5)
    assert (pruned.results, pruned.payloads, pruned.batches, pruned.keys) == (12, 12, 3, 12)
    assert pruned.days_dropped == []
    assert _rows(pg_api, "results_default") == _rows(pg_api, "payloads_default") == 0


def test_sqlite_stays_one_table_behind_the_same_repository(sqlite_url: str) -> None:
    for api in make_api(sqlite_url):
        with api.engine.connect() as conn:
            assert not is_partitioned(conn)
            assert partition_days(conn) == []
        assert keep_partitions(api.engine, datetime.now(UTC), timedelta(days=7)).days == []
        sent = [
            make_result(request_id="s-1", ts=(MIDNIGHT - timedelta(days=d)).isoformat())
            for d in (1, 2)
        ]
        assert api.post_results({"results": sent}).json()["accepted"] == 1
        pruned = prune(api.engine, before=MIDNIGHT - timedelta(hours=12))
        assert (pruned.results, pruned.keys, pruned.days_dropped) == (1, 1, [])
        assert pruned.before == MIDNIGHT - timedelta(hours=12)


def test_tick_creates_the_days_ahead_as_the_beat_does(pg_url: str, tmp_path: Path) -> None:
    """Cron running `shadowplane tick` instead of Celery keeps the partitions too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = pg_url
    later = MIDNIGHT + timedelta(days=10)
    done = run_cli(["tick", "--now", later.isoformat()], env, tmp_path)
    assert done.returncode == 0, done.stderr
    last = (later + timedelta(days=DAYS_AHEAD)).date()
    assert "day partitions created: " in done.stdout and last.isoformat() in done.stdout
    with get_engine(pg_url).connect() as conn:
        assert last in partition_days(conn)


def test_a_day_being_read_is_not_waited_for_long_and_is_dropped_by_the_next_prune(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.ingest import retention

    monkeypatch.setattr(retention, "DROP_ATTEMPTS", 2)
    monkeypatch.setattr(retention, "DROP_PAUSE", 0.0)
    engine = pg_api.engine
    old = TODAY - timedelta(days=40)
    with engine.begin() as conn:
        ensure_partitions(conn, old, behind=0, ahead=0)
    post_all(
        pg_api, [make_result(request_id="old", ts=(MIDNIGHT - timedelta(days=40)).isoformat())]
    )
    # A long read holds the day (as a slow query would): prune gives up on it, says so, and
    # drops nothing of it.
    with engine.connect() as reader:
        reader.execute(text(f"SELECT count(*) FROM results_p{old:%Y%m%d}"))
        pruned = prune(engine, before=MIDNIGHT - timedelta(days=30))
        reader.rollback()
    assert (pruned.days_busy, pruned.days_dropped, pruned.results) == ([old], [], 0)
    assert f"results_p{old:%Y%m%d}" in _tables(pg_api)
    again = prune(engine, before=MIDNIGHT - timedelta(days=30))
    assert (again.days_dropped, again.results, again.days_busy) == ([old], 1, [])


def test_migrate_is_not_failed_by_a_day_it_cannot_create_in_time(pg_url: str) -> None:
    from controlplane.migrate import upgrade

    engine = get_engine(pg_url)
    last = TODAY + timedelta(days=DAYS_AHEAD)
    with engine.begin() as conn:
        for table in ("payloads", "results"):
            conn.execute(text(f"DROP TABLE {table}_p{last:%Y%m%d}"))
    with engine.connect() as reader:  # a long read of results holds its lock meanwhile
        reader.execute(text("SELECT count(*) FROM results"))
        upgrade(pg_url)  # the schema is current; the day waits for the beat
        reader.rollback()
    with engine.connect() as conn:
        assert last not in partition_days(conn)
    upgrade(pg_url)
    with engine.connect() as conn:
        assert last in partition_days(conn)

"""`prune`: old results and their payloads go, in batches, counted; window metrics stay."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from controlplane.db import get_engine, session_scope
from controlplane.ingest.retention import _prune_keys, parse_duration, prune
from controlplane.models import Payload, Result, WindowMetrics
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.liveapi import run_cli
from tests.windowdata import post_all

NOW = datetime.now(UTC).replace(microsecond=0)


def _counts(api: Api) -> tuple[int, int, int]:
    with session_scope(api.engine) as session:
        return (
            session.scalar(select(func.count()).select_from(Result)) or 0,
            session.scalar(select(func.count()).select_from(Payload)) or 0,
            session.scalar(select(func.count()).select_from(WindowMetrics)) or 0,
        )


def test_prune_deletes_old_results_and_payloads_in_batches_and_keeps_metrics(api: Api) -> None:
    old = NOW - timedelta(days=40)
    results = [
        # Conflicts keep their payloads (probability 1); recent ones must survive.
        make_result(
            request_id=f"old-{i}",
            ts=(old + timedelta(seconds=i)).isoformat(),
            edge={"output": "exchange"},
        )
        for i in range(25)
    ] + [
        make_result(
            request_id=f"new-{i}",
            ts=(NOW - timedelta(days=1)).isoformat(),
            edge={"output": "exchange"},
        )
        for i in range(5)
    ]
    post_all(api, results)
    run_pass(api.engine, old + timedelta(hours=1))
    before = _counts(api)
    assert before[:2] == (30, 30) and before[2] > 0

    pruned = prune(api.engine, before=NOW - timedelta(days=30), batch_size=10)
    assert (pruned.results, pruned.payloads, pruned.batches) == (25, 25, 3)
    assert _counts(api) == (5, 5, before[2])
    with session_scope(api.engine) as session:
        assert sorted(session.scalars(select(Result.request_id))) == [f"new-{i}" for i in range(5)]
    assert prune(api.engine, before=NOW - timedelta(days=30)).results == 0


def test_durations_parse_or_say_what_is_allowed() -> None:
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("90m") == timedelta(minutes=90)
    for bad in ("30", "0d", "-1d", "1w", "d30", ""):
        with pytest.raises(ValueError, match="e.g. 30d"):
            parse_duration(bad)


def test_prune_command_reports_what_it_deleted(sqlite_url: str, tmp_path: Path) -> None:
    # A migrated database (a copy of the migrated template), the command a process of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = sqlite_url
    done = run_cli(["prune", "--older-than", "30d"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deleted 0 results and 0 payloads with ts before ")
    bad = run_cli(["prune", "--older-than", "a month"], env, tmp_path)
    assert bad.returncode == 1 and "older-than: 'a month' is not a duration" in bad.stderr


@pytest.mark.integration
def test_a_key_batch_reads_its_own_keys_not_the_whole_key_table(pg_url: str) -> None:
    """Pruning keys by the batch: every key older than the cut-off (as after a long outage
    of the daily prune), 30,000 of them and a batch of 1,000. Matched back by (task, request
    id), the planner hash-joined the batch against the whole table (a full read per batch,
    quadratic in the backlog); by their row addresses a batch reads about its own keys."""
    engine = get_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO result_keys (task_id, request_id, ts) "
                "SELECT 1, 'backlog-' || g, now() - interval '40 days' "
                "FROM generate_series(1, 30000) AS g"
            )
        )
        conn.execute(text("ANALYZE result_keys"))
    with session_scope(engine) as session:
        deleted = _prune_keys(session, before=NOW - timedelta(days=30), batch_size=1000)
        # This transaction's own reads of the table (no statistics collector delay).
        read = session.execute(
            text(
                "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
                "WHERE relname = 'result_keys'"
            )
        ).scalar_one()
    assert deleted == 1000
    assert read <= 2 * 1000, read
    with engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM result_keys")).scalar_one()
    assert left == 29000

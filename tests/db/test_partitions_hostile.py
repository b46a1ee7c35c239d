"""Day partitions under hostile input and operation, on real PostgreSQL: times at midnight
and in other offsets, odd request ids on both write paths, resends with another time,
prune while a day is busy or while ingest writes, prune with a cut-off in another offset,
two creators of days at once, and the conversion down and up on old data."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from alembic import command
from sqlalchemy import Engine, select, text

from controlplane.db import get_engine, session_scope
from controlplane.ingest import repository, retention
from controlplane.ingest.retention import prune
from controlplane.migrate import alembic_config, upgrade
from controlplane.models.partitions import (
    DAYS_AHEAD,
    ensure_partitions,
    keep_partitions,
    partition_days,
)
from tests.conftest import Api, make_result
from tests.db.test_partitions import MIDNIGHT, TODAY
from tests.liveapi import run_cli

pytestmark = pytest.mark.integration

CONFLICT = {"output": "exchange"}  # against the cloud's "refund": a conflict keeps its payload


def _count(engine: Engine, sql: str, **params: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def _wait_for_a_lock_waiter(engine: Engine, waiters: int = 1) -> None:
    """Until that many lock requests wait (at most 20 s)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if _count(engine, "SELECT count(*) FROM pg_locks WHERE NOT granted") >= waiters:
            return
        time.sleep(0.02)


def _where(engine: Engine, request_id: str) -> list[tuple[str, str]]:
    """The partitions holding a request id's result and its payload."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.tableoid::regclass::text, p.tableoid::regclass::text FROM results r "
                "LEFT JOIN payloads p ON p.result_id = r.id AND p.result_ts = r.ts "
                "WHERE r.request_id = :rid"
            ),
            {"rid": request_id},
        ).all()
    return [(r[0], r[1]) for r in rows]


def _get(api: Api, request_id: str, task: str = "ticket_classify") -> Any:
    return api.client.get(
        f"/v1/results/{task}/{quote(request_id, safe='')}", headers=api.headers("read")
    )


def _keys_match_results(engine: Engine) -> tuple[int, int, int]:
    """(results, results without a key, keys without a result)."""
    with engine.connect() as conn:
        results = conn.execute(text("SELECT count(*) FROM results")).scalar_one()
        unkeyed = conn.execute(
            text(
                "SELECT count(*) FROM results r WHERE NOT EXISTS (SELECT 1 FROM result_keys k "
                "WHERE k.task_id = r.task_id AND k.request_id = r.request_id)"
            )
        ).scalar_one()
        orphans = conn.execute(
            text(
                "SELECT count(*) FROM result_keys k WHERE NOT EXISTS (SELECT 1 FROM results r "
                "WHERE r.task_id = k.task_id AND r.request_id = k.request_id)"
            )
        ).scalar_one()
    return results, unkeyed, orphans


# --- times ----------------------------------------------------------------------------------


def test_a_time_lands_in_its_utc_days_partition_whatever_its_offset(pg_api: Api) -> None:
    day = MIDNIGHT - timedelta(days=2)
    sent = {
        # Exactly midnight: the new day (bounds are [from, to)).
        "midnight-z": (day.isoformat().replace("+00:00", "Z"), day),
        # The same instant written in +05:00 and -01:00 (another local date each).
        "midnight-plus5": (day.astimezone(timezone(timedelta(hours=5))).isoformat(), day),
        "midnight-minus1": (day.astimezone(timezone(timedelta(hours=-1))).isoformat(), day),
        # The last microsecond of the day before.
        "last-micro": ((day - timedelta(microseconds=1)).isoformat(), day - timedelta(days=1)),
        # 13:30 on the local calendar of +14:00 is 23:30 UTC the day before.
        "plus14": (
            (day - timedelta(minutes=30)).astimezone(timezone(timedelta(hours=14))).isoformat(),
            day - timedelta(days=1),
        ),
        # No offset at all: read as UTC.
        "naive": (day.replace(tzinfo=None).isoformat(), day),
    }
    report = pg_api.post_results(
        {
            "results": [
                make_result(request_id=r, ts=ts, edge=CONFLICT) for r, (ts, _) in sent.items()
            ]
        }
    ).json()
    assert (report["accepted"], report["rejected"]) == (len(sent), [])
    for request_id, (_, utc_day) in sent.items():
        part = f"p{utc_day:%Y%m%d}"
        assert _where(pg_api.engine, request_id) == [(f"results_{part}", f"payloads_{part}")]
        got = _get(pg_api, request_id).json()
        assert got["edge"]["output"] == "exchange", request_id


def test_a_day_held_by_the_default_partition_stays_readable_and_is_pruned(pg_api: Api) -> None:
    """A result older than any partition lands in the default one; creating its day later
    leaves the day alone (nothing refused, nothing lost), and prune still removes it."""
    far = MIDNIGHT - timedelta(days=70)
    assert (
        pg_api.post_results(
            {"results": [make_result(request_id="far", ts=far.isoformat(), edge=CONFLICT)]}
        ).json()["accepted"]
        == 1
    )
    assert _where(pg_api.engine, "far") == [("results_default", "payloads_default")]
    with pg_api.engine.begin() as conn:
        created = ensure_partitions(conn, far.date(), behind=1, ahead=1)
    assert created.skipped == [far.date()]
    assert _get(pg_api, "far").json()["edge"]["output"] == "exchange"
    # A resend on another day is still a duplicate.
    again = pg_api.post_results(
        {"results": [make_result(request_id="far", ts=MIDNIGHT.isoformat())]}
    )
    assert again.json()["duplicates"] == 1
    pruned = prune(pg_api.engine, before=MIDNIGHT - timedelta(days=30))
    assert (pruned.results, pruned.payloads, pruned.keys) == (1, 1, 1)
    assert _keys_match_results(pg_api.engine) == (0, 0, 0)


# --- request ids ----------------------------------------------------------------------------

ODD_IDS = [
    "NULL",
    "null",
    'quote"d',
    "back\\slash",
    "{brace,comma}",
    " leading and trailing ",
    "tab\tnew\nline",
    "é-composed",
    "e\u0301-decomposed",
    "x" * 200,
    "🦄" * 200,
    "a" + "\u0301" * 199,
    "\u202eRTL\u200dZWJ",
    "'; DROP TABLE results; --",
]


@pytest.mark.parametrize("path", ["small", "copy"])
def test_odd_request_ids_are_stored_once_and_read_back_on_both_write_paths(
    pg_api: Api, path: str
) -> None:
    ids = list(ODD_IDS)
    if path == "copy":  # at least COPY_MIN_ROWS new rows: the binary COPY path
        ids += [f"pad-{i}" for i in range(repository.COPY_MIN_ROWS)]
    assert (len(ids) >= repository.COPY_MIN_ROWS) == (path == "copy")
    ts = (MIDNIGHT - timedelta(hours=1)).isoformat()
    body = {"results": [make_result(request_id=r, ts=ts, edge=CONFLICT) for r in ids]}
    report = pg_api.post_results(body).json()
    assert (report["accepted"], report["rejected"]) == (len(ids), [])
    for request_id in ODD_IDS:
        got = _get(pg_api, request_id)
        assert got.status_code == 200, request_id
        assert got.json()["request_id"] == request_id
        assert got.json()["edge"]["output"] == "exchange"
    # Resent (on another day): every one a duplicate, nothing stored twice.
    resend = {"results": [make_result(request_id=r, ts=MIDNIGHT.isoformat()) for r in ids]}
    assert pg_api.post_results(resend).json()["duplicates"] == len(ids)
    assert _keys_match_results(pg_api.engine) == (len(ids), 0, 0)


@pytest.mark.parametrize("size", [2, 30])
def test_a_resend_in_the_same_batch_with_another_day_keeps_the_first(
    pg_api: Api, size: int
) -> None:
    first, second = MIDNIGHT - timedelta(days=1), MIDNIGHT - timedelta(days=2)
    results = []
    for i in range(size // 2):
        results.append(make_result(request_id=f"dup-{i}", ts=first.isoformat(), edge=CONFLICT))
        results.append(make_result(request_id=f"dup-{i}", ts=second.isoformat()))
    report = pg_api.post_results({"results": results}).json()
    assert (report["accepted"], report["duplicates"]) == (size // 2, size // 2)
    for i in range(size // 2):
        part = f"p{first:%Y%m%d}"
        assert _where(pg_api.engine, f"dup-{i}") == [(f"results_{part}", f"payloads_{part}")]
    with pg_api.engine.connect() as conn:
        key_ts = set(conn.execute(text("SELECT ts FROM result_keys")).scalars())
    assert key_ts == {first}


# --- prune ----------------------------------------------------------------------------------


def test_prune_never_removes_a_result_after_a_cut_off_given_in_another_offset(
    pg_api: Api,
) -> None:
    """The cut-off 2026-…T01:00+05:00 is 20:00 UTC the day before: that UTC day (its
    midnight) is where the cut-off falls, not the local calendar's next day."""
    day = MIDNIGHT - timedelta(days=40)
    with pg_api.engine.begin() as conn:
        ensure_partitions(conn, TODAY, behind=45, ahead=0)
    cut = day + timedelta(hours=20)
    pg_api.post_results(
        {
            "results": [
                make_result(request_id="after-cut", ts=(day + timedelta(hours=22)).isoformat())
            ]
        }
    )
    pruned = prune(pg_api.engine, before=cut.astimezone(timezone(timedelta(hours=5))))
    assert pruned.before is not None and pruned.before <= cut
    assert _where(pg_api.engine, "after-cut") != []


def test_a_busy_day_keeps_its_request_ids_so_a_resend_is_still_a_duplicate(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "DROP_ATTEMPTS", 1)
    engine = pg_api.engine
    old = TODAY - timedelta(days=40)
    with engine.begin() as conn:
        ensure_partitions(conn, old, behind=0, ahead=0)
    ts = (MIDNIGHT - timedelta(days=40)).isoformat()
    pg_api.post_results({"results": [make_result(request_id="busy", ts=ts)]})
    with engine.connect() as reader:  # a slow query reads the day: prune steps aside
        reader.execute(text(f"SELECT count(*) FROM results_p{old:%Y%m%d}"))
        pruned = prune(engine, before=MIDNIGHT - timedelta(days=30))
        reader.rollback()
    assert (pruned.days_busy, pruned.results) == ([old], 0)
    # The day's result is still there, so its request id must still count once.
    again = pg_api.post_results({"results": [make_result(request_id="busy", ts=ts)]}).json()
    assert (again["accepted"], again["duplicates"]) == (0, 1)
    assert _keys_match_results(engine) == (1, 0, 0)


def test_dropping_a_day_while_ingest_writes_takes_the_tables_in_ingests_order(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest locks `results`, then `payloads`. Dropping a day must take them in that order
    too: the other order deadlocks with a batch between its two inserts."""
    monkeypatch.setattr(retention, "DROP_PAUSE", 0.0)
    engine = pg_api.engine
    old = TODAY - timedelta(days=40)
    with engine.begin() as conn:
        ensure_partitions(conn, old, behind=0, ahead=0)
    paused, go = threading.Event(), threading.Event()
    calls: list[int] = []
    real = repository.insert_payload

    def slow_insert_payload() -> Any:
        calls.append(1)
        if len(calls) == 1:  # between the results' insert and the payloads'
            paused.set()
            go.wait(30)
        return real()

    monkeypatch.setattr(repository, "insert_payload", slow_insert_payload)
    answers: list[Any] = []
    ingest = threading.Thread(
        target=lambda: answers.append(
            pg_api.post_results(
                {"results": [make_result(request_id="now", ts=MIDNIGHT.isoformat(), edge=CONFLICT)]}
            ).json()
        )
    )
    ingest.start()
    assert paused.wait(30)
    pruned: list[retention.Pruned] = []
    pruning = threading.Thread(
        target=lambda: pruned.append(prune(engine, before=MIDNIGHT - timedelta(days=30)))
    )
    failures: list[str] = []
    real_drop = retention.drop_day

    def drop_day(connection: Any, day: Any) -> Any:
        try:
            return real_drop(connection, day)
        except Exception as exc:
            failures.append(str(exc))
            raise

    monkeypatch.setattr(retention, "drop_day", drop_day)
    pruning.start()
    # Let the batch go on once prune waits for a lock the batch holds.
    _wait_for_a_lock_waiter(engine)
    go.set()
    ingest.join(60)
    pruning.join(60)
    assert answers and answers[0]["accepted"] == 1
    assert pruned and old in pruned[0].days_dropped
    deadlocks = [w for w in failures if "deadlock" in w]
    assert deadlocks == [] and calls == [1], "the batch and the drop deadlocked"


def test_prune_while_ingest_writes_loses_nothing_and_counts_each_row_once(pg_api: Api) -> None:
    engine = pg_api.engine
    with engine.begin() as conn:
        ensure_partitions(conn, TODAY, behind=45, ahead=0)
    cut = MIDNIGHT - timedelta(days=30)
    old_days = [MIDNIGHT - timedelta(days=d) for d in (40, 35, 70)]  # 70: the default partition
    accepted: list[int] = []
    stop = threading.Event()

    def ingest(worker: int) -> None:
        n = 0
        while not stop.is_set() and n < 40:
            batch = [
                make_result(
                    request_id=f"w{worker}-{n}-{j}",
                    ts=(old_days[(n + j) % 3] + timedelta(seconds=j)).isoformat(),
                    edge=CONFLICT,
                )
                for j in range(25 if n % 2 else 5)  # both write paths
            ]
            accepted.append(pg_api.post_results({"results": batch}).json()["accepted"])
            n += 1

    workers = [threading.Thread(target=ingest, args=(w,)) for w in range(2)]
    for worker in workers:
        worker.start()
    pruned_total = 0
    runs = 0
    while any(w.is_alive() for w in workers) and runs < 30:
        pruned_total += prune(engine, before=cut, batch_size=7).results
        runs += 1
    stop.set()
    for worker in workers:
        worker.join(120)
    # Whatever arrived after the last run is removed by the next one.
    pruned_total += prune(engine, before=cut, batch_size=7).results
    assert pruned_total == sum(accepted)
    assert _keys_match_results(engine) == (0, 0, 0)
    assert _count(engine, "SELECT count(*) FROM payloads") == 0


def test_a_late_result_stored_during_prune_keeps_its_key_while_it_stays(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch may commit at any moment of a prune: here a result older than the cut-off
    (accepted: the ingest bound is wider than the retention) commits just before prune
    deletes the old keys. Whatever prune leaves of it must keep its key, or a resend of
    it is stored a second time."""
    engine = pg_api.engine
    far = (MIDNIGHT - timedelta(days=70)).isoformat()  # the default partition
    late = {"results": [make_result(request_id="late", ts=far, edge=CONFLICT)]}
    real = retention._prune_keys
    sent: list[Any] = []

    def keys_after_a_batch(session: Any, **kwargs: Any) -> int:
        if not sent:
            sent.append(pg_api.post_results(late).json())
        return real(session, **kwargs)

    monkeypatch.setattr(retention, "_prune_keys", keys_after_a_batch)
    prune(engine, before=MIDNIGHT - timedelta(days=30))
    assert sent and sent[0]["accepted"] == 1
    results, unkeyed, _ = _keys_match_results(engine)
    assert unkeyed == 0, "a result was left without its key"
    pg_api.post_results(late)
    assert _count(engine, "SELECT count(*) FROM results WHERE request_id = 'late'") == 1


# --- creating days --------------------------------------------------------------------------


def test_two_creators_of_days_at_once_both_succeed_and_make_each_day_once(pg_api: Api) -> None:
    engine = pg_api.engine
    later = MIDNIGHT + timedelta(days=30)
    made: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def create() -> None:
        try:
            start.wait(10)
            made.append(keep_partitions(engine, later, timedelta(days=40)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    days = [d for m in made for d in m.days]
    assert len(days) == len(set(days))
    with engine.connect() as conn:
        have = set(partition_days(conn))
    assert {later.date() + timedelta(days=d) for d in range(-40, 4)} <= have


def test_a_day_whose_rows_reach_the_default_partition_while_it_is_created_is_skipped(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch writes a day's result to the default partition (its day is missing) and has
    not committed when the day's creation asks whether the default holds rows of it. The
    creation then waits for the batch, and PostgreSQL refuses the day: that day is left to
    the default partition, the other days are still made, and the batch is stored."""
    engine = pg_api.engine
    missing = TODAY - timedelta(days=5)
    ahead = TODAY + timedelta(days=DAYS_AHEAD)
    with engine.begin() as conn:  # the day, and one the creation makes after it
        for table in ("payloads", "results"):
            for day in (missing, ahead):
                conn.execute(text(f"DROP TABLE {table}_p{day:%Y%m%d}"))
    paused, go = threading.Event(), threading.Event()
    real = repository.insert_payload

    def slow_insert_payload() -> Any:
        paused.set()  # its result is written (to the default partition), not committed
        go.wait(30)
        return real()

    monkeypatch.setattr(repository, "insert_payload", slow_insert_payload)
    answers: list[Any] = []
    ts = (MIDNIGHT - timedelta(days=5)).isoformat()
    body = {"results": [make_result(request_id="late", ts=ts, edge=CONFLICT)]}
    ingest = threading.Thread(target=lambda: answers.append(pg_api.post_results(body).json()))
    ingest.start()
    assert paused.wait(30)
    made: list[Any] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            made.append(keep_partitions(engine, datetime.now(UTC), timedelta(days=7)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    creating = threading.Thread(target=create)
    creating.start()
    _wait_for_a_lock_waiter(engine)  # the creation waits for the batch's lock
    go.set()
    ingest.join(60)
    creating.join(60)
    assert answers and answers[0]["accepted"] == 1
    assert errors == [], errors[0] if errors else None
    assert made[0].skipped == [missing]
    assert made[0].days == [ahead]
    assert _where(engine, "late") == [("results_default", "payloads_default")]


# --- the conversion -------------------------------------------------------------------------


@pytest.mark.fresh_db  # migrates down and up
def test_conversion_down_and_up_keeps_old_rows_in_the_default_partition(pg_api: Api) -> None:
    engine = pg_api.engine
    far = MIDNIGHT - timedelta(days=90)
    sent = [
        make_result(request_id="far", ts=far.isoformat(), edge=CONFLICT),
        make_result(
            request_id="recent", ts=(MIDNIGHT - timedelta(days=3)).isoformat(), edge=CONFLICT
        ),
        make_result(
            task="invoice_extract",
            request_id="no-payload",
            ts=far.isoformat(),
            input={"text": "x"},
            edge={"output": {"amount": 1}},
            cloud={"output": {"amount": 1}},
        ),
    ]
    assert pg_api.post_results({"results": sent}).json()["accepted"] == 3
    engine.dispose()
    command.downgrade(alembic_config(pg_api.url), "-1")
    get_engine(pg_api.url).dispose()
    upgrade(pg_api.url)
    upgrade(pg_api.url)  # `shadowplane migrate` run twice
    get_engine(pg_api.url).dispose()
    engine = get_engine(pg_api.url)
    assert _where(engine, "far") == [("results_default", "payloads_default")]
    assert _where(engine, "no-payload") == [("results_default", None)]
    recent = f"p{MIDNIGHT - timedelta(days=3):%Y%m%d}"
    assert _where(engine, "recent") == [(f"results_{recent}", f"payloads_{recent}")]
    for request_id in ("far", "recent"):
        assert _get(pg_api, request_id).json()["edge"]["output"] == "exchange"
    assert _keys_match_results(engine) == (3, 0, 0)
    again = pg_api.post_results({"results": sent}).json()
    assert again["duplicates"] == 3
    new = pg_api.post_results({"results": [make_result(request_id="new", ts=MIDNIGHT.isoformat())]})
    assert new.json()["accepted"] == 1


@pytest.mark.fresh_db  # migrates down and up
def test_conversion_down_and_up_of_an_empty_database(pg_url: str) -> None:
    command.downgrade(alembic_config(pg_url), "-1")
    get_engine(pg_url).dispose()
    upgrade(pg_url)
    get_engine(pg_url).dispose()
    engine = get_engine(pg_url)
    assert _keys_match_results(engine) == (0, 0, 0)
    with engine.connect() as conn:
        assert TODAY in partition_days(conn)


def test_prune_at_exactly_midnight_keeps_midnight_and_drops_the_microsecond_before(
    pg_api: Api,
) -> None:
    cut = MIDNIGHT - timedelta(days=35)
    with pg_api.engine.begin() as conn:
        ensure_partitions(conn, TODAY, behind=40, ahead=0)
    sent = [
        make_result(request_id="at-midnight", ts=cut.isoformat(), edge=CONFLICT),
        make_result(
            request_id="just-before",
            ts=(cut - timedelta(microseconds=1)).isoformat(),
            edge=CONFLICT,
        ),
    ]
    assert pg_api.post_results({"results": sent}).json()["accepted"] == 2
    pruned = prune(pg_api.engine, before=cut)
    assert pruned.before == cut
    assert (pruned.results, pruned.payloads, pruned.keys) == (1, 1, 1)
    assert _where(pg_api.engine, "just-before") == []
    part = f"p{cut:%Y%m%d}"
    assert _where(pg_api.engine, "at-midnight") == [(f"results_{part}", f"payloads_{part}")]


# --- readers of payloads --------------------------------------------------------------------


@pytest.mark.parametrize(("days_back", "partition"), [(2, "day"), (70, "default")])
def test_review_sampling_finds_payloads_in_a_day_and_in_the_default_partition(
    pg_api: Api, days_back: int, partition: str
) -> None:
    from controlplane.models import ReviewItem
    from controlplane.rollout.configs import apply_config
    from controlplane.scheduler import run_pass
    from tests.review.test_sampler import LATENESS, WINDOW, config, window_results

    with session_scope(pg_api.engine) as session:
        apply_config(session, config("review_task"), actor="test")
    start = MIDNIGHT - timedelta(days=days_back) + timedelta(hours=3)
    results = window_results("review_task", start)
    for i in range(0, len(results), 500):
        assert pg_api.post_results({"results": results[i : i + 500]}).json()["rejected"] == []
    in_default = _count(pg_api.engine, "SELECT count(*) FROM payloads_default")
    assert (in_default > 0) == (partition == "default")
    report = run_pass(pg_api.engine, start + timedelta(seconds=WINDOW + LATENESS))
    assert (report.failed, report.sampled) == ([], 20)
    with session_scope(pg_api.engine) as session:
        got = list(session.scalars(select(ReviewItem)))
    assert len(got) == 20
    assert all(i.input["text"] == f"help with {i.request_id}" for i in got)


# --- the commands that create days ----------------------------------------------------------


def test_tick_finishes_when_a_day_cannot_be_created_in_time(pg_url: str, tmp_path: Path) -> None:
    engine = get_engine(pg_url)
    last = TODAY + timedelta(days=DAYS_AHEAD)
    with engine.begin() as conn:
        for table in ("payloads", "results"):
            conn.execute(text(f"DROP TABLE {table}_p{last:%Y%m%d}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = pg_url
    with engine.connect() as reader:  # a long export reads results meanwhile
        reader.execute(text("SELECT count(*) FROM results"))
        done = run_cli(["tick", "--now", datetime.now(UTC).isoformat()], env, tmp_path)
        reader.rollback()
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_in_process_scheduler_does_not_retry_a_busy_day_on_every_pass(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane import scheduler as scheduler_module
    from controlplane.scheduler import InProcessScheduler

    engine = get_engine(pg_url)
    last = TODAY + timedelta(days=DAYS_AHEAD)
    with engine.begin() as conn:
        for table in ("payloads", "results"):
            conn.execute(text(f"DROP TABLE {table}_p{last:%Y%m%d}"))
    tries: list[int] = []
    passes: list[int] = []
    real_keep, real_pass = scheduler_module.keep_partitions, scheduler_module.run_pass

    def keep(*args: Any, **kwargs: Any) -> Any:
        tries.append(1)
        return real_keep(*args, **kwargs)

    def one_pass(*args: Any, **kwargs: Any) -> Any:
        passes.append(1)
        return real_pass(*args, **kwargs)

    monkeypatch.setattr(scheduler_module, "keep_partitions", keep)
    monkeypatch.setattr(scheduler_module, "run_pass", one_pass)
    with engine.connect() as reader:  # a long export reads results all along
        reader.execute(text("SELECT count(*) FROM results"))
        scheduler = InProcessScheduler(engine, 0.01, veto=0.0)
        scheduler.start()
        try:
            deadline = time.monotonic() + 60
            while len(passes) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            scheduler.stop(30)
        reader.rollback()
    assert len(passes) >= 3
    with engine.connect() as conn:
        assert last not in partition_days(conn)  # the day could not be made meanwhile
    assert len(tries) == 1


def test_two_prunes_at_once_both_finish_and_count_each_row_once(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cron's prune and an operator's overlap: both find the same old day, one drops it,
    the other finds it gone. Neither fails, and the day's rows are counted once."""
    monkeypatch.setattr(retention, "DROP_PAUSE", 0.0)
    engine = pg_api.engine
    old = TODAY - timedelta(days=40)
    with engine.begin() as conn:
        ensure_partitions(conn, old, behind=0, ahead=0)
    ts = (MIDNIGHT - timedelta(days=40)).isoformat()
    rows = [make_result(request_id=f"old-{i}", ts=ts, edge=CONFLICT) for i in range(3)]
    assert pg_api.post_results({"results": rows}).json()["accepted"] == 3
    done: list[retention.Pruned] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            done.append(prune(engine, before=MIDNIGHT - timedelta(days=30)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    with engine.connect() as reader:  # holds the day until both prunes wait for it
        reader.execute(text(f"SELECT count(*) FROM results_p{old:%Y%m%d}"))
        for thread in threads:
            thread.start()
        _wait_for_a_lock_waiter(engine, 2)
        reader.rollback()
    for thread in threads:
        thread.join(60)
    assert errors == [], errors[0] if errors else None
    assert sorted(p.results for p in done) == [0, 3]
    assert sorted(len(p.days_dropped) for p in done) == [0, 1]
    assert _keys_match_results(engine) == (0, 0, 0)


@pytest.mark.parametrize("request_id", ["order/1234", "tenant/a/b"])
def test_a_request_id_with_a_slash_is_read_back(pg_api: Api, request_id: str) -> None:
    body = {"results": [make_result(request_id=request_id, edge=CONFLICT)]}
    assert pg_api.post_results(body).json()["accepted"] == 1
    got = _get(pg_api, request_id)
    assert got.status_code == 200, got.text
    assert got.json()["edge"]["output"] == "exchange"

"""Retention: results (and their payloads and keys) older than a cut-off go; window
metrics, alerts and audit entries stay.

On PostgreSQL, where `results` and `payloads` are partitioned by day, every day wholly
before the cut-off is detached and dropped: the cost of a day is the same whatever it
holds, and its rows are counted before it goes. The day the cut-off falls in stays until
it is wholly older, so there the cut-off is that day's midnight (UTC). Rows of the default
partition (a day no partition covers) are deleted in batches, as everything is on SQLite
and on a database not yet converted. The narrow `result_keys` rows older than the cut-off
are deleted in batches on every database. Each batch, and each day, is its own short
transaction, so pruning never holds locks for long, and the counts say exactly what went.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import partial

from sqlalchemy import (
    Engine,
    TableClause,
    bindparam,
    column,
    delete,
    select,
    table,
    text,
    tuple_,
)
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from controlplane.db import in_transaction, session_scope
from controlplane.models import ResultKey, Task
from controlplane.models.partitions import (
    DroppedDay,
    day_start,
    drop_day,
    is_partitioned,
    partition_days,
    partition_name,
)
from controlplane.timeutil import as_utc

log = logging.getLogger("shadowplane.retention")
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION = re.compile(r"^\s*(\d+)\s*([dhms])\s*$")
# Dropping a day locks the partitioned tables for an instant; while it waits for queries
# still reading them, ingest queues behind it. So it waits at most this long, then steps
# aside and tries again after DROP_PAUSE seconds, DROP_ATTEMPTS times, then says so.
DROP_LOCK_TIMEOUT = "2s"
DROP_ATTEMPTS = 5
DROP_PAUSE = 3.0


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `3600s` → a timedelta; ValueError names what is allowed."""
    match = DURATION.match(text)
    if not match or int(match.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration: a positive whole number with d, h, m or s, e.g. 30d"
        )
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])


@dataclass
class Pruned:
    # Results and payloads deleted or dropped, with ts before `before`.
    results: int = 0
    payloads: int = 0
    keys: int = 0
    batches: int = 0
    # The cut-off applied: the one asked for, or on partitions that day's midnight.
    before: datetime | None = None
    days_dropped: list[date] = field(default_factory=list)
    # Days that could not be dropped (their lock was not free in time): run prune again.
    days_busy: list[date] = field(default_factory=list)


def prune(engine: Engine, *, before: datetime, batch_size: int = 5000) -> Pruned:
    """Delete every result with `ts` before the cut-off, with its payload and key."""
    with engine.connect() as connection:
        partitioned = is_partitioned(connection)
        days = partition_days(connection) if partitioned else []
    # The days are UTC days: a cut-off given in another offset (or naive, read as UTC) is
    # taken in UTC before its day is found, never on its local calendar (a later day).
    before = as_utc(before)
    if partitioned:
        before = day_start(before.date())
    pruned = Pruned(before=before)
    for day in days:
        if day_start(day + timedelta(days=1)) > before:
            break
        dropped = _drop_day_when_free(engine, day)
        if dropped is _GONE:
            continue
        if dropped is None:
            pruned.days_busy.append(day)
            continue
        pruned.results += dropped.results
        pruned.payloads += dropped.payloads
        pruned.days_dropped.append(day)
    # The keys before the rows they stand for: a batch committing meanwhile may add a
    # result older than the cut-off, and whatever is left of it must keep its key (else a
    # resend of it is stored a second time). One added after this pass is deleted below
    # (or by the next run) while its key stays: a key without its result refuses a resend
    # of a result older than the cut-off, which is what prune is for anyway.
    # A busy day keeps its results until the next run, so it keeps their keys too: keys go
    # up to its midnight only.
    keys_before = min(before, day_start(pruned.days_busy[0])) if pruned.days_busy else before
    while keys := in_transaction(
        engine, partial(_prune_keys, before=keys_before, batch_size=batch_size)
    ):
        pruned.keys += keys
        if keys < batch_size:
            break
    # What is left before the cut-off in batches: every row on SQLite (or a database not
    # yet converted), the default partition's rows on PostgreSQL (a busy day waits for the
    # next run: deleting it row by row is what the days are there to avoid).
    suffix = "_default" if partitioned else ""
    tables = (
        table(f"results{suffix}", column("id"), column("task_id"), column("ts")),
        table(f"payloads{suffix}", column("result_id"), column("result_ts")),
    )
    with session_scope(engine) as session:
        task_ids = list(session.scalars(select(Task.id).order_by(Task.id)))
    for task_id in task_ids:
        while True:
            results, payloads = in_transaction(
                engine,
                partial(
                    _prune_batch,
                    tables=tables,
                    task_id=task_id,
                    before=before,
                    batch_size=batch_size,
                ),
            )
            pruned.results += results
            pruned.payloads += payloads
            if results:
                pruned.batches += 1
            if results < batch_size:
                break
    return pruned


# `_drop_day_when_free` found the day gone: another prune running at the same time (cron's
# and an operator's) dropped it after this one listed the days. Its rows are that one's.
_GONE = DroppedDay(date.min, 0, 0)
UNDEFINED_TABLE = "42P01"


def _drop_day_when_free(engine: Engine, day: date) -> DroppedDay | None:
    for attempt in range(1, DROP_ATTEMPTS + 1):
        try:
            return in_transaction(engine, partial(_drop_day, day=day))
        except ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) == UNDEFINED_TABLE and not _day_exists(
                engine, day
            ):
                return _GONE
            raise
        except OperationalError as exc:  # lock_timeout: queries were reading the day
            log.warning("day %s not dropped yet (attempt %d, busy): %s", day, attempt, exc)
            if attempt < DROP_ATTEMPTS:
                time.sleep(DROP_PAUSE)
    return None


def _day_exists(engine: Engine, day: date) -> bool:
    with engine.connect() as connection:
        name = partition_name("results", day)
        return (
            connection.execute(text("SELECT to_regclass(:name)"), {"name": name}).scalar()
            is not None
        )


def _drop_day(session: Session, *, day: date) -> DroppedDay:
    session.execute(text(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'"))
    return drop_day(session.connection(), day)


def _prune_batch(
    session: Session,
    *,
    tables: tuple[TableClause, TableClause],
    task_id: int,
    before: datetime,
    batch_size: int,
) -> tuple[int, int]:
    results_table, payloads_table = tables
    rows = session.execute(
        select(results_table.c.id, results_table.c.ts)
        .where(results_table.c.task_id == task_id, results_table.c.ts < before)
        .order_by(results_table.c.ts)
        .limit(batch_size)
    ).all()
    if not rows:
        return 0, 0
    ids = [row[0] for row in rows]
    payloads = session.execute(
        delete(payloads_table)
        .where(payloads_table.c.result_id.in_(ids), payloads_table.c.result_ts < before)
        .returning(payloads_table.c.result_id)
    ).all()
    results = session.execute(
        delete(results_table)
        .where(results_table.c.id.in_(ids), results_table.c.ts < before)
        .returning(results_table.c.id)
    ).all()
    return len(results), len(payloads)


def _prune_keys(session: Session, *, before: datetime, batch_size: int) -> int:
    if session.get_bind().dialect.name == "postgresql":
        # By the rows' own addresses: each batch finds its keys by `ts` and deletes them
        # where they lie. Matched back by (task, request id), the planner may hash-join
        # the batch against the whole table, a full read per batch (quadratic in the
        # backlog: minutes a batch on a table of a billion keys).
        deleted = session.execute(_PRUNE_KEYS, {"before": before, "n": batch_size}).all()
        return len(deleted)
    oldest = (
        select(ResultKey.task_id, ResultKey.request_id)
        .where(ResultKey.ts < before)
        .limit(batch_size)
    )
    deleted = session.execute(
        delete(ResultKey)
        .where(tuple_(ResultKey.task_id, ResultKey.request_id).in_(oldest))
        .returning(ResultKey.task_id)
    ).all()
    return len(deleted)


_PRUNE_KEYS = text(
    "DELETE FROM result_keys WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM result_keys WHERE ts < :before LIMIT :n)) RETURNING task_id"
).bindparams(bindparam("before", type_=ResultKey.ts.type))

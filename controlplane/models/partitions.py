"""Daily partitions of `results` and `payloads` on PostgreSQL (docs/operations.md, "Storage");
on SQLite, which has none, every function here does nothing.

The DDL is built from dates and our own table names, never from input: PostgreSQL takes
no bound parameter in a partition's bounds or a table's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import IntegrityError

# Partitioned table → the column it is partitioned by.
PARTITIONED = {"results": "ts", "payloads": "result_ts"}
# Days created ahead of today, so the beat can miss a few runs.
DAYS_AHEAD = 3
CREATE_LOCK_TIMEOUT = "2s"
# What PostgreSQL answers when a new day's rows already sit in the default partition.
CHECK_VIOLATION = "23514"
# At most this many days behind today are created (a result may come back this late).
MAX_DAYS_BEHIND = 62
_DAY_NAME = re.compile(r"^(results|payloads)_p(\d{8})$")
_PARTITION_NAME = re.compile(r"^(results|payloads)_(p\d{8}|default)$")


def is_postgresql(connection: Connection) -> bool:
    return connection.dialect.name == "postgresql"


def is_partition(name: str) -> bool:
    """Whether a table name is one of the partitions (a day's or the default one)."""
    return _PARTITION_NAME.match(name) is not None


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def is_partitioned(connection: Connection) -> bool:
    """Whether `results` is a partitioned table here (PostgreSQL after the conversion)."""
    if not is_postgresql(connection):
        return False
    kind = connection.execute(
        text("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass('results')")
    ).scalar()
    return kind == "p"


def partition_days(connection: Connection, table: str = "results") -> list[date]:
    """The days that have a partition of `table`, in order."""
    if not is_partitioned(connection):
        return []
    names = connection.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(:table)"
        ),
        {"table": table},
    ).scalars()
    days = [
        datetime.strptime(m.group(2), "%Y%m%d").date() for n in names if (m := _DAY_NAME.match(n))
    ]
    return sorted(days)


@dataclass
class Created:
    days: list[date]
    # Days left to the default partition because it already holds rows of them.
    skipped: list[date]


def ensure_partitions(
    connection: Connection, today: date, *, behind: int = 1, ahead: int = DAYS_AHEAD
) -> Created:
    """Create the day partitions of both tables from `today - behind` to `today + ahead`
    that are missing. Idempotent; two callers at once are safe (the lock below)."""
    created = Created([], [])
    if not is_partitioned(connection):
        return created
    # One creator at a time: a transaction-scoped advisory lock on a fixed key.
    connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('shadowplane.partitions'))"))
    # Creating a partition locks its parent for an instant; ingest must never queue behind
    # it for long while a slow query reads the table: give up after a moment, and let the
    # next run (the beat's, within the hour; days are made 3 ahead) try again.
    connection.execute(text(f"SET LOCAL lock_timeout = '{CREATE_LOCK_TIMEOUT}'"))
    have = set(partition_days(connection))
    behind = min(behind, MAX_DAYS_BEHIND)
    for offset in range(-behind, ahead + 1):
        day = today + timedelta(days=offset)
        if day in have:
            continue
        if _default_holds(connection, day) or not _create_both(connection, day):
            created.skipped.append(day)
            continue
        created.days.append(day)
    return created


def _create_both(connection: Connection, day: date) -> bool:
    """Create the day of both tables; False when PostgreSQL refuses it because the default
    partition holds rows of it after all: a batch wrote one there after `_default_holds`
    looked, and committed while the creation waited for its lock. Only that day is given
    up (a savepoint), not the days created before it in this transaction."""
    savepoint = connection.begin_nested()
    try:
        for table in PARTITIONED:
            create_day(connection, table, day)
    except IntegrityError as exc:
        savepoint.rollback()
        if getattr(exc.orig, "sqlstate", None) == CHECK_VIOLATION:
            return False
        raise
    savepoint.commit()
    return True


def days_behind(max_backfill: timedelta) -> int:
    """How many days behind today a result may still arrive (its `ts` bound)."""
    return min(MAX_DAYS_BEHIND, -(-max_backfill // timedelta(days=1)))


def keep_partitions(engine: Engine, now: datetime, max_backfill: timedelta) -> Created:
    """In one transaction: the days a result may arrive for, from `now - max_backfill` to
    `DAYS_AHEAD` days ahead. What the beat, the in-process scheduler and `migrate` run."""
    with engine.begin() as connection:
        return ensure_partitions(
            connection, now.astimezone(UTC).date(), behind=days_behind(max_backfill)
        )


def create_day(connection: Connection, table: str, day: date) -> None:
    start, end = day_start(day), day_start(day + timedelta(days=1))
    connection.execute(
        text(
            f"CREATE TABLE IF NOT EXISTS {partition_name(table, day)} PARTITION OF {table} "
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    )


def _default_holds(connection: Connection, day: date) -> bool:
    return any(
        connection.execute(
            text(
                f"SELECT EXISTS (SELECT 1 FROM {table}_default "
                f"WHERE {column} >= :start AND {column} < :end)"
            ),
            {"start": day_start(day), "end": day_start(day + timedelta(days=1))},
        ).scalar()
        for table, column in PARTITIONED.items()
    )


@dataclass
class DroppedDay:
    day: date
    results: int
    payloads: int


def drop_day(connection: Connection, day: date) -> DroppedDay:
    """Detach and drop one day of both tables, counting its rows first (from the day's own
    table: a count of one partition, read while it is locked against writes).

    `results` first, then `payloads`: the order ingest writes them in (and reads join them
    in); each parent before its day. The other order deadlocks with a batch between its two inserts: it holds `results`
    and waits for `payloads`, which the drop holds while it waits for `results`."""
    counts = {}
    # Every lock the drop needs, in the order queries take them: each parent before its
    # day (a read or a write locks the parent, then the days it touches). Queries on these
    # tables wait for the drop instead. (`tasks` is not locked: since 6a2f9c1e4b70 no day
    # holds a foreign key to it. Before, dropping a day dropped its key, which locked
    # `tasks`, and the drop took that lock first to keep ingest's order.)
    for table in ("results", "payloads"):
        name = partition_name(table, day)
        connection.execute(text(f"LOCK TABLE ONLY {table} IN ACCESS EXCLUSIVE MODE"))
        connection.execute(text(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE"))
        counts[table] = connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
        connection.execute(text(f"ALTER TABLE {table} DETACH PARTITION {name}"))
        connection.execute(text(f"DROP TABLE {name}"))
    return DroppedDay(day, counts["results"], counts["payloads"])

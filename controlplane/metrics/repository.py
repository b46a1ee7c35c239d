"""SQL for windows: one aggregate pass over a window's results, and the upserts of its rows.

A window reads only its own rows through the (task_id, ts) index, so its cost follows
the window, not the history. Buckets are taken from `input_tokens` with the boundaries
the window is computed with, so a config change between windows never mixes bucket sets
inside one. The pass groups the window's results by bucket and the few categorical
values the counts depend on, and sums costs per group; each group's counts are derived
in Python. On PostgreSQL the same hashed pass also gives every percentile column's values
per group (packed float8) for numpy to interpolate; SQLite, the embedded default, reads
the values in a second query and interpolates in Python. Both interpolate linearly, as
`percentile_cont` and pandas do, and a test checks both against pandas.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import numpy
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Integer,
    case,
    cast,
    delete,
    func,
    literal,
    literal_column,
    null,
    select,
    text,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from controlplane.db import dialect_insert
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics import lengths
from controlplane.metrics.fields import (
    ALL,
    PERCENTILES,
    RATE_COUNTS,
    REPEAT_DIFFS,
    STORED,
    SUMS,
)
from controlplane.metrics.stats import percentile
from controlplane.models import Result, ScanMark, Window, WindowMetrics

Prices = Mapping[str, Mapping[str, float]]


class epoch_seconds(FunctionElement[int]):
    """Whole seconds since the epoch of a timestamp column, on both backends."""

    type = Integer()
    inherit_cache = True


@compiles(epoch_seconds, "postgresql")
def _epoch_pg(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(floor(extract(epoch FROM {compiler.process(element.clauses, **kw)})) AS BIGINT)"


@compiles(epoch_seconds, "sqlite")
def _epoch_sqlite(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(strftime('%s', {compiler.process(element.clauses, **kw)}) AS INTEGER)"


def bucket_of(tokens: Any, boundaries: Sequence[int]) -> ColumnElement[str]:
    """SQL for `length_bucket(tokens, boundaries)`."""
    labels = bucket_labels(boundaries)
    whens = [
        (tokens < literal(b), literal(label)) for b, label in zip(boundaries, labels, strict=False)
    ]
    if not whens:
        return literal(labels[-1])
    return case(*whens, else_=literal(labels[-1]))


def _flag(condition: Any) -> ColumnElement[int]:
    return case((condition, 1), else_=0)


def _side_cost(side: str, prices: Prices) -> ColumnElement[Any]:
    """A side's reported cost, else its tokens at the task's prices (per 1k); 0 if it did not run."""
    ran = getattr(Result, f"{side}_ran")
    tokens_in = func.coalesce(getattr(Result, f"{side}_input_tokens"), Result.input_tokens)
    tokens_out = func.coalesce(getattr(Result, f"{side}_output_tokens"), 0)
    priced = (
        tokens_in * literal(prices[side]["in"], Float)
        + tokens_out * literal(prices[side]["out"], Float)
    ) / 1000.0
    return case(
        (ran, func.coalesce(getattr(Result, f"{side}_cost"), priced)), else_=literal(0.0, Float)
    )


def _baseline_cost(prices: Prices) -> ColumnElement[Any]:
    """What the cloud would have cost for this result: cloud prices × (input + output tokens)."""
    output_tokens = func.coalesce(
        Result.cloud_output_tokens,
        case((Result.served == "edge", Result.edge_output_tokens)),
        0,
    )
    return (
        Result.input_tokens * literal(prices["cloud"]["in"], Float)
        + output_tokens * literal(prices["cloud"]["out"], Float)
    ) / 1000.0


# The categorical values every count is decided by. A window's results are grouped by
# them (a few dozen groups) and each group's counts derived in Python (`counts_of`): one
# hash of eight values per result costs less than a flag and a sum per count.
GROUP_KEYS: dict[str, Any] = {
    "outcome": Result.outcome,
    "served": Result.served,
    "degraded": Result.degraded,
    "edge_ran": Result.edge_ran,
    "edge_errored": Result.edge_error.is_not(None),
    "edge_valid": Result.edge_valid,
    "repeat_outcome": Result.repeat_outcome,
}
COUNTED = ("n_pairs", *RATE_COUNTS, "n_edge_runs", "n_edge_attempts", "n_repeat_pairs")


def counts_of(group: Mapping[str, Any]) -> dict[str, bool]:
    """Which counts a result with these categorical values (`GROUP_KEYS`) adds one to.
    A missing value (None) is never a match, as NULL in SQL."""
    outcome = group["outcome"]
    edge_ran = bool(group["edge_ran"])
    invalid_output = group["edge_valid"] is not None and not group["edge_valid"]
    edge_failed = edge_ran and (
        bool(group["edge_errored"]) or invalid_output or outcome == "invalid"
    )
    attempt = group["served"] == "edge" or bool(group["degraded"])
    repeat = group["repeat_outcome"]
    return {
        "n_pairs": outcome in ("agree", "conflict"),
        "n_agree": outcome == "agree",
        "n_conflict": outcome == "conflict",
        "n_invalid": outcome == "invalid",
        "n_edge_errors": edge_ran and bool(group["edge_errored"]),
        "n_edge_fails": edge_failed,
        "n_offload_fails": attempt and edge_failed,
        "n_degraded": attempt and bool(group["degraded"]),
        "n_served_edge": group["served"] == "edge",
        # Repeat pairs (cloud vs cloud_repeat, or a free duplicate) are scored apart from
        # the edge pair and never enter n_pairs or agreement.
        "n_repeat_pairs": repeat is not None,
        "n_repeat_agree": repeat == "agree",
        "n_repeat_invalid": repeat == "invalid",
        "n_edge_runs": edge_ran,
        "n_edge_attempts": attempt,
    }


def bucket_index(tokens: Any, boundaries: Sequence[int]) -> ColumnElement[int]:
    """SQL for the position of `length_bucket(tokens, boundaries)` among the bucket labels
    (an integer hashes for less than the label). Numbers are written into the SQL, not
    bound: the same expression is grouped by, and PostgreSQL would not match two copies
    with parameters of their own."""
    if not boundaries:
        # A cast, not a bare 0: `GROUP BY 0` would name a select-list position.
        return literal_column("CAST(0 AS INTEGER)", Integer)
    return case(
        *(
            (tokens < literal_column(str(int(b))), literal_column(str(i), Integer))
            for i, b in enumerate(boundaries)
        ),
        else_=literal_column(str(len(boundaries)), Integer),
    )


def _grouped(
    task_id: int,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
    prices: Prices,
    values: Sequence[ColumnElement[Any]] = (),
) -> Any:
    """The window's results grouped by bucket and `GROUP_KEYS`: how many, the float sums,
    and the `values` aggregates given."""
    bucket = bucket_index(Result.input_tokens, boundaries).label("bucket")
    keys = [column.label(name) for name, column in GROUP_KEYS.items()]
    return (
        select(
            bucket,
            *keys,
            func.count().label("n_results"),
            func.sum(_side_cost("edge", prices)).label("edge_cost"),
            func.sum(_side_cost("cloud", prices)).label("cloud_cost"),
            func.sum(_baseline_cost(prices)).label("baseline_cost"),
            func.sum(Result.input_tokens).label("input_tokens_sum"),
            # Added to cloud_cost: a repeat is a paid cloud call.
            func.sum(Result.repeat_cost).label("repeat_cost"),
            *values,
        )
        .where(Result.task_id == task_id, Result.ts >= start, Result.ts < end)
        .group_by(bucket, *keys)
    )


def _add_group(
    out: dict[str, dict[str, Any]], labels: Sequence[str], group: Mapping[str, Any]
) -> None:
    """Add one group's counts and sums to its bucket's row and to `all`."""
    n = group["n_results"]
    counted = counts_of(group)
    sums = {name: float(group[name] or 0.0) for name in (*SUMS, "repeat_cost")}
    sums["cloud_cost"] += sums.pop("repeat_cost")
    for target in (out[labels[group["bucket"]]], out[ALL]):
        target["n_results"] += n
        for name in COUNTED:
            if counted[name]:
                target[name] += n
        for name, value in sums.items():
            target[name] += value


def empty_metrics(bucket: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(STORED, None)
    row.update({name: 0 for name in ("n_results", "n_late", *COUNTED)})
    row.update({name: 0.0 for name in SUMS})
    row["bucket"] = bucket
    return row


# A window expected to hold at least this many results is read in time slices on
# parallel connections (PostgreSQL 15 cannot parallelise these aggregates itself).
PARALLEL_MIN_ROWS = 100_000


def aggregate_window(
    session: Session,
    task_id: int,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
    prices: Prices,
    *,
    expected_rows: int = 0,
    max_input_tokens: int | None = None,
) -> dict[str, dict[str, Any]]:
    """The stored metric row of every bucket and `all` for one window, empty buckets included.

    `expected_rows` (what the window held when last computed) lets PostgreSQL read a large
    window in slices on parallel connections. `all` also gets the input-length histogram
    and, with a cap, how many inputs are over it (from the values the percentiles read)."""
    labels = bucket_labels(boundaries)
    out = {b: empty_metrics(b) for b in (*labels, ALL)}
    if session.get_bind().dialect.name == "postgresql":
        parts = max(1, min(os.cpu_count() or 1, 4)) if expected_rows >= PARALLEL_MIN_ROWS else 1
        tokens = _aggregate_postgres(session, task_id, start, end, boundaries, prices, out, parts)
    else:
        tokens = _aggregate_portable(session, task_id, start, end, boundaries, prices, out)
    out[ALL]["input_hist"] = lengths.histogram(tokens)
    out[ALL]["n_over_cap"] = (
        None if max_input_tokens is None else int((tokens > max_input_tokens).sum())
    )
    if out[ALL]["n_repeat_pairs"] > 0:
        _count_repeat_diffs(session, task_id, start, end, boundaries, out)
    return out


def _count_repeat_diffs(
    session: Session,
    task_id: int,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
    out: dict[str, dict[str, Any]],
) -> None:
    """`repeat_diffs` of every bucket and `all`: how many repeat pairs differed on each
    field or check. A second, small read of the window's repeat pairs only, made when the
    main pass found some, so a task without repeats pays nothing for it."""
    found = session.execute(
        select(bucket_of(Result.input_tokens, boundaries), Result.repeat_diff).where(
            Result.task_id == task_id,
            Result.ts >= start,
            Result.ts < end,
            Result.repeat_outcome.is_not(None),
        )
    )
    counts: dict[str, dict[str, int]] = {}
    for bucket, names in found:
        if names is None:
            continue
        for target in (counts.setdefault(bucket, {}), counts.setdefault(ALL, {})):
            for name in set(names):
                target[name] = target.get(name, 0) + 1
    for bucket, by_name in counts.items():
        out[bucket][REPEAT_DIFFS] = dict(sorted(by_name.items()))


def _postgres_statement(
    task_id: int, start: datetime, end: datetime, boundaries: Sequence[int], prices: Prices
) -> Any:
    # Each percentile column's values as packed big-endian float8 (NULLs are skipped).
    packed = [
        func.string_agg(func.float8send(cast(getattr(Result, column), Float)), null()).label(column)
        for column in PERCENTILES
    ]
    return _grouped(task_id, start, end, boundaries, prices, packed)


def _aggregate_postgres(
    session: Session,
    task_id: int,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
    prices: Prices,
    out: dict[str, dict[str, Any]],
    parts: int,
) -> Any:
    """One hashed pass: per group, the sums and each percentile column's values as one
    packed float8 string, for numpy to interpolate per bucket and for `all`. PostgreSQL's
    own percentile_cont costs about twice as much here: every ordered-set aggregate sorts
    its own copy of its column, per grouping set.

    With `parts` > 1 the window is split into that many time slices read at once, the
    first in the session's transaction and the others on connections of their own; sums
    add up and values concatenate, so the figures are the same."""
    step = (end - start) / parts
    bounds = [
        (start + step * i, end if i == parts - 1 else start + step * (i + 1)) for i in range(parts)
    ]
    statements = [_postgres_statement(task_id, lo, hi, boundaries, prices) for lo, hi in bounds]
    if parts == 1:
        results = [_binary_rows(session.connection(), statements[0])]
    else:
        engine = session.get_bind()
        assert isinstance(engine, Engine)

        def read(stmt: Any) -> list[dict[str, Any]]:
            with engine.connect() as connection:
                return _binary_rows(connection, stmt)

        with ThreadPoolExecutor(parts - 1) as pool:
            others = [pool.submit(read, stmt) for stmt in statements[1:]]
            results = [_binary_rows(session.connection(), statements[0])]
            results += [future.result() for future in others]
    labels = bucket_labels(boundaries)
    values: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for part in results:
        for group in part:
            _add_group(out, labels, group)
            for column in PERCENTILES:
                found = float8_values(group[column])
                values[labels[group["bucket"]]][column].append(found)
                values[ALL][column].append(found)
    tokens = numpy.empty(0)
    for bucket, by_column in values.items():
        for column, found in by_column.items():
            # One copy, in native byte order, which the percentiles may then reorder.
            joined = numpy.concatenate(found, dtype=float)
            _fill_percentiles(out[bucket], column, PERCENTILES[column], joined)
            if bucket == ALL and column == "input_tokens":
                tokens = joined
    return tokens


def _binary_rows(connection: Connection, stmt: Any) -> list[dict[str, Any]]:
    """Run `stmt` with binary results: the packed values arrive as raw bytes, not hex text."""
    compiled = stmt.compile(dialect=connection.dialect, compile_kwargs={"render_postcompile": True})
    raw = connection.connection.driver_connection
    assert raw is not None
    with raw.cursor(binary=True) as cursor:
        # Through the (task_id, ts) index, always: when a window holds a large share of a
        # young table the planner would scan the whole table, and the window's cost would
        # follow the history. And hashed: the planner cannot tell how few groups the keys
        # make, and would sort the whole window (on disk, past work_mem) to group it.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(str(compiled), compiled.params)
        names = [d.name for d in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def float8_values(blob: bytes | None) -> Any:
    """The values of packed big-endian float8s (`string_agg(float8send(x), NULL)`), read
    in place."""
    if blob is None:
        return numpy.empty(0)
    return numpy.frombuffer(blob, dtype=">f8")


def _fill_percentiles(target: dict[str, Any], column: str, qs: Sequence[float], found: Any) -> None:
    if len(found) == 0:
        return
    # numpy's default method is linear interpolation, as percentile_cont and pandas. The
    # values are reordered in place (a window's own copy), which spares copying them again.
    at = numpy.percentile(found, [q * 100 for q in qs], overwrite_input=True)
    for q, value in zip(qs, at, strict=True):
        target[f"{column}_p{round(q * 100)}"] = float(value)


def _aggregate_portable(
    session: Session,
    task_id: int,
    start: datetime,
    end: datetime,
    boundaries: Sequence[int],
    prices: Prices,
    out: dict[str, dict[str, Any]],
) -> Any:
    """The sums in SQL, the percentiles in Python; returns every input length (numpy)."""
    labels = bucket_labels(boundaries)
    stmt = _grouped(task_id, start, end, boundaries, prices)
    for group in session.execute(stmt).mappings():
        _add_group(out, labels, dict(group))
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    columns = list(PERCENTILES)
    read = select(
        bucket_of(Result.input_tokens, boundaries), *(getattr(Result, c) for c in columns)
    ).where(Result.task_id == task_id, Result.ts >= start, Result.ts < end)
    for record in session.execute(read):
        for column, value in zip(columns, record[1:], strict=True):
            if value is not None:
                values[record[0]][column].append(float(value))
                values[ALL][column].append(float(value))
    for bucket, by_column in values.items():
        for column, found in by_column.items():
            found.sort()
            for q in PERCENTILES[column]:
                out[bucket][f"{column}_p{round(q * 100)}"] = percentile(found, q)
    return numpy.asarray(values[ALL]["input_tokens"], float)


def bucket_counts(
    session: Session, task_id: int, start: datetime, end: datetime, boundaries: Sequence[int]
) -> dict[str, int]:
    """How many results the window holds now, per bucket and `all`."""
    bucket = bucket_of(Result.input_tokens, boundaries).label("bucket")
    inner = (
        select(bucket)
        .where(Result.task_id == task_id, Result.ts >= start, Result.ts < end)
        .subquery()
    )
    counts = dict.fromkeys((*bucket_labels(boundaries), ALL), 0)
    for name, n in session.execute(select(inner.c.bucket, func.count()).group_by(inner.c.bucket)):
        counts[name] = n
        counts[ALL] += n
    return counts


def windows_with_new_results(
    session: Session, window_seconds: Mapping[int, int], after_id: int
) -> tuple[set[tuple[int, int]], int]:
    """(task id, window index) of results with id > after_id, and the highest id seen."""
    if not window_seconds:
        return set(), after_id
    seconds = case(window_seconds, value=Result.task_id)
    index = (epoch_seconds(Result.ts) / seconds).label("idx")
    stmt = (
        select(Result.task_id, index, func.max(Result.id))
        .where(Result.id > after_id, Result.task_id.in_(list(window_seconds)))
        .group_by(Result.task_id, text("idx"))
    )
    found: set[tuple[int, int]] = set()
    highest = after_id
    for task_id, idx, top in session.execute(stmt):
        found.add((task_id, int(idx)))
        highest = max(highest, top)
    return found, highest


_HORIZON = text(
    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, "
    "pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
)


def snapshot_horizon(session: Session) -> tuple[int, int] | None:
    """PostgreSQL's current snapshot: (xmin, the oldest transaction id still running; xmax,
    the first not yet assigned), 64-bit; None on SQLite."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    xmin, xmax = session.execute(_HORIZON).one()
    return int(xmin), int(xmax)


_OLDEST_WRITER = text(
    "SELECT pid, xact_start, left(query, 120) FROM pg_stat_activity "
    "WHERE backend_xid IS NOT NULL AND backend_xid::text::bigint = :xid % 4294967296 "
    "LIMIT 1"
)


def oldest_writer(session: Session, xmin: int) -> tuple[int, datetime | None, str] | None:
    """The backend running transaction `xmin` (pid, transaction start, its query), when
    pg_stat_activity shows it (another user's needs pg_read_all_stats)."""
    row = session.execute(_OLDEST_WRITER, {"xid": xmin}).first()
    return None if row is None else (int(row[0]), row[1], str(row[2] or ""))


def scan_mark(session: Session, name: str) -> ScanMark:
    mark = session.get(ScanMark, name, with_for_update=True)
    if mark is None:
        session.execute(
            dialect_insert(session, ScanMark)
            .values(name=name, last_id=0, previous_id=0)
            .on_conflict_do_nothing()
        )
        mark = session.get(ScanMark, name, with_for_update=True)
        assert mark is not None
    return mark


def lock_window(
    session: Session,
    task_id: int,
    start: datetime,
    end: datetime,
    boundaries: list[int],
    version: int,
) -> Window:
    """The window's row, created if new, locked until the transaction ends (one computer at a time)."""
    session.execute(
        dialect_insert(session, Window)
        .values(
            task_id=task_id,
            window_start=start,
            window_end=end,
            length_buckets=boundaries,
            config_version=version,
            alerts_evaluated=False,
            review_sampled=False,
        )
        .on_conflict_do_nothing(index_elements=["task_id", "window_start"])
    )
    window = session.scalars(
        select(Window)
        .where(Window.task_id == task_id, Window.window_start == start)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    return window


def window_spans(
    session: Session, task_id: int, since: datetime, until: datetime
) -> list[tuple[datetime, datetime]]:
    """The (start, end) of the task's windows overlapping [since, until), by start."""
    rows = session.execute(
        select(Window.window_start, Window.window_end)
        .where(Window.task_id == task_id, Window.window_start < until, Window.window_end > since)
        .order_by(Window.window_start)
    )
    return [(start, end) for start, end in rows]


def window_holding(session: Session, task_id: int, at: datetime) -> Window | None:
    """The task's window whose span holds `at` (the one starting at it, or an earlier,
    longer one: made before `window_seconds` changed), if any."""
    latest = session.scalars(
        select(Window)
        .where(Window.task_id == task_id, Window.window_start <= at)
        .order_by(Window.window_start.desc())
        .limit(1)
    ).first()
    return latest if latest is not None and latest.window_end > at else None


# pg_advisory_xact_lock's first key for "making a task's new windows" (the second is the
# task's id): "SPWN" in ASCII.
_NEW_WINDOWS_LOCK = 0x5350574E


def lock_new_windows(session: Session, task_id: int) -> None:
    """Hold, until the transaction ends, the task's lock for making new windows (PostgreSQL;
    SQLite has one writer at a time)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(:kind, :task)"),
            {"kind": _NEW_WINDOWS_LOCK, "task": task_id},
        )


def next_window_start(session: Session, task_id: int, after: datetime) -> datetime | None:
    """The start of the task's first window after `after`."""
    found: datetime | None = session.scalar(
        select(func.min(Window.window_start)).where(
            Window.task_id == task_id, Window.window_start > after
        )
    )
    return found


def drop_buckets(session: Session, window_id: int, keep: Iterable[str]) -> None:
    """Delete a window's metric rows of buckets it no longer has (its task's length buckets
    changed while it was open): they would stand beside the new ones with stale counts."""
    session.execute(
        delete(WindowMetrics).where(
            WindowMetrics.window_id == window_id, WindowMetrics.bucket.not_in(list(keep))
        )
    )


def upsert_metrics(session: Session, window: Window, rows: Iterable[Mapping[str, Any]]) -> None:
    values = [
        {
            "window_id": window.id,
            "task_id": window.task_id,
            "window_start": window.window_start,
            **row,
        }
        for row in rows
    ]
    stmt = dialect_insert(session, WindowMetrics).values(values)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["task_id", "window_start", "bucket"],
            set_={name: stmt.excluded[name] for name in (*STORED, "window_id")},
        )
    )


def stored_metrics(session: Session, window_id: int) -> dict[str, WindowMetrics]:
    rows = session.scalars(select(WindowMetrics).where(WindowMetrics.window_id == window_id))
    return {row.bucket: row for row in rows}


def set_late(session: Session, window_id: int, late: Mapping[str, int]) -> None:
    for bucket, n in late.items():
        session.execute(
            update(WindowMetrics)
            .where(WindowMetrics.window_id == window_id, WindowMetrics.bucket == bucket)
            .values(n_late=n)
        )

"""SQL for windows: one aggregate pass over a window's results, and the upserts of its rows.

A window reads only its own rows through the (task_id, ts) index, so its cost follows
the window, not the history. Buckets are taken from `input_tokens` with the boundaries
the window is computed with, so a config change between windows never mixes bucket sets
inside one. On PostgreSQL one hashed pass gives the sums and every percentile column's
values per bucket (binary arrays) for numpy to interpolate; SQLite, the embedded
default, sums in SQL and interpolates in Python. Both interpolate linearly, as
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
    Subquery,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
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
    COST_SUMS,
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


def _window_rows(
    task_id: int, start: datetime, end: datetime, boundaries: Sequence[int], prices: Prices
) -> Subquery:
    """The window's results, one row each, reduced to the flags and values the metrics need."""
    pair = Result.outcome.in_(("agree", "conflict"))
    edge_failed = and_(
        Result.edge_ran,
        or_(
            Result.edge_error.is_not(None),
            Result.edge_valid.is_(False),
            Result.outcome == "invalid",
        ),
    )
    attempt = or_(Result.served == "edge", Result.degraded)
    return (
        select(
            bucket_of(Result.input_tokens, boundaries).label("bucket"),
            _flag(pair).label("n_pairs"),
            _flag(Result.outcome == "agree").label("n_agree"),
            _flag(Result.outcome == "conflict").label("n_conflict"),
            _flag(Result.outcome == "invalid").label("n_invalid"),
            _flag(Result.edge_ran).label("n_edge_runs"),
            _flag(and_(Result.edge_ran, Result.edge_error.is_not(None))).label("n_edge_errors"),
            _flag(edge_failed).label("n_edge_fails"),
            _flag(attempt).label("n_edge_attempts"),
            _flag(and_(attempt, edge_failed)).label("n_offload_fails"),
            _flag(and_(attempt, Result.degraded)).label("n_degraded"),
            _flag(Result.served == "edge").label("n_served_edge"),
            # Repeat pairs (cloud vs cloud_repeat, or a free duplicate) are scored apart
            # from the edge pair and never enter n_pairs or agreement. Passed through as
            # they are and counted by the aggregate (count, FILTER), which costs a task
            # without repeats less than a flag per row.
            Result.repeat_outcome.label("repeat_outcome"),
            Result.repeat_cost.label("repeat_cost"),
            _side_cost("edge", prices).label("edge_cost"),
            _side_cost("cloud", prices).label("cloud_cost"),
            _baseline_cost(prices).label("baseline_cost"),
            # Floats, so every percentile column arrives as float8 values.
            *(cast(getattr(Result, column), Float).label(column) for column in PERCENTILES),
        )
        .where(Result.task_id == task_id, Result.ts >= start, Result.ts < end)
        .subquery("w")
    )


REPEAT_COUNTS = ("n_repeat_pairs", "n_repeat_agree", "n_repeat_invalid")
# Counts summed from the per-row flags.
SUMMED = tuple(
    n for n in ("n_pairs", *RATE_COUNTS, "n_edge_runs", "n_edge_attempts") if n not in REPEAT_COUNTS
)
# What the aggregate gives per bucket and `all` adds up.
ADDED = (*SUMMED, *REPEAT_COUNTS, *SUMS)


def _sums(rows: Subquery) -> list[ColumnElement[Any]]:
    return [
        func.count().label("n_results"),
        *(func.coalesce(func.sum(rows.c[name]), 0).label(name) for name in SUMMED),
        *(func.coalesce(func.sum(rows.c[name]), 0.0).label(name) for name in COST_SUMS),
        func.coalesce(func.sum(rows.c.input_tokens), 0.0).label("input_tokens_sum"),
        func.count(rows.c.repeat_outcome).label("n_repeat_pairs"),
        func.count().filter(rows.c.repeat_outcome == "agree").label("n_repeat_agree"),
        func.count().filter(rows.c.repeat_outcome == "invalid").label("n_repeat_invalid"),
        # Added to cloud_cost: a repeat is a paid cloud call.
        func.coalesce(func.sum(rows.c.repeat_cost), 0.0).label("repeat_cost"),
    ]


def empty_metrics(bucket: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(STORED, None)
    row.update({name: 0 for name in ("n_results", "n_late", *SUMMED, *REPEAT_COUNTS)})
    row.update({name: 0.0 for name in SUMS})
    row["bucket"] = bucket
    return row


# A window expected to hold at least this many results is read in time slices on
# parallel connections (PostgreSQL 15 cannot parallelise array_agg itself).
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
    out = {b: empty_metrics(b) for b in (*bucket_labels(boundaries), ALL)}
    if session.get_bind().dialect.name == "postgresql":
        parts = max(1, min(os.cpu_count() or 1, 4)) if expected_rows >= PARALLEL_MIN_ROWS else 1
        tokens = _aggregate_postgres(session, task_id, start, end, boundaries, prices, out, parts)
    else:
        tokens = _aggregate_portable(
            session, _window_rows(task_id, start, end, boundaries, prices), out
        )
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
    rows = _window_rows(task_id, start, end, boundaries, prices)
    arrays = [
        func.array_send(func.array_agg(rows.c[column]).filter(rows.c[column].is_not(None))).label(
            column
        )
        for column in PERCENTILES
    ]
    return select(rows.c.bucket, *_sums(rows), *arrays).group_by(rows.c.bucket)


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
    """One pass hashed by bucket: the sums, and each percentile column's values as one
    binary float8 array per bucket, for numpy to interpolate (`all` from the buckets'
    values together). PostgreSQL's own percentile_cont costs about twice as much here:
    every ordered-set aggregate sorts its own copy of its column, per grouping set.

    With `parts` > 1 the window is split into that many time slices read at once, the
    first in the session's transaction and the others on connections of their own; sums
    add up and value arrays concatenate, so the figures are the same."""
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
    values: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    total = out[ALL]
    for part in results:
        for row in part:
            target = out[row["bucket"]]
            for name in ("n_results", *ADDED):
                target[name] += row[name]
                total[name] += row[name]
            target["cloud_cost"] += row["repeat_cost"]
            total["cloud_cost"] += row["repeat_cost"]
            for column in PERCENTILES:
                found = float8_array(row[column])
                values[row["bucket"]][column].append(found)
                values[ALL][column].append(found)
    tokens = numpy.empty(0)
    for bucket, by_column in values.items():
        for column, found in by_column.items():
            joined = numpy.concatenate(found)
            _fill_percentiles(out[bucket], column, PERCENTILES[column], joined)
            if bucket == ALL and column == "input_tokens":
                tokens = joined
    return tokens


def _binary_rows(connection: Connection, stmt: Any) -> list[dict[str, Any]]:
    """Run `stmt` with binary results: the arrays arrive as raw bytes instead of hex text."""
    compiled = stmt.compile(dialect=connection.dialect, compile_kwargs={"render_postcompile": True})
    raw = connection.connection.driver_connection
    assert raw is not None
    with raw.cursor(binary=True) as cursor:
        # Through the (task_id, ts) index, always: when a window holds a large share of a
        # young table the planner would scan the whole table, and the window's cost would
        # follow the history.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(str(compiled), compiled.params)
        names = [d.name for d in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def float8_array(blob: bytes | None) -> Any:
    """The values of a one-dimensional float8[] without NULLs in PostgreSQL's binary format."""
    if blob is None:
        return numpy.empty(0)
    ndim = int.from_bytes(blob[0:4], "big")
    # header: ndim, has-nulls flag, element type, then (size, lower bound) per dimension;
    # each element: its length (always 8) and the big-endian double.
    return numpy.frombuffer(blob, dtype=_ELEMENT, offset=12 + 8 * ndim)["value"].astype(float)


_ELEMENT = numpy.dtype([("length", ">i4"), ("value", ">f8")])


def _fill_percentiles(target: dict[str, Any], column: str, qs: Sequence[float], found: Any) -> None:
    if len(found) == 0:
        return
    # numpy's default method is linear interpolation, as percentile_cont and pandas.
    for q, value in zip(qs, numpy.percentile(found, [q * 100 for q in qs]), strict=True):
        target[f"{column}_p{round(q * 100)}"] = float(value)


def _aggregate_portable(session: Session, rows: Subquery, out: dict[str, dict[str, Any]]) -> Any:
    """The sums in SQL, the percentiles in Python; returns every input length (numpy)."""
    total = out[ALL]
    for row in session.execute(
        select(rows.c.bucket, *_sums(rows)).group_by(rows.c.bucket)
    ).mappings():
        target = out[row["bucket"]]
        for name in ("n_results", *ADDED):
            target[name] = row[name]
            total[name] += row[name]
        target["cloud_cost"] += row["repeat_cost"]
        total["cloud_cost"] += row["repeat_cost"]
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    columns = list(PERCENTILES)
    for record in session.execute(select(rows.c.bucket, *(rows.c[c] for c in columns))):
        for column, value in zip(columns, record[1:], strict=True):
            if value is not None:
                values[record[0]][column].append(value)
                values[ALL][column].append(value)
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

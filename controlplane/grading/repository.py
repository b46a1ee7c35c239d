"""All SQL of grading: the window aggregates a grade reads, and the kept grades.

A grade reads the `all` rows of a task's windows over its span (the current config
version only), never raw results: one pass grouped by task gives every task's sums, its
days with traffic and its input-length medians, so grading every task costs about one
scan of the windows it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Float,
    Select,
    and_,
    case,
    false,
    func,
    literal,
    null,
    or_,
    select,
    text,
    tuple_,
    type_coerce,
    union_all,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from controlplane.db import dialect_insert
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import epoch_seconds
from controlplane.models import Task, TaskConfigVersion, TaskGrade, Window, WindowMetrics
from controlplane.timeutil import as_utc

DAY_SECONDS = 86400


@dataclass(frozen=True, slots=True)
class Span:
    """Which windows a task's grade reads: `since <= window_start < until`, computed with
    `config_version`."""

    task_id: int
    config_version: int
    since: datetime
    until: datetime


@dataclass(frozen=True, slots=True)
class SpanTotals:
    """A task's window aggregates over its span (zeros and None when it has no windows)."""

    results: int = 0
    days: int = 0
    input_p50: float | None = None
    input_p95: float | None = None
    input_tokens_sum: float = 0.0
    repeat_pairs: int = 0
    repeat_agree: int = 0
    repeat_invalid: int = 0
    repeat_diffs: Mapping[str, int] = field(default_factory=dict)


def shifted_at(session: Session, task_ids: Sequence[int]) -> dict[int, datetime]:
    """When each task's inputs last shifted (an input_shift rollback), for those that did."""
    if not task_ids:
        return {}
    rows = session.execute(
        select(Task.id, Task.shifted_at).where(
            Task.id.in_(list(task_ids)), Task.shifted_at.is_not(None)
        )
    )
    return {task_id: as_utc(at) for task_id, at in rows if at is not None}


def version_starts(session: Session, keys: Iterable[tuple[int, int]]) -> dict[int, datetime]:
    """When each task's given config version was made, by task id."""
    wanted = list(keys)
    if not wanted:
        return {}
    rows = session.execute(
        select(TaskConfigVersion.task_id, TaskConfigVersion.created_at).where(
            or_(
                *(
                    and_(TaskConfigVersion.task_id == t, TaskConfigVersion.version == v)
                    for t, v in wanted
                )
            )
        )
    )
    return {task_id: created for task_id, created in rows}


def _in_spans(spans: Sequence[Span]) -> ColumnElement[bool]:
    # One OR of per-task ranges: each arm is a range on the (task_id, window_start) index.
    if not spans:
        return false()
    return or_(
        *(
            and_(
                Window.task_id == s.task_id,
                Window.config_version == s.config_version,
                Window.window_start >= s.since,
                Window.window_start < s.until,
            )
            for s in spans
        )
    )


class whole_tokens(FunctionElement[float]):
    """A token count rounded to the nearest whole token, halves up, the same on both
    backends (PostgreSQL's round of a double rounds halves to even, SQLite's away from 0)."""

    type = Float()
    inherit_cache = True


@compiles(whole_tokens, "postgresql")
def _whole_pg(element: whole_tokens, compiler: SQLCompiler, **kw: Any) -> str:
    return f"floor({compiler.process(element.clauses, **kw)} + 0.5)"


@compiles(whole_tokens, "sqlite")
def _whole_sqlite(element: whole_tokens, compiler: SQLCompiler, **kw: Any) -> str:
    # Token counts are never negative: truncating x + 0.5 is flooring it.
    return f"CAST(CAST({compiler.process(element.clauses, **kw)} + 0.5 AS INTEGER) AS REAL)"


# Which grouping a row of the one grouped pass belongs to: PostgreSQL's GROUPING() bits
# over (p50, p95, day, diffs), a bit set for each column the row is not grouped by.
BY_P50, BY_P95, BY_DAY = 0b0111, 0b1011, 0b1100
# PostgreSQL's work_mem for the grouped pass: what lets the planner hash it (the memory
# used is that of the groups: about 30 MB for 100 tasks; see _hashed).
GROUPING_MEMORY = "128MB"


def span_totals(session: Session, spans: Sequence[Span]) -> dict[int, SpanTotals]:
    """Every span's aggregates, by task id, from one pass over the spans' `all` rows,
    grouped three ways at once: by the windows' input P50 and by their P95 (the results
    behind each value, for the medians), and by UTC day and repeat differences (the sums,
    the days with results, each distinct map of differences with its windows); of the
    P50 and P95 groups only each task's median comes back.

    Input length P50 and P95 over a span are approximated from the windows' own P50 and
    P95 (the raw results may be pruned, and reading them would cost the history): each is
    the results-weighted median of the windows' values, to the nearest whole token — the
    smallest value whose windows, with those below it, hold at least half the span's
    results. It equals the exact percentile when the windows are alike and stays within
    the windows' range of values otherwise; a long tail present in most of the traffic
    shows in it, a single window's spike does not."""
    if not spans:
        return {}
    counted = WindowMetrics.n_results > 0
    rows = (
        select(
            Window.task_id.label("task_id"),
            WindowMetrics.n_results.label("n"),
            WindowMetrics.n_repeat_pairs.label("pairs"),
            WindowMetrics.n_repeat_agree.label("agree"),
            WindowMetrics.n_repeat_invalid.label("invalid"),
            WindowMetrics.input_tokens_sum.label("tokens"),
            case((counted, whole_tokens(WindowMetrics.input_tokens_p50))).label("p50"),
            case((counted, whole_tokens(WindowMetrics.input_tokens_p95))).label("p95"),
            case((counted, epoch_seconds(Window.window_start) // DAY_SECONDS)).label("day"),
            case(
                (WindowMetrics.n_repeat_pairs > 0, WindowMetrics.repeat_diffs), else_=null()
            ).label("diffs"),
        )
        .select_from(
            Window.__table__.join(WindowMetrics.__table__, WindowMetrics.window_id == Window.id)
        )
        .where(WindowMetrics.bucket == ALL, _in_spans(spans))
        .subquery()
    )
    sums = (
        func.count().label("windows"),
        func.sum(rows.c.n).label("n"),
        func.sum(rows.c.pairs).label("pairs"),
        func.sum(rows.c.agree).label("agree"),
        func.sum(rows.c.invalid).label("invalid"),
        func.sum(rows.c.tokens).label("tokens"),
    )
    keys = (rows.c.p50, rows.c.p95, rows.c.day, rows.c.diffs)
    groupings = {BY_P50: keys[:1], BY_P95: keys[1:2], BY_DAY: keys[2:]}
    grouped: Select[Any] | CompoundSelect[Any]
    if session.get_bind().dialect.name == "postgresql":
        grouped = select(func.grouping(*keys).label("kind"), rows.c.task_id, *keys, *sums).group_by(
            func.grouping_sets(*(tuple_(rows.c.task_id, *by) for by in groupings.values()))
        )
    else:  # SQLite has no GROUPING SETS: the same groupings, one after the other
        # Typed, so the first select gives the union's columns their types (JSON read back).
        nothing = [type_coerce(null(), key.type).label(key.name) for key in keys]
        grouped = union_all(
            *(
                select(
                    literal(kind).label("kind"),
                    rows.c.task_id,
                    *(
                        key if any(key is k for k in by) else nothing[i]
                        for i, key in enumerate(keys)
                    ),
                    *sums,
                ).group_by(rows.c.task_id, *by)
                for kind, by in groupings.items()
            )
        )
    # Of the P50 and P95 groups only each task's median is read: the group (one value)
    # whose results, with those of the values below it, first reach half the task's.
    g = grouped.subquery()
    kind, task_id = g.c.kind, g.c.task_id
    value = case((kind == BY_P50, g.c.p50), (kind == BY_P95, g.c.p95))
    weight = case((and_(kind != BY_DAY, value.is_not(None)), g.c.n), else_=0)
    ranked = select(
        g,
        func.sum(weight).over(partition_by=(task_id, kind), order_by=value).label("reached"),
        func.sum(weight).over(partition_by=(task_id, kind)).label("total"),
        weight.label("weight"),
    ).subquery()
    medians = select(*ranked.c[: len(g.c)]).where(
        or_(
            ranked.c.kind == BY_DAY,
            and_(
                ranked.c.weight > 0,
                ranked.c.reached * 2 >= ranked.c.total,
                (ranked.c.reached - ranked.c.weight) * 2 < ranked.c.total,
            ),
        )
    )
    found: dict[int, _Totals] = {}
    for kind_, task, p50, p95, day, diffs, windows, *counts in _hashed(session, medians):
        totals = found.setdefault(task, _Totals())
        if kind_ == BY_DAY:
            totals.add(counts, day=day)
            for name, count in (diffs or {}).items():  # a JSON null reads back as None
                totals.diffs[str(name)] += int(count) * int(windows)
        elif kind_ == BY_P50:
            totals.p50 = float(p50)
        elif kind_ == BY_P95:
            totals.p95 = float(p95)
    return {task: totals.done() for task, totals in found.items()}


def _hashed(session: Session, grouped: Select[Any]) -> list[Any]:
    """The grouped pass's rows. On PostgreSQL, for this statement only: memory enough to
    hash the three groupings in one go (with the default 4 MB it sorts each grouping on
    disk, several times slower), and no JIT (set off by the estimated number of groups,
    its compilation costs more than this short aggregate)."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        return list(connection.execute(grouped))
    before = connection.execute(
        text("SELECT current_setting('work_mem'), current_setting('jit')")
    ).one()
    connection.execute(
        text("SELECT set_config('work_mem', :memory, true), set_config('jit', 'off', true)"),
        {"memory": GROUPING_MEMORY},
    )
    rows = list(connection.execute(grouped))
    connection.execute(
        text("SELECT set_config('work_mem', :memory, true), set_config('jit', :jit, true)"),
        {"memory": before[0], "jit": before[1]},
    )
    return rows


@dataclass
class _Totals:
    """One task's rows of the grouped pass, gathered."""

    # results, repeat pairs, repeat agree, repeat invalid, input tokens
    sums: list[float] = field(default_factory=lambda: [0, 0, 0, 0, 0.0])
    days: set[int] = field(default_factory=set)
    p50: float | None = None
    p95: float | None = None
    diffs: Counter[str] = field(default_factory=Counter)

    def add(self, counts: Sequence[Any], *, day: int | None) -> None:
        self.sums = [a + (b or 0) for a, b in zip(self.sums, counts, strict=True)]
        if day is not None:  # a day with results
            self.days.add(day)

    def done(self) -> SpanTotals:
        n, pairs, agree, invalid, tokens = self.sums
        return SpanTotals(
            results=int(n),
            days=len(self.days),
            input_p50=self.p50,
            input_p95=self.p95,
            input_tokens_sum=float(tokens),
            repeat_pairs=int(pairs),
            repeat_agree=int(agree),
            repeat_invalid=int(invalid),
            repeat_diffs=dict(self.diffs),
        )


# --- kept grades ---------------------------------------------------------------------


def upsert_grades(session: Session, grades: Sequence[Mapping[str, Any]]) -> None:
    """Each task's grade of its day (task_id, day, tier, score, config_version,
    computed_at, document), in one statement: a later computation of the same day
    replaces the earlier one."""
    replaced = ("tier", "score", "config_version", "computed_at", "document")
    # In statements of at most 100 rows: SQLite caps the parameters of one statement.
    for start in range(0, len(grades), 100):
        stmt = dialect_insert(session, TaskGrade).values(
            [dict(g) for g in grades[start : start + 100]]
        )
        session.execute(
            stmt.on_conflict_do_update(
                index_elements=["task_id", "day"],
                set_={name: stmt.excluded[name] for name in replaced},
            )
        )


def latest_grades(session: Session, task_ids: Iterable[int] | None = None) -> dict[int, TaskGrade]:
    """Each task's newest kept grade, by task id (all tasks, or those named)."""
    newest = select(TaskGrade.task_id, func.max(TaskGrade.day).label("day")).group_by(
        TaskGrade.task_id
    )
    if task_ids is not None:
        newest = newest.where(TaskGrade.task_id.in_(list(task_ids)))
    last = newest.subquery()
    rows = session.scalars(
        select(TaskGrade).join(
            last, and_(TaskGrade.task_id == last.c.task_id, TaskGrade.day == last.c.day)
        )
    )
    return {row.task_id: row for row in rows}


def grade_history(session: Session, task_id: int, since: date) -> list[TaskGrade]:
    """The task's kept grades of `since` and after, newest day first."""
    return list(
        session.scalars(
            select(TaskGrade)
            .where(TaskGrade.task_id == task_id, TaskGrade.day >= since)
            .order_by(TaskGrade.day.desc())
        )
    )


def task_names(session: Session, task_ids: Iterable[int]) -> dict[int, str]:
    ids = list(task_ids)
    if not ids:
        return {}
    rows = session.execute(select(Task.id, Task.name).where(Task.id.in_(ids)))
    return {task_id: name for task_id, name in rows}

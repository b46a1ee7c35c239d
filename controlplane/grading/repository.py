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

from sqlalchemy import ColumnElement, and_, case, false, func, or_, select
from sqlalchemy.orm import Session

from controlplane.db import dialect_insert
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import epoch_seconds
from controlplane.models import Task, TaskConfigVersion, TaskGrade, Window, WindowMetrics

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


def span_totals(session: Session, spans: Sequence[Span]) -> dict[int, SpanTotals]:
    """Every span's aggregates, by task id: one grouped pass for the sums, days and medians,
    and one read of the windows that carry per-field repeat differences.

    Input length P50 and P95 over a span are approximated from the windows' own P50 and
    P95 (the raw results may be pruned, and reading them would cost the history): each is
    the results-weighted median of the windows' values, i.e. the smallest window value
    whose windows, with those below it, hold at least half the span's results. It equals
    the exact percentile when the windows are alike and stays within the windows' range
    of values otherwise; a long tail present in most of the traffic shows in it, a single
    window's spike does not."""
    if not spans:
        return {}
    where = and_(WindowMetrics.bucket == ALL, _in_spans(spans))
    joined = Window.__table__.join(WindowMetrics.__table__, WindowMetrics.window_id == Window.id)
    counted = WindowMetrics.n_results > 0
    weights = {
        name: case((and_(counted, column.is_not(None)), WindowMetrics.n_results), else_=0)
        for name, column in (
            ("p50", WindowMetrics.input_tokens_p50),
            ("p95", WindowMetrics.input_tokens_p95),
        )
    }
    rows = (
        select(
            Window.task_id.label("task_id"),
            WindowMetrics.n_results.label("n_results"),
            WindowMetrics.n_repeat_pairs.label("n_repeat_pairs"),
            WindowMetrics.n_repeat_agree.label("n_repeat_agree"),
            WindowMetrics.n_repeat_invalid.label("n_repeat_invalid"),
            WindowMetrics.input_tokens_sum.label("input_tokens_sum"),
            case((counted, epoch_seconds(Window.window_start) // DAY_SECONDS)).label("day"),
            WindowMetrics.input_tokens_p50.label("p50"),
            WindowMetrics.input_tokens_p95.label("p95"),
            *(
                func.sum(weight)
                .over(partition_by=Window.task_id, order_by=order)
                .label(f"below_{name}")
                for (name, weight), order in zip(
                    weights.items(),
                    (WindowMetrics.input_tokens_p50, WindowMetrics.input_tokens_p95),
                    strict=True,
                )
            ),
            *(
                func.sum(weight).over(partition_by=Window.task_id).label(f"total_{name}")
                for name, weight in weights.items()
            ),
        )
        .select_from(joined)
        .where(where)
        .subquery()
    )

    def median(name: str) -> Any:
        value, below, total = rows.c[name], rows.c[f"below_{name}"], rows.c[f"total_{name}"]
        return func.min(
            case((and_(rows.c.n_results > 0, value.is_not(None), below * 2 >= total), value))
        )

    grouped = session.execute(
        select(
            rows.c.task_id,
            func.sum(rows.c.n_results),
            func.count(rows.c.day.distinct()),
            median("p50"),
            median("p95"),
            func.sum(rows.c.input_tokens_sum),
            func.sum(rows.c.n_repeat_pairs),
            func.sum(rows.c.n_repeat_agree),
            func.sum(rows.c.n_repeat_invalid),
        ).group_by(rows.c.task_id)
    ).all()
    diffs = _repeat_diffs(session, where, joined)
    out: dict[int, SpanTotals] = {}
    for task_id, n, days, p50, p95, tokens, pairs, agree, invalid in grouped:
        out[task_id] = SpanTotals(
            results=int(n or 0),
            days=int(days or 0),
            input_p50=None if p50 is None else float(p50),
            input_p95=None if p95 is None else float(p95),
            input_tokens_sum=float(tokens or 0.0),
            repeat_pairs=int(pairs or 0),
            repeat_agree=int(agree or 0),
            repeat_invalid=int(invalid or 0),
            repeat_diffs=dict(diffs.get(task_id, {})),
        )
    return out


def _repeat_diffs(session: Session, where: Any, joined: Any) -> dict[int, Counter[str]]:
    """Per-field (per-check) repeat differences summed over the span's windows, by task id:
    JSON maps, summed here (the two backends read JSON differently)."""
    found: dict[int, Counter[str]] = {}
    rows = session.execute(
        select(Window.task_id, WindowMetrics.repeat_diffs)
        .select_from(joined)
        .where(
            where,
            WindowMetrics.n_repeat_pairs > 0,
            WindowMetrics.repeat_diffs.is_not(None),
        )
    )
    for task_id, counts in rows:
        if counts:  # a JSON null reads back as None
            found.setdefault(task_id, Counter()).update({str(k): int(v) for k, v in counts.items()})
    return found


# --- kept grades ---------------------------------------------------------------------


def upsert_grade(
    session: Session,
    *,
    task_id: int,
    day: date,
    tier: str,
    score: float | None,
    config_version: int,
    computed_at: datetime,
    document: dict[str, Any],
) -> None:
    """The task's grade of `day`: a later computation of the same day replaces it."""
    values = {
        "task_id": task_id,
        "day": day,
        "tier": tier,
        "score": score,
        "config_version": config_version,
        "computed_at": computed_at,
        "document": document,
    }
    stmt = dialect_insert(session, TaskGrade).values(values)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["task_id", "day"],
            set_={name: stmt.excluded[name] for name in values if name not in ("task_id", "day")},
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

"""Grades computed, kept and read: one row per task and UTC day in `task_grades`.

`grade_task` and `grade_all` read the window aggregates over each task's span, call the
pure `grade`, and keep the result as the day's grade (a later computation the same day
replaces it; earlier days are history). The readers answer the stored documents. Like
every service here, nothing commits: the caller's session does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.audit.service import decision_view, record_decision
from controlplane.catalog.schemas import TaskConfig
from controlplane.catalog.service import TaskRuntime, runtime_or_404, runtimes, task_or_404
from controlplane.compare.comparators import comparator_version
from controlplane.grading import repository
from controlplane.grading.grade import Traffic, grade
from controlplane.metrics import shift
from controlplane.metrics.windows import span_since
from controlplane.models import Flag, Task, TaskGrade
from controlplane.models.base import utcnow
from controlplane.notify.documents import decision_document
from controlplane.notify.outbox import add_event
from controlplane.timeutil import as_utc


def read_traffic(
    session: Session, tasks: Sequence[TaskRuntime], *, now: datetime
) -> dict[str, Traffic]:
    """What each task's grade reads, by name: its windows' aggregates from
    max(now − span, the start of the window its current config version was made in) until
    now."""
    now = as_utc(now)
    starts = repository.version_starts(session, [(t.id, t.config_version) for t in tasks])
    shifts = repository.shifted_at(session, [t.id for t in tasks])
    spans = {}
    for task in tasks:
        since = span_since(
            now,
            task.config.grading.span_seconds,
            starts.get(task.id),
            task.config.window_seconds,
            shifts.get(task.id),
        )
        spans[task.id] = repository.Span(task.id, task.config_version, since, now)
    totals = repository.span_totals(session, list(spans.values()))
    out = {}
    for task in tasks:
        span, found = spans[task.id], totals.get(task.id, repository.SpanTotals())
        hist, over = shift.histogram_between(
            session, task.id, task.config.window_seconds, span.since, span.until
        )
        out[task.name] = Traffic(
            since=span.since,
            until=span.until,
            results=found.results,
            days=found.days,
            input_p50=found.input_p50,
            input_p95=found.input_p95,
            input_tokens_sum=found.input_tokens_sum,
            repeat_pairs=found.repeat_pairs,
            repeat_agree=found.repeat_agree,
            repeat_invalid=found.repeat_invalid,
            repeat_diffs=dict(found.repeat_diffs),
            input_hist=hist,
            over_cap=over,
        )
    return out


def _grade_and_keep(
    session: Session, tasks: Sequence[TaskRuntime], *, veto: float, now: datetime
) -> list[dict[str, Any]]:
    """Grade the tasks from one read of their windows and keep each as today's grade."""
    now = as_utc(now)
    traffic = read_traffic(session, tasks, now=now)
    documents, rows = [], []
    for task in tasks:
        found = grade(task.name, traffic[task.name], task.config, veto=veto, computed_at=now)
        # Kept and answered as JSON: times as ISO 8601 text, the same bytes from either.
        document = orjson.loads(orjson.dumps(found, option=orjson.OPT_NON_STR_KEYS))
        rows.append(
            {
                "task_id": task.id,
                "day": now.date(),
                "tier": document["tier"],
                "score": document.get("score"),
                "config_version": task.config_version,
                "computed_at": now,
                "document": document,
            }
        )
        documents.append(document)
    repository.upsert_grades(session, rows)
    session.flush()
    for task, document in zip(tasks, documents, strict=True):
        if document["tier"] == "offload":
            clear_regrade(session, task.id, document, now=now)
    return documents


def clear_regrade(session: Session, task_id: int, grade: dict[str, Any], *, now: datetime) -> None:
    """An `offload` grade over traffic since an input shift clears the task's
    `needs_regrade` mark: a decision, audited and announced, in the grade's transaction."""
    task = session.get(Task, task_id, with_for_update=True)
    if task is None or not task.needs_regrade or task.shifted_at is None:
        return
    if datetime.fromisoformat(grade["span"]["since"]) < as_utc(task.shifted_at):
        return
    task.needs_regrade = False
    flag = session.scalar(select(Flag.version).where(Flag.task_id == task.id))
    reason = (
        f"re-graded: the grade of {grade['computed_at'][:10]} over traffic since the input "
        f"shift ({grade['span']['results']} results from {grade['span']['since']}) says "
        "offload; promotion is open again"
    )
    decision = record_decision(
        session,
        task,
        action="regraded",
        actor="grading",
        reason=reason,
        evidence={"grade": {k: grade.get(k) for k in ("tier", "score", "computed_at", "span")}},
        flags=(flag, flag),
        at=now,
    )
    add_event(
        session,
        kind="decision",
        task=task.name,
        document=decision_document(decision_view(decision, task.name)),
    )


def grade_task(session: Session, task_name: str, *, veto: float, now: datetime) -> dict[str, Any]:
    """Grade the task now and keep it as today's grade; ActionError 404 for an unknown task."""
    return _grade_and_keep(session, [runtime_or_404(session, task_name)], veto=veto, now=now)[0]


def grade_held(
    session: Session, task: Task, config: TaskConfig, *, veto: float, now: datetime, keep: bool
) -> dict[str, Any]:
    """The grade of a task its caller holds, with the config the caller read now (not the
    per-process cache's, which may lag a config applied a moment ago): what the promotion
    gate judges. `keep` keeps it as today's grade; without, nothing is written (a policy
    pass judging before it takes its locks)."""
    spec = config.comparator.model_dump(mode="json")
    runtime = TaskRuntime(
        task.id,
        task.name,
        task.stage,
        task.config_version,
        config,
        spec,
        comparator_version(spec["kind"]),
    )
    if keep:
        return _grade_and_keep(session, [runtime], veto=veto, now=now)[0]
    now = as_utc(now)
    traffic = read_traffic(session, [runtime], now=now)[task.name]
    found = grade(task.name, traffic, config, veto=veto, computed_at=now)
    return dict(orjson.loads(orjson.dumps(found, option=orjson.OPT_NON_STR_KEYS)))


def grade_all(session: Session, *, veto: float, now: datetime) -> list[dict[str, Any]]:
    """Grade every task whose config parses (by name) and keep each as today's grade."""
    tasks = [runtime for _, runtime in runtimes(session).values()]
    return _grade_and_keep(session, tasks, veto=veto, now=now)


def latest_grade(session: Session, task_name: str) -> dict[str, Any] | None:
    """The task's newest kept grade (None: never graded); ActionError 404 for an unknown task."""
    task = task_or_404(session, task_name)
    row = repository.latest_grades(session, [task.id]).get(task.id)
    return None if row is None else row.document


def latest_grades(session: Session) -> dict[str, dict[str, Any]]:
    """Every graded task's newest kept grade, by task name."""
    rows = repository.latest_grades(session)
    names = repository.task_names(session, rows)
    return {names[task_id]: row.document for task_id, row in sorted(rows.items())}


def _is_current(row: TaskGrade | None, task: TaskRuntime, now: datetime) -> bool:
    # Today's grade of the config in force: a new config version (another error cost, other
    # thresholds) is graded again at once.
    return row is not None and row.day == now.date() and row.config_version == task.config_version


def current_grade(
    session: Session, task_name: str, *, veto: float, now: datetime
) -> dict[str, Any]:
    """Today's grade of the task: the kept one, else computed now and kept."""
    now = as_utc(now)
    task = runtime_or_404(session, task_name)
    row = repository.latest_grades(session, [task.id]).get(task.id)
    if _is_current(row, task, now):
        assert row is not None
        return row.document
    return _grade_and_keep(session, [task], veto=veto, now=now)[0]


def current_grades(session: Session, *, veto: float, now: datetime) -> list[dict[str, Any]]:
    """Today's grade of every task whose config parses, by task name: those not graded
    today (or graded on an older config version) are computed now, together, and kept."""
    now = as_utc(now)
    tasks = [runtime for _, runtime in runtimes(session).values()]
    rows = repository.latest_grades(session, [t.id for t in tasks])
    stale = [t for t in tasks if not _is_current(rows.get(t.id), t, now)]
    graded = _grade_and_keep(session, stale, veto=veto, now=now)
    fresh = {t.id: document for t, document in zip(stale, graded, strict=True)}
    return [fresh[t.id] if t.id in fresh else rows[t.id].document for t in tasks]


def grade_history(
    session: Session, task_name: str, days: int, *, now: datetime | None = None
) -> list[dict[str, Any]]:
    """The task's kept grades of the last `days` UTC days (today included), newest first:
    day, tier, score, config version, when computed, and the grade itself."""
    today = as_utc(now or utcnow()).date()
    task = task_or_404(session, task_name)
    rows = repository.grade_history(session, task.id, today - timedelta(days=max(days, 1) - 1))
    return [_history_row(row) for row in rows]


def _history_row(row: TaskGrade) -> dict[str, Any]:
    return {
        "day": row.day.isoformat(),
        "tier": row.tier,
        "score": row.score,
        "config_version": row.config_version,
        "computed_at": row.computed_at,
        "grade": row.document,
    }

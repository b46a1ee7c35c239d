"""The rollout's SQL: the stage's windows, the results behind a firing, blocks, decisions."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from controlplane.catalog.schemas import (
    MAX_SPAN_WINDOWS,
    MIN_WINDOWS_READ,
    SPAN_METRICS,
    TaskConfig,
)
from controlplane.metrics import shift
from controlplane.metrics.fields import ALL, COUNTS, RATE_COUNTS
from controlplane.metrics.repository import bucket_of
from controlplane.metrics.windows import from_index, of_length
from controlplane.models import (
    BlockedModel,
    Decision,
    Flag,
    OutboxEvent,
    Result,
    RouteAccuracyWindow,
    Task,
    Window,
    WindowMetrics,
)
from controlplane.rollout.policy import LabelWindows, Spans, Windows, judged_buckets

EXAMPLES = 20
# The stored counts a stage's windows are read with: every rate rule's and the gate's.
JUDGED = (*COUNTS, *RATE_COUNTS)
# The span rules judge the closes of this many latest windows at each pass (one hour of
# the default windows): a pass that runs late still sees a breach between passes.
SPAN_POINTS = 12
# The task's latest notices a new one is compared with (one per rule, bucket and firing).
NOTICES_READ = 500


def stage_windows(session: Session, task: Task, config: TaskConfig) -> Windows:
    """The closed windows that started in the current stage — the most recent
    `evaluation_windows(config)` of them — numbered by window index, with the stored metric
    row of every bucket."""
    recent = (
        select(Window.id, Window.window_start, Window.window_end)
        .where(Window.task_id == task.id, Window.closed_at.is_not(None))
        .order_by(Window.window_start.desc())
        .limit(evaluation_windows(config))
    )
    if task.stage_changed_at is not None:
        recent = recent.where(Window.window_start >= task.stage_changed_at)
    seconds = config.window_seconds
    # Only windows of the task's current length, on its boundaries: windows made before
    # `window_seconds` changed keep their spans (metrics.windows.placed) but would be
    # numbered alike here, so the rules read evidence from the new length's windows on.
    ids = {
        window_id: start
        for window_id, start, end in session.execute(recent)
        if of_length(start, end, seconds)
    }
    by_window: dict[datetime, dict[str, dict[str, Any]]] = defaultdict(dict)
    if ids:
        # The counts only: what the rate rules and the gate read (not the percentiles, the
        # repeat differences or the length histograms, which the span rules read apart).
        columns = [getattr(WindowMetrics, name) for name in JUDGED]
        rows = session.execute(
            select(WindowMetrics.window_id, WindowMetrics.bucket, *columns).where(
                WindowMetrics.window_id.in_(list(ids))
            )
        )
        for window_id, bucket, *values in rows:
            by_window[ids[window_id]][bucket] = dict(zip(JUDGED, values, strict=True))
    return [(int(start.timestamp()) // seconds, by_window[start]) for start in sorted(by_window)]


def stage_label_windows(session: Session, task: Task, config: TaskConfig) -> LabelWindows:
    """The closed route-accuracy windows that started in the current stage — the most
    recent `evaluation_windows(config)` of them — numbered by start //
    `route_acc_window_seconds`, oldest first: what the label rules judge."""
    query = (
        select(
            RouteAccuracyWindow.window_start,
            RouteAccuracyWindow.window_end,
            RouteAccuracyWindow.estimate,
            RouteAccuracyWindow.n_effective,
            RouteAccuracyWindow.failure_classes,
        )
        .where(RouteAccuracyWindow.task_id == task.id, RouteAccuracyWindow.closed_at.is_not(None))
        .order_by(RouteAccuracyWindow.window_start.desc())
        .limit(evaluation_windows(config))
    )
    if task.stage_changed_at is not None:
        query = query.where(RouteAccuracyWindow.window_start >= task.stage_changed_at)
    seconds = config.review.route_acc_window_seconds
    rows = sorted(session.execute(query).all(), key=lambda row: row[0])
    # Only windows of the current length on its boundaries, as stage_windows.
    rows = [row for row in rows if of_length(row[0], row[1], seconds)]
    return [
        (
            int(start.timestamp()) // seconds,
            {"estimate": estimate, "n_effective": size, "failure_classes": classes or {}},
        )
        for start, _, estimate, size, classes in rows
    ]


def stage_spans(
    session: Session,
    task: Task,
    config: TaskConfig,
    windows: Windows,
    now: datetime | None = None,
) -> Spans | None:
    """What the span rules (net_savings, input_shift) read: the `all` rows of the stage's
    windows over the longest span before each close judged, and the task's input baseline.
    The closes judged are the latest `SPAN_POINTS` — and, for a pass at `now`, every window
    that pass closed (at most MAX_SPAN_WINDOWS): after an outage of the scheduler, a backlog
    closed at once is judged close by close, so a run of breaches that began and one that
    ended in it are told apart. None when no span rule is on or no window closed."""
    rules = [
        r for r in config.rollback.resolved_rules() if r.metric in SPAN_METRICS and r.mode != "off"
    ]
    if not rules or not windows:
        return None
    shifts = [r for r in rules if r.metric == "input_shift"]
    baseline = shift.baseline(session, task) if shifts else None
    if baseline is None and all(r.metric == "input_shift" for r in rules):
        # Nothing to compare with (no offload grade, no kept baseline): input_shift can only
        # be insufficient, so a task on the default rules reads nothing more.
        return None
    seconds = config.window_seconds
    latest = windows[-1][0]
    longest = max(r.span_windows(seconds) for r in rules)
    origin = span_origin(session, task, seconds)
    if origin is None:
        origin = windows[0][0]
    judge_from = max(origin, latest - SPAN_POINTS + 1)
    if now is not None:
        backlog = session.scalar(
            select(func.min(Window.window_start)).where(
                Window.task_id == task.id,
                # Closed by this pass (its clock): never by a later one, whatever the clocks.
                Window.closed_at == now,
                Window.window_start >= from_index(origin, seconds),
            )
        )
        if backlog is not None:
            first = int(backlog.timestamp()) // seconds
            judge_from = max(origin, latest - MAX_SPAN_WINDOWS + 1, min(judge_from, first))
    read_from = max(origin, judge_from - longest + 1)
    # Histograms only as far back as the input_shift spans reach (net_savings reads costs).
    hist_from = judge_from - max((r.span_windows(seconds) for r in shifts), default=0)
    rows = shift.span_windows(
        session,
        task.id,
        seconds,
        from_index(read_from, seconds),
        # Without an input_shift rule, none (a start after the latest window).
        hist_since=from_index(hist_from if shifts else latest + 1, seconds),
    )
    return Spans(rows, origin, judge_from, baseline)


def span_origin(session: Session, task: Task, seconds: int) -> int | None:
    """The first window a span rule's span may reach: the first that started in the stage —
    in canary and full, since the task left shadow (a canary step is no new traffic: the
    inputs and the money run on through the steps, and a step shorter than the span must
    not keep the span rules from ever judging)."""
    began = task.stage_changed_at
    if task.stage in ("canary", "full"):
        left = session.scalar(
            select(Decision.created_at)
            .where(
                Decision.task_id == task.id,
                Decision.stage_before == "shadow",
                Decision.stage_after.in_(("canary", "full")),
            )
            .order_by(Decision.id.desc())
            .limit(1)
        )
        if left is not None:
            began = left if began is None else min(began, left)
    return math.ceil(began.timestamp() / seconds) if began is not None else None


def longest_inputs(session: Session, where: Any) -> list[str]:
    """The request ids of the longest inputs in a range: an input shift's examples."""
    return list(
        session.scalars(
            select(Result.request_id)
            .where(*where)
            .order_by(Result.input_tokens.desc(), Result.ts)
            .limit(EXAMPLES)
        )
    )


def noticed_run(session: Session, task: Task, notice: dict[str, Any], *, ongoing: bool) -> bool:
    """Whether this stage already announced the run of breaches a span rule's notice is
    about: a notice of the same rule at or after the run's first breach, or — for a run
    that began before the closes judged now (`ongoing`) — any notice of the rule."""
    for document in stage_notices(session, task):
        if document.get("rule") != notice["rule"] or document.get("bucket") != notice["bucket"]:
            continue
        if ongoing or str(document.get("window_end") or "") >= notice["window_end"]:
            return True
    return False


def evaluation_windows(config: TaskConfig) -> int:
    """How many recent windows an evaluation reads: three times the longest run the rule can
    span, and never fewer than the gate needs or `MIN_WINDOWS_READ` (100: a CUSUM's cap is
    validated against it). A pass costs the same in week one and week ten of a canary."""
    return max(3 * config.rollback.span_windows, config.promotion.min_windows, MIN_WINDOWS_READ)


def in_cell(task: Task, config: TaskConfig, cell: str, start: datetime, end: datetime) -> Any:
    """The WHERE clauses of a task's results in a cell (bucket or `all`) and time range."""
    where = [Result.task_id == task.id, Result.ts >= start, Result.ts < end]
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    bucket = bucket_of(Result.input_tokens, config.length_buckets)
    where.append(bucket == cell if cell != ALL else bucket.in_(judged))
    return where


def in_time(task: Task, start: datetime, end: datetime) -> Any:
    return [Result.task_id == task.id, Result.ts >= start, Result.ts < end]


def models_seen(session: Session, where: Any) -> list[str]:
    return sorted(
        m
        for m in session.scalars(select(Result.edge_model).where(*where).distinct())
        if m is not None
    )


def examples(session: Session, where: Any) -> list[str]:
    bad = or_(
        Result.outcome.in_(("conflict", "invalid")),
        Result.edge_error.is_not(None),
        Result.edge_valid.is_(False),
        Result.degraded.is_(True),
    )
    return list(
        session.scalars(
            select(Result.request_id).where(*where, bad).order_by(Result.ts).limit(EXAMPLES)
        )
    )


def flag_version(session: Session, task_id: int) -> int | None:
    return session.scalar(select(Flag.version).where(Flag.task_id == task_id))


def decided(session: Session, dedupe_key: str) -> bool:
    """Whether a decision with this key was already made."""
    return session.scalar(select(Decision.id).where(Decision.dedupe_key == dedupe_key)) is not None


def stage_notices(session: Session, task: Task) -> list[dict[str, Any]]:
    """The latest notices (their documents) the task's stage has announced, newest first."""
    query = (
        select(OutboxEvent.document)
        .where(OutboxEvent.kind == "notice", OutboxEvent.task == task.name)
        .order_by(OutboxEvent.id.desc())
        .limit(NOTICES_READ)
    )
    if task.stage_changed_at is not None:
        query = query.where(OutboxEvent.created_at >= task.stage_changed_at)
    return list(session.scalars(query))


def noticed(session: Session, task: Task, notice: dict[str, Any]) -> bool:
    """Whether this stage already announced the notice: the same rule, bucket and firing
    window (a rule in notify mode fires at every pass over the same windows)."""
    same = ("rule", "bucket", "window_end")
    return any(
        all(document.get(k) == notice[k] for k in same) for document in stage_notices(session, task)
    )


def block(session: Session, task: Task, model: str, decision_id: int | None) -> None:
    """Block auto-promotion while `model` serves the edge (a rollback saw it)."""
    exists = session.scalar(
        select(BlockedModel.id).where(
            BlockedModel.task_id == task.id,
            BlockedModel.model == model,
            BlockedModel.lifted_at.is_(None),
        )
    )
    if exists is None:
        session.add(BlockedModel(task_id=task.id, model=model, decision_id=decision_id))
        session.flush()


def active_block(session: Session, task_id: int, model: str) -> BlockedModel | None:
    return session.scalars(
        select(BlockedModel).where(
            BlockedModel.task_id == task_id,
            BlockedModel.model == model,
            BlockedModel.lifted_at.is_(None),
        )
    ).one_or_none()


def blocked_models(session: Session, task_id: int) -> list[str]:
    return list(
        session.scalars(
            select(BlockedModel.model)
            .where(BlockedModel.task_id == task_id, BlockedModel.lifted_at.is_(None))
            .order_by(BlockedModel.model)
        )
    )


def decisions(
    session: Session, task: str | None, limit: int, action: str | None = None
) -> list[tuple[Decision, str | None]]:
    """Decisions newest first, with their task's name (None for kill and lift)."""
    query = (
        select(Decision, Task.name)
        .outerjoin(Task, Task.id == Decision.task_id)
        .order_by(Decision.id.desc())
        .limit(limit)
    )
    if task is not None:
        query = query.where(Task.name == task)
    if action is not None:
        query = query.where(Decision.action == action)
    return [(d, name) for d, name in session.execute(query)]


# The actions a decision records for one task, and those for every task at once (no task).
TASK_ACTIONS = ("promote", "rollback", "rearm", "needs_regrade", "regraded")
EVERY_TASK_ACTIONS = ("kill", "lift")


def decision_counts(session: Session) -> dict[tuple[str, str], int]:
    """Decisions per (task, action) for /metrics, kill and lift under the task "": zero for
    every action a task has not had yet, so a counter's first decision is an increase."""
    counts = {
        (name, action): 0 for name in session.scalars(select(Task.name)) for action in TASK_ACTIONS
    }
    counts |= {("", action): 0 for action in EVERY_TASK_ACTIONS}
    rows = session.execute(
        select(Task.name, Decision.action, func.count())
        .select_from(Decision)
        .outerjoin(Task, Task.id == Decision.task_id)
        .group_by(Task.name, Decision.action)
    )
    for task, action, n in rows:
        counts[(task or "", action)] = int(n)
    return counts


def tasks_in_order(session: Session, *, for_update: bool) -> list[Task]:
    """Every task, by id (the lock order among tasks)."""
    query = select(Task).order_by(Task.id)
    if for_update:
        query = query.with_for_update()
    return list(session.scalars(query))

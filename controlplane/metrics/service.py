"""Computing windows: which are due, one window's metrics, closing, late results
(docs/architecture.md, "From a result to a decision"; docs/evidence.md, "Windows").

`compute_window` is idempotent (a lock on the window's row, one upsert per bucket and
`all`); a closed window's metrics never change, later results only raise its `n_late`.
The same functions run in Celery jobs, `shadowplane tick` and the embedded scheduler.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from controlplane.catalog.service import TaskRuntime, load_runtimes, runtimes
from controlplane.metrics import repository
from controlplane.metrics.fields import ALL, FIELDS, metric_fields
from controlplane.metrics.windows import (
    boundary_after,
    closes_at,
    from_index,
    placed,
    recent_starts,
)
from controlplane.metrics.windows import window_start as start_of
from controlplane.models import Task, Window, WindowMetrics
from controlplane.models.base import utcnow

RESULTS_SCAN = "results"
log = logging.getLogger("shadowplane.metrics")


@dataclass(frozen=True, slots=True, order=True)
class WindowJob:
    task_id: int
    window_start: datetime


@dataclass(frozen=True, slots=True)
class Computed:
    task_id: int
    window_start: datetime
    # computed | closed (computed and closed now) | late (a closed window's n_late updated)
    action: str
    n_results: int


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """One task skipped at one stage of a pass (plan, window, alerts, rollout), and why."""

    task: str
    stage: str
    error: str

    def __str__(self) -> str:
        return f"task {self.task} {self.stage}: {self.error}"


@dataclass(frozen=True, slots=True)
class Plan:
    jobs: list[WindowJob]
    failed: list[TaskFailure] = field(default_factory=list)


def plan(session: Session, now: datetime) -> Plan:
    """The windows one pass must compute at `now`, oldest first per task, and the tasks
    that could not be planned."""
    tasks, broken = load_runtimes(session)
    failed = [TaskFailure(task.name, "plan", why) for task, why in broken.values()]
    seconds = {tid: rt.config.window_seconds for tid, (_, rt) in tasks.items()}
    mark = repository.scan_mark(session, RESULTS_SCAN)
    # Its xmin from a snapshot taken before the scan's: a transaction it shows ended had
    # committed (or aborted) before the scan read.
    before = repository.snapshot_horizon(session)
    touched, highest = repository.windows_with_new_results(session, seconds, mark.previous_id)
    # Its xmax from one taken after the scan's: past every transaction that held an id the
    # scan saw.
    after = repository.snapshot_horizon(session)
    if before is None or after is None:
        # SQLite: one writer at a time. The next scan starts from this scan's start.
        mark.previous_id, mark.last_id = mark.last_id, max(highest, mark.last_id)
    else:
        # PostgreSQL: an ingest claims its keys (and so has a transaction id) before it
        # draws result ids, so a transaction still writing an id up to `last_id` was running
        # at the scan that saw it. Once the oldest running transaction is newer than that
        # scan's xmax, ids up to `last_id` are final and the scans start there; until then
        # they read again from where they read (models.ScanMark).
        xmin, xmax = before[0], after[1]
        if mark.last_xmax is not None and xmin >= mark.last_xmax:
            mark.previous_id, mark.last_xmax = mark.last_id, None
        if mark.last_xmax is None:
            mark.last_id, mark.last_xmax = max(highest, mark.last_id), xmax
        else:
            _say_who_holds_the_scan(session, xmin, now)
    mark.updated_at = utcnow()
    touched_starts: dict[int, set[datetime]] = {}
    for tid, idx in touched:
        touched_starts.setdefault(tid, set()).add(from_index(idx, seconds[tid]))

    with_new: set[WindowJob] = set()
    candidates: set[WindowJob] = set()
    for tid, (task, rt) in tasks.items():
        new_here = touched_starts.get(tid, set())
        try:
            recent = {job.window_start for job in _recent_jobs(task, rt, now)}
        except Exception as exc:  # one task must not stop the others; the next pass retries it
            log.exception("task %s: planning failed; skipped in this pass", task.name)
            failed.append(TaskFailure(task.name, "plan", f"{type(exc).__name__}: {exc}"))
            recent = set()
        # Outside the guard: a database error fails the plan (and its job is retried).
        found = _placed(session, tid, seconds[tid], new_here | recent)
        with_new.update(WindowJob(tid, s) for a in new_here for s in found[a])
        candidates.update(WindowJob(tid, s) for starts in found.values() for s in starts)
    candidates.update(with_new)
    open_rows = session.execute(
        select(Window.task_id, Window.window_start).where(Window.closed_at.is_(None))
    )
    candidates.update(WindowJob(tid, start) for tid, start in open_rows if tid in tasks)
    closed = _closed(session, candidates)
    jobs = sorted(job for job in candidates if job not in closed or job in with_new)
    return Plan(jobs, failed)


# A transaction that keeps the scans reading again for longer than this is logged, once.
HELD_SCAN_WARNING = timedelta(minutes=5)
_held_said: set[tuple[int, datetime]] = set()


def _say_who_holds_the_scan(session: Session, xmin: int, now: datetime) -> None:
    """Log once the transaction (pid, start, query) that has kept the window scans reading
    the same results again for more than HELD_SCAN_WARNING: each pass reads more until it
    ends. Nothing is lost meanwhile."""
    holder = repository.oldest_writer(session, xmin)
    if holder is None:
        return
    pid, started, query = holder
    if started is None or now - started < HELD_SCAN_WARNING or (pid, started) in _held_said:
        return
    _held_said.add((pid, started))
    log.warning(
        "a transaction open since %s (pid %s: %s) holds the window scans back: each pass "
        "reads the results written since it began again until it ends",
        started.isoformat(),
        pid,
        query,
    )


def _placed(
    session: Session, task_id: int, seconds: int, aligned: set[datetime]
) -> dict[datetime, list[datetime]]:
    """For each aligned start of the task's current `window_seconds`, the starts of the
    windows that cover its span (windows.placed): itself when no window made with another
    length overlaps it, as always while the length has not changed."""
    if not aligned:
        return {}
    step = timedelta(seconds=seconds)
    existing = repository.window_spans(session, task_id, min(aligned), max(aligned) + step)
    return {a: placed(a, seconds, existing) for a in aligned}


def _recent_jobs(task: Task, rt: TaskRuntime, now: datetime) -> list[WindowJob]:
    """The task's windows a pass always looks at: those that may still be open, and enough
    recent ones for the silence alert."""
    ws = rt.config.window_seconds
    keep = (
        max(rt.config.alerts.silence_windows, math.ceil(rt.config.allowed_lateness_seconds / ws))
        + 1
    )
    return [
        WindowJob(task.id, start)
        for start in recent_starts(now, ws, keep, not_before=task.created_at)
    ]


def _closed(session: Session, jobs: set[WindowJob]) -> set[WindowJob]:
    if not jobs:
        return set()
    keys = [(j.task_id, j.window_start) for j in jobs]
    found: set[WindowJob] = set()
    for start in range(0, len(keys), 500):
        rows = session.execute(
            select(Window.task_id, Window.window_start).where(
                Window.closed_at.is_not(None),
                tuple_(Window.task_id, Window.window_start).in_(keys[start : start + 500]),
            )
        )
        found.update(WindowJob(tid, ws) for tid, ws in rows)
    return found


def compute_window(
    session: Session, *, task_id: int, window_start: datetime, now: datetime
) -> Computed:
    """Compute (or, once closed, count late results of) one window. Idempotent."""
    found = runtimes(session).get(task_id)
    if found is None:
        raise LookupError(f"task {task_id}: no such task, or its stored config does not parse")
    task, rt = found
    config = rt.config
    # A window keeps the span it was made with; a new one runs to the next boundary of the
    # task's window length, cut short where a window made with another length begins. A
    # start inside an existing window (planned before the length changed) is that window.
    holding = repository.window_holding(session, task_id, window_start)
    if holding is None:
        # A new window: one pass at a time makes the task's new windows, and sees the ones
        # another made meanwhile (two passes across a change of length would otherwise make
        # overlapping spans, each from the windows it saw).
        repository.lock_new_windows(session, task_id)
        holding = repository.window_holding(session, task_id, window_start)
    if holding is not None:
        window_start, end = holding.window_start, holding.window_end
    else:
        end = boundary_after(window_start, config.window_seconds)
        following = repository.next_window_start(session, task_id, window_start)
        if following is not None and following < end:
            end = following
    window = repository.lock_window(
        session, task_id, window_start, end, list(config.length_buckets), rt.config_version
    )
    end = window.window_end
    if window.closed_at is not None:
        counts = repository.bucket_counts(
            session, task_id, window.window_start, window.window_end, window.length_buckets
        )
        stored = repository.stored_metrics(session, window.id)
        late = {b: max(0, counts[b] - row.n_results) for b, row in stored.items() if b in counts}
        repository.set_late(session, window.id, late)
        return Computed(task_id, window_start, "late", late.get(ALL, 0))

    previous = repository.stored_metrics(session, window.id).get(ALL)
    rows = repository.aggregate_window(
        session,
        task_id,
        window_start,
        end,
        config.length_buckets,
        config.prices.model_dump(),
        expected_rows=previous.n_results if previous is not None else 0,
        max_input_tokens=config.max_input_tokens,
    )
    repository.upsert_metrics(session, window, rows.values())
    if window.length_buckets != list(config.length_buckets):
        repository.drop_buckets(session, window.id, rows)
    window.length_buckets = list(config.length_buckets)
    window.config_version = rt.config_version
    window.computed_at = utcnow()
    action = "computed"
    if now >= end + timedelta(seconds=config.allowed_lateness_seconds):
        window.closed_at = now
        action = "closed"
    session.flush()
    return Computed(task_id, window_start, action, rows[ALL]["n_results"])


def window_rows(
    session: Session,
    task: TaskRuntime,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    bucket: str | None = None,
    limit: int = 10_000,
) -> list[dict[str, Any]]:
    """Flat rows: one per window and bucket, every metric field (docs/evidence.md) by name."""
    query = (
        select(Window, WindowMetrics)
        .join(WindowMetrics, WindowMetrics.window_id == Window.id)
        .where(Window.task_id == task.id)
        .order_by(Window.window_start, WindowMetrics.id)
        .limit(limit)
    )
    if since is not None:
        query = query.where(Window.window_start >= since)
    if until is not None:
        query = query.where(Window.window_start < until)
    if bucket is not None:
        query = query.where(WindowMetrics.bucket == bucket)
    out = []
    for window, metrics in session.execute(query):
        seconds = int((window.window_end - window.window_start).total_seconds())
        stored = {c.key: getattr(metrics, c.key) for c in WindowMetrics.__table__.columns}
        row = {
            "window_start": window.window_start,
            "window_end": window.window_end,
            "bucket": metrics.bucket,
            "closed": window.closed_at is not None,
            "closed_at": window.closed_at,
            "config_version": window.config_version,
            **metric_fields(
                stored, window_seconds=seconds, fixed_cost_per_day=task.config.fixed_cost_per_day
            ),
        }
        out.append({name: row[name] for name in FIELDS})
    return out


@dataclass(frozen=True, slots=True)
class TaskLag:
    task: str
    # Seconds past the moment the newest window due by now should have closed (0 when it has).
    close_lag_seconds: float
    # Seconds since any window of the task was last computed (None: never).
    computed_age_seconds: float | None


def lag(session: Session, now: datetime) -> list[TaskLag]:
    """How far window computation is behind the clock, per task (for `/metrics`)."""
    tasks = runtimes(session)
    computed = dict(
        session.execute(
            select(Window.task_id, func.max(Window.computed_at)).group_by(Window.task_id)
        ).all()
    )
    out = []
    for tid, (task, rt) in sorted(tasks.items(), key=lambda item: item[1][0].name):
        ws, lateness = rt.config.window_seconds, rt.config.allowed_lateness_seconds
        due = start_of(now - timedelta(seconds=ws + lateness), ws)
        first = start_of(task.created_at, ws)
        close_lag = 0.0
        if due >= first:
            late_by = timedelta(seconds=lateness)
            # The oldest window still open, past its own end plus the lateness (one made
            # before `window_seconds` changed keeps its own, longer or shorter, span).
            oldest_open = session.scalar(
                select(func.min(Window.window_end)).where(
                    Window.task_id == tid, Window.closed_at.is_(None)
                )
            )
            if oldest_open is not None and oldest_open + late_by <= now:
                close_lag = (now - (oldest_open + late_by)).total_seconds()
            if repository.window_holding(session, tid, due) is None:
                # Nothing was made for the window due: counted from the end of the newest
                # window before it (or the task's start), so that with nothing computing
                # windows the lag grows with the clock instead of starting again at 0.
                last_end = session.scalar(
                    select(func.max(Window.window_end)).where(
                        Window.task_id == tid, Window.window_start < due
                    )
                )
                waiting = first if last_end is None else max(last_end, first)
                missing = (now - closes_at(waiting, ws, lateness)).total_seconds()
                close_lag = max(close_lag, missing)
        last = computed.get(tid)
        out.append(TaskLag(task.name, close_lag, (now - last).total_seconds() if last else None))
    return out


def latest_closed_rows(session: Session, task_id: int | None = None) -> list[dict[str, Any]]:
    """The rows of each task's (or one task's) latest closed window, every bucket."""
    latest_query = select(Window.task_id, func.max(Window.window_start).label("start")).where(
        Window.closed_at.is_not(None)
    )
    if task_id is not None:
        latest_query = latest_query.where(Window.task_id == task_id)
    latest = latest_query.group_by(Window.task_id).subquery()
    windows = session.scalars(
        select(Window).join(
            latest, (Window.task_id == latest.c.task_id) & (Window.window_start == latest.c.start)
        )
    ).all()
    tasks = runtimes(session)
    out = []
    for window in windows:
        if window.task_id not in tasks:
            continue
        task, rt = tasks[window.task_id]
        for row in window_rows(session, rt, since=window.window_start, until=window.window_end):
            out.append({"task": task.name, **row})
    return out

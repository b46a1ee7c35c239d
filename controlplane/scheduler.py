"""One periodic pass, and what a closed window triggers (docs/architecture.md, "From a
result to a decision").

`after_window` is the one function a closed window sets off (alerts, review sampling,
route accuracy, rollout rules, each in its own transaction); the in-process pass and the
Celery job both call it, so the two paths decide the same things for the same traffic.
`run_pass` is `shadowplane tick`; a task that fails is named in `failed` and retried.
`grade_every_task` is the daily grading, run by the Celery job and by the in-process
scheduler once a UTC day.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import partial
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from controlplane.alerts.service import AlertEvent, evaluate
from controlplane.db import in_transaction, session_scope
from controlplane.evalsets.service import fill_waiting
from controlplane.grading.service import grade_all
from controlplane.metrics.service import Computed, TaskFailure, compute_window, plan
from controlplane.models import Task
from controlplane.models.base import utcnow
from controlplane.models.partitions import keep_partitions
from controlplane.review.accuracy import refresh_route_accuracy
from controlplane.review.sampler import sample_closed_windows
from controlplane.rollout.actions import evaluation_failed, evaluation_works, ground_unparsed
from controlplane.rollout.evaluation import evaluate_rollout
from controlplane.settings import get_settings

log = logging.getLogger("shadowplane.scheduler")
# Seconds between two runs of `keep_partitions` (PostgreSQL's day partitions).
PARTITIONS_EVERY = 3600.0
PARTITIONS_RETRY = 300.0
# A daily grading that failed (the database down) is tried again this many seconds later.
GRADING_RETRY = 300.0
# A window that closed now, or a closed one that counted late results: both are evaluated
# (a retried job finds the window it closed already closed, and must still evaluate it).
EVALUATED = ("closed", "late")


@dataclass
class AfterWindow:
    """What one `after_window` did, and what failed (the exceptions, for a job to retry)."""

    alerts: list[AlertEvent] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    sampled: int = 0
    # Labelled regression items put into their eval sets (`fill_regression_sets`).
    filled: int = 0
    failed: list[TaskFailure] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)


def ground(engine: Engine) -> list[str]:
    """Each task whose stored config does not parse, sent to the cloud
    (rollout.actions.ground_unparsed); a failure is logged and tried again next pass."""
    try:
        return in_transaction(engine, ground_unparsed)
    except Exception:
        log.exception("sending the tasks whose config does not parse to the cloud failed")
        return []


def _evaluate(session: Session, *, task_id: int, now: datetime, veto: float) -> Any:
    """The task's rollout evaluation and, in the same transaction, that it works (a task a
    failing evaluation had grounded gets its stage's flag back)."""
    outcome = evaluate_rollout(session, task_id=task_id, now=now, veto=veto)
    evaluation_works(session, task_id)
    return outcome


def _noting(engine: Engine, note: Any, task_id: int, **kw: Any) -> None:
    """Record whether the task's rollout evaluation works (rollout.actions); a failure to
    record it is logged and the next evaluation tries again."""
    try:
        in_transaction(engine, partial(note, task_id=task_id, **kw))
    except Exception:
        log.exception("task %s: noting its rollout evaluation failed", task_id)


def after_window(
    engine: Engine, task_id: int, now: datetime, *, veto: float, name: str | None = None
) -> AfterWindow:
    """Everything a closed window of the task triggers: alerts, then rollout rules, each in
    its own transaction (with its outbox events). A failure of one does not keep the other
    from acting; both are idempotent, so running this again for the same window is safe.
    `veto` is the error-cost veto (settings, passed in by the door)."""
    label = name or str(task_id)
    done = AfterWindow()
    try:
        done.alerts = in_transaction(engine, partial(evaluate, task_id=task_id))
    except Exception as exc:
        log.exception("task %s: alert evaluation failed", label)
        done.failed.append(TaskFailure(label, "alerts", _why(exc)))
        done.errors.append(exc)
    try:
        done.sampled = in_transaction(
            engine, partial(sample_closed_windows, task_id=task_id, now=now)
        )
    except Exception as exc:
        log.exception("task %s: review sampling failed", label)
        done.failed.append(TaskFailure(label, "review", _why(exc)))
        done.errors.append(exc)
    try:
        done.alerts.extend(
            in_transaction(engine, partial(refresh_route_accuracy, task_id=task_id, now=now))
        )
    except Exception as exc:
        log.exception("task %s: route accuracy failed", label)
        done.failed.append(TaskFailure(label, "route_accuracy", _why(exc)))
        done.errors.append(exc)
    try:
        outcome = in_transaction(engine, partial(_evaluate, task_id=task_id, now=now, veto=veto))
    except Exception as exc:
        log.exception("task %s: rollout evaluation failed", label)
        done.failed.append(TaskFailure(label, "rollout", _why(exc)))
        done.errors.append(exc)
        # When in doubt, the cloud: evaluations failing past a grace ground the task.
        _noting(engine, evaluation_failed, task_id, now=now, why=_why(exc))
    else:
        done.decisions, done.notices = outcome.decisions, outcome.notices
    for event in done.alerts:
        log.warning("alert %s %s on %s: %s", event.change, event.kind, event.task, event.message)
    for decision in done.decisions:
        log.warning(
            "decision %s on %s: %s", decision["action"], decision["task"], decision["reason"]
        )
    return done


@dataclass
class PassReport:
    now: datetime
    windows: list[Computed] = field(default_factory=list)
    alerts: list[AlertEvent] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    sampled: int = 0
    # Labelled regression items put into their eval sets (`fill_regression_sets`).
    filled: int = 0
    failed: list[TaskFailure] = field(default_factory=list)
    # Tasks whose `after_window` failed: the next pass evaluates them again, window or not.
    unevaluated: set[int] = field(default_factory=set)

    def count(self, action: str) -> int:
        return sum(1 for c in self.windows if c.action == action)


def run_pass(
    engine: Engine,
    now: datetime | None = None,
    *,
    veto: float | None = None,
    retry: set[int] | frozenset[int] = frozenset(),
) -> PassReport:
    """Compute every window that is due or has new results, close those past their lateness,
    then `after_window` (alerts, rollout rules, their outbox events) for each task with a
    window that closed, and for the tasks in `retry` (those whose evaluation failed in the
    previous pass: `PassReport.unevaluated`); last, labelled regression items into their
    eval sets (`fill_regression_sets`).

    `veto`: the error-cost veto; the caller's settings (default: this process's)."""
    now = now or utcnow()
    veto = get_settings().error_cost_veto if veto is None else veto
    report = PassReport(now)
    planned = in_transaction(engine, lambda session: plan(session, now))
    report.failed.extend(planned.failed)
    if planned.failed:
        ground(engine)
    with session_scope(engine) as session:
        names: dict[int, str] = {
            tid: name for tid, name in session.execute(select(Task.id, Task.name).order_by(Task.id))
        }
    closed: dict[int, None] = dict.fromkeys(t for t in retry if t in names)
    for job in planned.jobs:
        name = names.get(job.task_id, str(job.task_id))
        try:
            computed = in_transaction(
                engine,
                partial(
                    compute_window, task_id=job.task_id, window_start=job.window_start, now=now
                ),
            )
        except Exception as exc:  # one bad window must not stop the others; it is retried next pass
            log.exception("task %s: window %s failed", name, job.window_start.isoformat())
            report.failed.append(
                TaskFailure(name, "window", f"{job.window_start.isoformat()}: {_why(exc)}")
            )
            continue
        report.windows.append(computed)
        if computed.action in EVALUATED:
            closed[job.task_id] = None
    # Once per task whose windows closed: evaluations read every closed window, and a rule
    # fires at the first window it sees breached, whichever window's closing ran it.
    for task_id in sorted(closed):
        done = after_window(engine, task_id, now, veto=veto, name=names.get(task_id))
        report.alerts.extend(done.alerts)
        report.decisions.extend(done.decisions)
        report.notices.extend(done.notices)
        report.sampled += done.sampled
        report.failed.extend(done.failed)
        if done.failed:
            report.unevaluated.add(task_id)
    filled, failure = fill_regression_sets(engine)
    report.filled = filled
    if failure is not None:
        report.failed.append(failure)
    return report


def fill_regression_sets(engine: Engine) -> tuple[int, TaskFailure | None]:
    """Every task's labelled regression items into its `regression` eval set, in one
    transaction (each pass: that layer fills from reviewers' labels alone); how many eval
    items were added, and the failure when it failed (the next pass tries again)."""
    try:
        return in_transaction(engine, fill_waiting), None
    except Exception as exc:  # the windows of this pass stand; the next pass fills
        log.exception("regression eval sets: fill failed")
        return 0, TaskFailure("(every task)", "regression_set", _why(exc))


def grade_every_task(engine: Engine, now: datetime, *, veto: float) -> list[dict[str, Any]]:
    """Grade every task and keep each as today's grade, in one transaction (docs/grading.md);
    running it again the same day replaces that day's grades."""
    graded = in_transaction(engine, partial(grade_all, veto=veto, now=now))
    for document in graded:
        log.info("grade %s: %s (score %s)", document["task"], document["tier"], document["score"])
    return graded


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


class InProcessScheduler:
    """Runs `run_pass` every `interval` seconds on a daemon thread (no Redis, no Celery),
    keeps the day partitions ahead hourly, and grades every task once a UTC day (at start,
    then at the first pass of each new day)."""

    def __init__(self, engine: Engine, interval: float, *, veto: float) -> None:
        self.engine = engine
        self.interval = interval
        self.veto = veto
        self.last: PassReport | None = None
        # The UTC day of the last daily grading, and what it kept.
        self.graded_day: date | None = None
        self.grades: list[dict[str, Any]] = []
        self._retry: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shadowplane-tick", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        partitions_due = 0.0
        grading_due = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= partitions_due:
                try:  # hourly: the days ahead exist long before they are needed
                    keep_partitions(self.engine, utcnow(), get_settings().max_backfill)
                    partitions_due = time.monotonic() + PARTITIONS_EVERY
                except Exception:
                    # Not at every pass: each try queues ingest behind its lock request.
                    log.exception("creating day partitions failed; trying again in 5 minutes")
                    partitions_due = time.monotonic() + PARTITIONS_RETRY
            try:
                self.last = run_pass(self.engine, veto=self.veto, retry=self._retry)
                self._retry = self.last.unevaluated
            except Exception:  # the database may be down: log, wait, try again
                log.exception("scheduled pass failed")
            now = utcnow()
            if self.graded_day != now.date() and time.monotonic() >= grading_due:
                try:  # daily, after the pass: the windows it read are the latest
                    self.grades = grade_every_task(self.engine, now, veto=self.veto)
                    self.graded_day = now.date()
                except Exception:
                    log.exception("grading every task failed; trying again in 5 minutes")
                    grading_due = time.monotonic() + GRADING_RETRY
            self._stop.wait(self.interval)

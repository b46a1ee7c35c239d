"""One periodic pass (DESIGN §1): compute due windows, close them, then evaluate alerts.

`run_pass` is what `shadowplane tick` runs, what the embedded default's in-process
scheduler runs every few seconds, and what the Celery jobs split across workers (one
job per task and window). Each window is its own transaction, so one failing window
does not hold back the others; then alerts, then rollout rules (the review sampler of a
later step comes after them), each task's in transactions of their own. A task that
fails at any stage is logged, named in the report's `failed`, and skipped; the others go
on, and the next pass tries it again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Engine, select

from controlplane.alerts.service import AlertEvent, evaluate
from controlplane.db import in_transaction, session_scope
from controlplane.metrics.service import Computed, TaskFailure, compute_window, plan
from controlplane.models import Task
from controlplane.models.base import utcnow
from controlplane.rollout.service import evaluate_rollout
from controlplane.rollout.webhooks import Notifier

log = logging.getLogger("shadowplane.scheduler")


@dataclass
class PassReport:
    now: datetime
    windows: list[Computed] = field(default_factory=list)
    alerts: list[AlertEvent] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    failed: list[TaskFailure] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(1 for c in self.windows if c.action == action)


def run_pass(
    engine: Engine, now: datetime | None = None, notifier: Notifier | None = None
) -> PassReport:
    """Compute every window that is due or has new results, close those past their lateness,
    evaluate alerts on the newly closed windows, then each task's rollout rules; announce
    decisions and alerts to the webhooks."""
    now = now or utcnow()
    report = PassReport(now)
    planned = in_transaction(engine, lambda session: plan(session, now))
    report.failed.extend(planned.failed)
    with session_scope(engine) as session:
        names: dict[int, str] = {
            tid: name for tid, name in session.execute(select(Task.id, Task.name).order_by(Task.id))
        }
    for job in planned.jobs:
        name = names.get(job.task_id, str(job.task_id))
        try:
            report.windows.append(
                in_transaction(
                    engine,
                    partial(
                        compute_window, task_id=job.task_id, window_start=job.window_start, now=now
                    ),
                )
            )
        except Exception as exc:  # one bad window must not stop the others; it is retried next pass
            log.exception("task %s: window %s failed", name, job.window_start.isoformat())
            report.failed.append(
                TaskFailure(name, "window", f"{job.window_start.isoformat()}: {_why(exc)}")
            )
    for task_id, name in names.items():
        # Alerts and rollout rules apart: a bug in one must not keep the other from acting.
        try:
            report.alerts.extend(in_transaction(engine, partial(evaluate, task_id=task_id)))
        except Exception as exc:
            log.exception("task %s: alert evaluation failed", name)
            report.failed.append(TaskFailure(name, "alerts", _why(exc)))
        try:
            outcome = in_transaction(engine, partial(evaluate_rollout, task_id=task_id, now=now))
        except Exception as exc:
            log.exception("task %s: rollout evaluation failed", name)
            report.failed.append(TaskFailure(name, "rollout", _why(exc)))
            continue
        report.decisions.extend(outcome.decisions)
        report.notices.extend(outcome.notices)
    if notifier is not None:
        notifier.alerts(report.alerts)
        notifier.decisions(report.decisions)
        notifier.announce(report.notices)
    return report


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


class InProcessScheduler:
    """Runs `run_pass` every `interval` seconds on a daemon thread (no Redis, no Celery)."""

    def __init__(self, engine: Engine, interval: float, notifier: Notifier | None = None) -> None:
        self.engine = engine
        self.interval = interval
        self.notifier = notifier
        self.last: PassReport | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shadowplane-tick", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.last = run_pass(self.engine, notifier=self.notifier)
            except Exception:  # the database may be down: log, wait, try again
                log.exception("scheduled pass failed")
            self._stop.wait(self.interval)

"""Alert state per task and kind: open → resolved by itself, acknowledged by a person.

`evaluate_task` walks the task's closed windows that alerts have not seen, oldest first,
under a lock on the task row, so two workers never judge the same window twice. At most
one alert per (task, kind) is open or acknowledged at a time (a partial unique index).
Every alert that opens or resolves is written to the outbox in the transaction that
changed it, so a receiver hears of it whoever evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, false, func, or_, select
from sqlalchemy.orm import Session

from controlplane.alerts import rules, srm
from controlplane.alerts.rules import Finding, WindowSummary
from controlplane.audit.service import record
from controlplane.catalog.schemas import AlertsConfig, input_shift_rule
from controlplane.catalog.service import TaskRuntime, runtimes
from controlplane.metrics import lengths, shift
from controlplane.metrics.fields import ALL
from controlplane.models import (
    Alert,
    FlagHistory,
    Result,
    Task,
    TaskConfigVersion,
    Window,
    WindowMetrics,
)
from controlplane.models.base import utcnow
from controlplane.notify.documents import alert_document
from controlplane.notify.outbox import add_event

ACTIVE = ("open", "acknowledged")


@dataclass(frozen=True, slots=True)
class AlertEvent:
    alert_id: int
    task: str
    kind: str
    # opened | resolved | acknowledged
    change: str
    message: str


class AlertNotFound(LookupError):
    pass


def _summaries(session: Session, task_id: int, before: datetime, limit: int) -> list[WindowSummary]:
    rows = session.execute(
        select(Window.window_start, WindowMetrics)
        .join(WindowMetrics, WindowMetrics.window_id == Window.id)
        .where(
            Window.task_id == task_id,
            Window.window_start < before,
            Window.closed_at.is_not(None),
            WindowMetrics.bucket == ALL,
        )
        .order_by(Window.window_start.desc())
        .limit(limit)
    )
    return [summary(start, m) for start, m in reversed(list(rows))]


def summary(start: datetime, m: WindowMetrics) -> WindowSummary:
    return WindowSummary(
        start, m.n_results, m.n_pairs, m.n_conflict, m.n_served_edge, m.input_tokens_p95
    )


def evaluate_task(session: Session, task: Task, runtime: TaskRuntime) -> list[AlertEvent]:
    """Judge every closed window of the task that alerts have not seen yet, oldest first."""
    session.execute(select(Task.id).where(Task.id == task.id).with_for_update())
    session.refresh(task)
    pending = session.execute(
        select(Window, WindowMetrics)
        .join(WindowMetrics, WindowMetrics.window_id == Window.id)
        .where(
            Window.task_id == task.id,
            Window.closed_at.is_not(None),
            Window.alerts_evaluated.is_(False),
            WindowMetrics.bucket == ALL,
        )
        .order_by(Window.window_start)
    )
    config = runtime.config.alerts
    depth = max(config.baseline_windows, config.silence_windows)
    events: list[AlertEvent] = []
    terms: dict[int, srm.Terms] | None = None
    baseline: shift.Baseline | None = None
    baseline_read = False  # read once, when a window needs it
    min_results = input_shift_rule(runtime.config.rollback).min_samples
    for window, metrics in list(pending):
        current = summary(window.window_start, metrics)
        history = _summaries(session, task.id, window.window_start, depth)
        if not baseline_read:
            baseline, baseline_read = shift.baseline(session, task), True
        found = rules.findings(
            current,
            history,
            config,
            stage=task.stage,
            window_seconds=runtime.config.window_seconds,
            stage_changed_at=task.stage_changed_at,
            lengths=_length_shift(session, task, runtime, window, baseline),
            min_results=min_results,
        )
        if task.stage == "canary":
            terms = _flag_terms(session, task.id) if terms is None else terms
            found.append(_srm(session, task, window, terms, config))
        else:  # the check applies to canary traffic only: an open alert resolves
            found.append(srm.finding(srm.Tally(), config, stage=task.stage))
        for finding in found:
            event = _apply(session, task, window.window_start, finding)
            if event is not None:
                add_event(session, kind="alert", task=task.name, document=alert_document(event))
                events.append(event)
        window.alerts_evaluated = True
    session.flush()
    return events


def _length_shift(
    session: Session,
    task: Task,
    runtime: TaskRuntime,
    window: Window,
    baseline: shift.Baseline | None,
) -> rules.LengthShift:
    """The input lengths of the span ending with `window`, against the baseline."""
    rule = input_shift_rule(runtime.config.rollback)
    seconds = runtime.config.window_seconds
    # As the rule reads it: whole windows, at least one (a span shorter than a window).
    span = rule.span_windows(seconds) * seconds
    if baseline is None:
        return rules.LengthShift(None, 0, span)
    since = window.window_end - timedelta(seconds=span)
    rows = shift.span_windows(session, task.id, seconds, since, window.window_end)
    counts = lengths.add(w.input_hist for w in rows)
    return rules.LengthShift(
        lengths.psi(counts, baseline.counts),
        sum(counts),
        span,
        lengths.quantile(counts, 0.5),
        lengths.quantile(list(baseline.counts), 0.5),
        baseline.source,
    )


def _flag_terms(session: Session, task_id: int) -> dict[int, srm.Terms]:
    """What each version of the task's flag told routers, from the flag history."""
    rows = session.execute(
        select(FlagHistory.version, FlagHistory.fields).where(FlagHistory.task_id == task_id)
    )
    found = {version: srm.terms_of(fields or {}) for version, fields in rows}
    return {version: t for version, t in found.items() if t is not None}


def _srm(
    session: Session,
    task: Task,
    window: Window,
    terms: dict[int, srm.Terms],
    config: AlertsConfig,
) -> Finding:
    """The sample-ratio finding of a canary window, from all its results (the router's
    decision, the stored sticky bucket or none, the flag version or none). Grouped in the
    database by what the check reads, so a window of any size costs one small answer."""
    caps = {v: t.max_input_tokens for v, t in terms.items() if t.max_input_tokens is not None}
    over: ColumnElement[bool] = (
        Result.input_tokens > case(caps, value=Result.flag_version, else_=None) if caps else false()
    )
    attempt = or_(Result.served == "edge", Result.degraded)
    over_cap = func.coalesce(over, false())
    rows = session.execute(
        select(
            Result.flag_version,
            Result.config_version,
            Result.sticky_bucket,
            Result.decision,
            attempt.label("attempt"),
            func.max(Result.input_tokens),
            func.count(),
        )
        .where(
            and_(
                Result.task_id == task.id,
                Result.ts >= window.window_start,
                Result.ts < window.window_end,
            )
        )
        # Within a group every result is over its version's cap or none is, so the
        # group's largest input stands for all of them.
        .group_by(
            Result.flag_version,
            Result.config_version,
            Result.sticky_bucket,
            Result.decision,
            attempt,
            over_cap,
        )
    ).all()
    config_versions = {row[1] for row in rows}
    keyed_by = {
        version: (document or {}).get("sticky_by", "session")
        for version, document in session.execute(
            select(TaskConfigVersion.version, TaskConfigVersion.config).where(
                TaskConfigVersion.task_id == task.id,
                TaskConfigVersion.version.in_(config_versions),
            )
        )
    }
    requests = (
        srm.Request(
            bucket=bucket,
            input_tokens=tokens,
            flag_version=flag_version,
            edge_attempt=bool(on_edge),
            keyed_by=keyed_by.get(config_version, "session"),
            count=n,
            eligible=decision == "edge",
        )
        for flag_version, config_version, bucket, decision, on_edge, tokens, n in rows
    )
    return srm.finding(srm.tally(requests, terms), config, stage=task.stage)


def _apply(
    session: Session, task: Task, window_start: datetime, finding: Finding
) -> AlertEvent | None:
    active = session.scalars(
        select(Alert).where(
            Alert.task_id == task.id, Alert.kind == finding.kind, Alert.state.in_(ACTIVE)
        )
    ).one_or_none()
    now = utcnow()
    if finding.firing is True:
        if active is not None:
            active.value, active.baseline, active.message = (
                finding.value,
                finding.baseline,
                finding.message,
            )
            active.window_start, active.updated_at = window_start, now
            return None
        alert = Alert(
            task_id=task.id,
            kind=finding.kind,
            state="open",
            window_start=window_start,
            value=finding.value,
            baseline=finding.baseline,
            message=finding.message,
            opened_at=now,
            updated_at=now,
        )
        session.add(alert)
        session.flush()
        return AlertEvent(alert.id, task.name, finding.kind, "opened", finding.message)
    if finding.firing is False and active is not None:
        active.state, active.resolved_at, active.updated_at = "resolved", now, now
        return AlertEvent(active.id, task.name, finding.kind, "resolved", active.message)
    return None


def alert_view(alert: Alert, task: str) -> dict[str, Any]:
    return {
        "id": alert.id,
        "task": task,
        "kind": alert.kind,
        "state": alert.state,
        "window_start": alert.window_start,
        "value": alert.value,
        "baseline": alert.baseline,
        "message": alert.message,
        "opened_at": alert.opened_at,
        "updated_at": alert.updated_at,
        "acknowledged_at": alert.acknowledged_at,
        "acknowledged_by": alert.acknowledged_by,
        "resolved_at": alert.resolved_at,
    }


def list_alerts(
    session: Session, *, task: str | None = None, state: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """Alerts, newest first, filtered by task name and state."""
    query = (
        select(Alert, Task.name)
        .join(Task, Task.id == Alert.task_id)
        .order_by(Alert.opened_at.desc(), Alert.id.desc())
        .limit(limit)
    )
    if task is not None:
        query = query.where(Task.name == task)
    if state is not None:
        query = query.where(Alert.state == state)
    return [alert_view(alert, name) for alert, name in session.execute(query)]


def acknowledge(
    session: Session, alert_id: int, *, actor: str, note: str | None
) -> tuple[dict[str, Any], AlertEvent | None]:
    """Mark an alert as seen by a person (audited); it still resolves by itself when the
    condition clears. Returns its view, and the change (None when it was not open)."""
    row = session.execute(
        select(Alert, Task.name)
        .join(Task, Task.id == Alert.task_id)
        .where(Alert.id == alert_id)
        .with_for_update(of=Alert)
    ).one_or_none()
    if row is None:
        raise AlertNotFound(f"no alert {alert_id}")
    alert, task = row
    event = None
    if alert.state == "open":
        now = utcnow()
        alert.state, alert.acknowledged_at, alert.acknowledged_by = "acknowledged", now, actor
        alert.updated_at = now
        record(
            session,
            actor=actor,
            action="alert.ack",
            task=task,
            details={"alert": alert.id, "kind": alert.kind, "note": note},
        )
        session.flush()
        event = AlertEvent(alert.id, task, alert.kind, "acknowledged", alert.message)
    return alert_view(alert, task), event


def evaluate(session: Session, task_id: int) -> list[AlertEvent]:
    """`evaluate_task` for a task id (what a job or a pass holds)."""
    found = runtimes(session).get(task_id)
    if found is None:
        return []
    return evaluate_task(session, *found)


def active_counts(session: Session) -> dict[tuple[str, str], int]:
    """Open or acknowledged alerts per (task, kind)."""
    rows = session.execute(
        select(Task.name, Alert.kind, func.count())
        .join(Task, Task.id == Alert.task_id)
        .where(Alert.state.in_(ACTIVE))
        .group_by(Task.name, Alert.kind)
    )
    return {(task, kind): n for task, kind, n in rows}

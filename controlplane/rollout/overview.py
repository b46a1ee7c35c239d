"""The overview of every task at once (the dashboard's first page): one row per task with
its stage, flag, latest closed window, alerts, last decision and newest grade, trouble on
top; the kill switch's state and its decisions; the alerts not yet resolved.

A handful of queries for all tasks together, whatever their number: the latest closed
window of each task is found by a `max(window_start)` per task (a backward scan of the
(task, window_start) key), not by one query per task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from controlplane.alerts.service import active_counts, list_alerts
from controlplane.catalog.schemas import TaskConfig
from controlplane.catalog.service import load_runtimes
from controlplane.grading.service import latest_grades
from controlplane.metrics.fields import ALL, RATES, metric_fields
from controlplane.models import Decision, FlagState, Task, Window, WindowMetrics
from controlplane.rollout.flags import flags_document
from controlplane.rollout.policy import LABEL_METRICS, cell_series, judged_buckets
from controlplane.rollout.service import decision_view
from controlplane.rollout.verdicts import judge

# How many kill and lift decisions the overview lists.
SWITCH_DECISIONS = 10


@dataclass(frozen=True, slots=True)
class Breach:
    """A rule the latest closed window breaches on its own (the policy still needs its
    run of windows before it acts)."""

    rule: str
    cell: str
    estimate: float | None
    bound: float | None
    threshold: float

    def sentence(self) -> str:
        where = "overall" if self.cell == ALL else f"on {self.cell}"
        estimate = "—" if self.estimate is None else f"{self.estimate:.1%}"
        bound = "—" if self.bound is None else f"{self.bound:.1%}"
        return f"{self.rule} {where}: {estimate} (bound {bound})"


@dataclass(frozen=True, slots=True)
class TaskRow:
    task: str
    stage: str
    config_version: int
    # The published flag: its version, the share of traffic it sends to the edge (0-100)
    # and whether the kill switch holds it.
    flag_version: int | None
    edge_percent: int | None
    killed: bool
    # The latest closed window, bucket `all`; None without one.
    window_start: datetime | None
    window_end: datetime | None
    edge_share: float | None
    agreement: float | None
    agreement_low: float | None
    agreement_high: float | None
    n_pairs: int | None
    # The bucket with the lowest lower bound of agreement in that window.
    worst_bucket: str | None
    worst_agreement: float | None
    worst_agreement_low: float | None
    degrade_rate: float | None
    offload_fail_rate: float | None
    # The window's savings against the cloud-only baseline, less the fixed cost, per day.
    net_savings_per_day: float | None
    # Alerts not yet resolved (open or acknowledged), and of them not acknowledged.
    open_alerts: int
    unacknowledged_alerts: int
    breaches: tuple[Breach, ...]
    last_decision: dict[str, Any] | None
    # Why the stored config cannot be read (the task is shown, its metrics are not).
    config_error: str | None
    # What makes the task a worry, most serious first; empty when nothing does.
    trouble: tuple[str, ...]
    # The newest kept grade (docs/grading.md); None: never graded.
    grade: dict[str, Any] | None = None

    @property
    def last_decision_sentence(self) -> str | None:
        return self.last_decision["reason"] if self.last_decision else None


@dataclass(frozen=True, slots=True)
class Overview:
    rows: list[TaskRow]
    killed: bool
    kill_reason: str | None
    revision: int
    # Kill and lift decisions, newest first (they belong to no task).
    switch_decisions: list[dict[str, Any]]
    # Alerts not yet resolved, newest first.
    alerts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def in_trouble(self) -> list[TaskRow]:
        return [row for row in self.rows if row.trouble]


def latest_windows(session: Session) -> dict[int, tuple[Window, dict[str, dict[str, Any]]]]:
    """Each task's latest closed window with its stored metric rows by bucket, in one query:
    the latest start per task first (one backward scan of the task's windows each), then
    those windows and their rows by key."""
    inner = aliased(Window)
    start = (
        select(func.max(inner.window_start))
        .where(inner.task_id == Task.id, inner.closed_at.is_not(None))
        .correlate(Task)
        .scalar_subquery()
    )
    latest = select(Task.id.label("task_id"), start.label("start")).subquery()
    query = (
        select(Window, WindowMetrics)
        .join(
            latest,
            (Window.task_id == latest.c.task_id) & (Window.window_start == latest.c.start),
        )
        .join(WindowMetrics, WindowMetrics.window_id == Window.id)
    )
    out: dict[int, tuple[Window, dict[str, dict[str, Any]]]] = {}
    columns = [c.key for c in WindowMetrics.__table__.columns]
    for window, metrics in session.execute(query):
        stored = {name: getattr(metrics, name) for name in columns}
        out.setdefault(window.task_id, (window, {}))[1][metrics.bucket] = stored
    return out


def last_decisions(session: Session) -> dict[int | None, dict[str, Any]]:
    """The newest decision of each task (key None: the newest kill or lift)."""
    newest = select(func.max(Decision.id)).group_by(Decision.task_id)
    rows = session.execute(
        select(Decision, Task.name)
        .outerjoin(Task, Task.id == Decision.task_id)
        .where(Decision.id.in_(newest))
    )
    return {decision.task_id: decision_view(decision, name) for decision, name in rows}


def switch_decisions(session: Session, limit: int = SWITCH_DECISIONS) -> list[dict[str, Any]]:
    """Kill and lift decisions, newest first."""
    rows = session.scalars(
        select(Decision).where(Decision.task_id.is_(None)).order_by(Decision.id.desc()).limit(limit)
    )
    return [decision_view(decision, None) for decision in rows]


def breaches(config: TaskConfig, stored: Mapping[str, Mapping[str, Any]]) -> list[Breach]:
    """The rules (not `off`, not label rules) whose one-sided bound crosses the threshold in
    one window's rows, judged as the policy judges a cell with at least `min_samples`."""
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    out = []
    for rule in config.rollback.resolved_rules():
        if rule.mode == "off" or rule.metric in LABEL_METRICS or rule.metric not in RATES:
            continue
        cells = [*judged, ALL] if rule.scope == "per_bucket" else [ALL]
        for cell in cells:
            [window] = cell_series([(0, stored)], rule.metric, cell, judged)
            if window.den < rule.min_samples:
                continue
            verdict = judge([window], rule.op, rule.threshold, rule.confidence)
            if verdict.verdict == "breach":
                name = f"{rule.metric} {rule.op} {rule.threshold:g}"
                out.append(Breach(name, cell, verdict.estimate, verdict.bound, rule.threshold))
    return out


def _worst(rows: Mapping[str, Mapping[str, Any]]) -> tuple[str, Mapping[str, Any]] | None:
    found = [
        (bucket, row)
        for bucket, row in rows.items()
        if bucket != ALL and row["agreement_low"] is not None
    ]
    if not found:
        return None
    return min(found, key=lambda item: (item[1]["agreement_low"], item[0]))


def _trouble(
    stage: str, killed: bool, open_alerts: int, found: Sequence[Breach], config_error: str | None
) -> tuple[str, ...]:
    out = []
    if stage == "rolled_back":
        out.append("rolled back")
    if killed:
        out.append("killed")
    if open_alerts:
        out.append(f"{open_alerts} open alert{'s' if open_alerts != 1 else ''}")
    if found:
        out.append("breaching " + "; ".join(b.sentence() for b in found))
    if config_error:
        out.append("config does not parse")
    return tuple(out)


def _rank(row: TaskRow) -> tuple[int, str]:
    """Rolled back, then killed, then open alerts, then breaching, then the rest; by name."""
    if row.stage == "rolled_back":
        return 0, row.task
    if row.killed:
        return 1, row.task
    if row.open_alerts:
        return 2, row.task
    if row.breaches or row.config_error:
        return 3, row.task
    return 4, row.task


def overview(session: Session) -> Overview:
    """Every task's row, trouble on top; the kill switch; the alerts not yet resolved."""
    parsed, broken = load_runtimes(session)
    tasks = sorted(
        [(task, rt.config, None) for task, rt in parsed.values()]
        + [(task, None, why) for task, why in broken.values()],
        key=lambda item: item[0].name,
    )
    document = flags_document(session)
    flags = document["flags"]
    state = session.get(FlagState, 1)
    windows = latest_windows(session)
    decisions = last_decisions(session)
    grades = latest_grades(session)
    counts = active_counts(session)
    alerts = list_alerts(session, state="open") + list_alerts(session, state="acknowledged")
    alerts.sort(key=lambda a: (a["opened_at"], a["id"]), reverse=True)
    unacknowledged: dict[str, int] = {}
    for alert in alerts:
        if alert["state"] == "open":
            unacknowledged[alert["task"]] = unacknowledged.get(alert["task"], 0) + 1

    rows = []
    for task, config, config_error in tasks:
        flag = flags.get(task.name)
        killed = bool(flag and flag.get("killed"))
        derived: dict[str, dict[str, Any]] = {}
        window: Window | None = None
        found: list[Breach] = []
        if config is not None and task.id in windows:
            window, stored = windows[task.id]
            seconds = int((window.window_end - window.window_start).total_seconds())
            derived = {
                bucket: metric_fields(
                    row, window_seconds=seconds, fixed_cost_per_day=config.fixed_cost_per_day
                )
                for bucket, row in stored.items()
            }
            found = breaches(config, stored)
        every = derived.get(ALL, {})
        worst = _worst(derived)
        net = every.get("net_savings")
        per_day = None
        if net is not None and window is not None:
            per_day = net * 86400 / (window.window_end - window.window_start).total_seconds()
        open_alerts = sum(n for (name, _), n in counts.items() if name == task.name)
        row = TaskRow(
            task=task.name,
            stage=task.stage,
            config_version=task.config_version,
            flag_version=flag["version"] if flag else None,
            edge_percent=flag["edge_percent"] if flag else None,
            killed=killed,
            window_start=window.window_start if window else None,
            window_end=window.window_end if window else None,
            edge_share=every.get("edge_share"),
            agreement=every.get("agreement"),
            agreement_low=every.get("agreement_low"),
            agreement_high=every.get("agreement_high"),
            n_pairs=every.get("n_pairs"),
            worst_bucket=worst[0] if worst else None,
            worst_agreement=worst[1]["agreement"] if worst else None,
            worst_agreement_low=worst[1]["agreement_low"] if worst else None,
            degrade_rate=every.get("degrade_rate"),
            offload_fail_rate=every.get("offload_fail_rate"),
            net_savings_per_day=per_day,
            open_alerts=open_alerts,
            unacknowledged_alerts=unacknowledged.get(task.name, 0),
            breaches=tuple(found),
            last_decision=decisions.get(task.id),
            config_error=config_error,
            trouble=_trouble(task.stage, killed, open_alerts, found, config_error),
            grade=grades.get(task.name),
        )
        rows.append(row)
    rows.sort(key=_rank)
    return Overview(
        rows=rows,
        killed=bool(state and state.killed),
        kill_reason=state.kill_reason if state else None,
        revision=document["revision"],
        switch_decisions=switch_decisions(session),
        alerts=alerts,
    )

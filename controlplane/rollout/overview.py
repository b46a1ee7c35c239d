"""The overview of every task at once (the dashboard's first page): one row per task with
its stage, flag, latest closed window with results, 24 hours of agreement and edge share,
alerts, last decision and newest grade, trouble on top; the kill switch's state and its
decisions; the alerts not yet resolved.

A handful of queries for all tasks together, whatever their number: each task's latest
closed window with results is the newest entry of the task in ix_window_metrics_with_results
(an index of the `all` rows that count results, so the empty windows closed since a task
went quiet are never read), and its windows with results in the 24 hours before it are
summed in SQL into at most SERIES_POINTS steps per task (window by window when they fit),
in one statement for every task. A task with no results
in the windows after its last window with results is quiet: it keeps the figures of that
window, and says since when it has had none."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, and_, func, literal, literal_column, select, true, union_all
from sqlalchemy.orm import Session, aliased

from controlplane.alerts.service import active_counts, list_alerts
from controlplane.catalog.schemas import TaskConfig
from controlplane.catalog.service import load_runtimes
from controlplane.grading.service import latest_grades
from controlplane.metrics.fields import ALL, RATES, metric_fields
from controlplane.metrics.repository import epoch_seconds
from controlplane.models import Decision, FlagState, Task, Window, WindowMetrics
from controlplane.models.base import utcnow
from controlplane.rollout.flags import flags_document
from controlplane.rollout.policy import LABEL_METRICS, cell_series, judged_buckets
from controlplane.rollout.service import decision_view
from controlplane.rollout.verdicts import judge

log = logging.getLogger("shadowplane.overview")

# How many kill and lift decisions the overview lists.
SWITCH_DECISIONS = 10
# The sparklines: the windows with results in this span before a task's shown window's
# end, in at most this many points.
SERIES_SPAN = timedelta(hours=24)
SERIES_POINTS = 288
# What they draw, in this order (each a rate of controlplane.metrics.fields.RATES).
SERIES_RATES = ("agreement", "edge_share")


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
class Point:
    """One step of a sparkline: its first window's start, and the agreement and edge share
    of its windows' `all` rows pooled (counts summed); None without pairs, or (both) at a
    gap: steps without results between two with."""

    start: datetime
    agreement: float | None
    edge_share: float | None


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
    # The latest closed window with results, bucket `all`; None without one. A quiet task
    # (no results in its newest window) keeps these figures.
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
    # The end of its last window with results once the window after it should have closed
    # (quiet: no results since); None while results are recent, or there are none at all.
    quiet_since: datetime | None = None
    # Agreement and edge share from the first window with results in the SERIES_SPAN to
    # the shown window's end, oldest first.
    series: tuple[Point, ...] = ()
    # Why its latest window's figures and rules could not be judged (the error, logged):
    # the task is shown in trouble, the others as ever.
    rules_error: str | None = None

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


@dataclass(frozen=True, slots=True)
class Latest:
    """A task's latest closed window with results, its stored metric rows by bucket, and
    the end of its newest window with results (open or closed)."""

    window: Window
    stored: dict[str, dict[str, Any]]
    traffic_end: datetime


def _counts_results(m: Any) -> Any:
    """`m` is a window's `all` row that counts results: written with literals, not bound
    parameters, so PostgreSQL may read ix_window_metrics_with_results, an index of those
    rows alone (a plan made for any parameter could not)."""
    return and_(m.bucket == literal_column(f"'{ALL}'"), m.n_results > literal_column("0"))


def _with_results(column: Any, *, closed: bool) -> Any:
    """`column(window)` of the task's newest window whose `all` row counts results (closed
    ones only when `closed`), in a query over tasks: the newest entry of the task in the
    index of such rows (the newest one or two may be open)."""
    w = aliased(Window)
    m = aliased(WindowMetrics)
    query = (
        select(column(w))
        .select_from(m)
        .join(w, w.id == m.window_id)
        .where(m.task_id == Task.id, _counts_results(m))
    )
    if closed:
        query = query.where(w.closed_at.is_not(None))
    return query.order_by(m.window_start.desc()).limit(1).correlate(Task).scalar_subquery()


def latest_windows(session: Session) -> dict[int, Latest]:
    """Each task's latest closed window with results and its stored rows, with the end of
    its newest window with results, in one query. Tasks without a closed window with
    results are left out."""
    latest = select(
        Task.id.label("task_id"),
        _with_results(lambda w: w.window_start, closed=True).label("shown"),
        _with_results(lambda w: w.window_end, closed=False).label("traffic_end"),
    ).subquery()
    query = (
        select(latest.c.traffic_end, Window, WindowMetrics)
        .join(
            Window,
            (Window.task_id == latest.c.task_id) & (Window.window_start == latest.c.shown),
        )
        .join(WindowMetrics, WindowMetrics.window_id == Window.id)
    )
    out: dict[int, Latest] = {}
    columns = [c.key for c in WindowMetrics.__table__.columns]
    for traffic_end, window, metrics in session.execute(query):
        found = out.setdefault(window.task_id, Latest(window, {}, _timestamp(traffic_end)))
        found.stored[metrics.bucket] = {name: getattr(metrics, name) for name in columns}
    return out


def _timestamp(value: datetime | str) -> datetime:
    """A timestamp a subquery gave (SQLite's as text, naive), in UTC."""
    found = datetime.fromisoformat(value) if isinstance(value, str) else value
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)


def quiet_since(
    traffic_end: datetime, window_seconds: int, lateness_seconds: int, now: datetime
) -> datetime | None:
    """`traffic_end` when the window after the task's last window with results should have
    closed by `now` (it has none: a window with results would be the last one); None while
    it may still fill."""
    closes = traffic_end + timedelta(seconds=window_seconds + lateness_seconds)
    return traffic_end if now >= closes else None


def series_step(window_seconds: int, span_seconds: float) -> int:
    """The seconds of one sparkline point over `span_seconds` of windows: whole windows, as
    few as keep the span within SERIES_POINTS points (one window while it fits)."""
    windows = math.ceil(span_seconds / window_seconds / SERIES_POINTS)
    return window_seconds * max(1, windows)


def _series_step_sql(window_seconds: int, span_seconds: Any) -> Any:
    """series_step in SQL, for a span of whole windows (at least one): ceil by integer
    division."""
    per_point = window_seconds * SERIES_POINTS
    return window_seconds * ((span_seconds + (per_point - 1)) // per_point)


def series(session: Session, shown: Mapping[int, Window]) -> dict[int, list[Point]]:
    """For each task, its `all` rows with results in the SERIES_SPAN before the end of its
    shown window (its latest closed window with results: for a quiet task, the day before
    it went quiet), summed per step into agreement and edge share (None without pairs).
    The steps start at the first of those windows and are series_step(window length, span
    from it to the shown window's end) long: a task with ten minutes of traffic draws them
    window by window, one with a day of it in at most SERIES_POINTS points. A step without
    results is a gap, marked by one point without values. One query for every task, each
    task's range read from the index of rows with results."""
    if not shown:
        return {}
    m = WindowMetrics
    counts = [getattr(m, name) for rate in SERIES_RATES for name in RATES[rate]]
    # A part per task (each its own range scan of the index, which on PostgreSQL holds the
    # counts: read without the table), in one statement.
    parts = []
    for task_id, w in shown.items():
        in_range = (
            m.task_id == task_id,
            m.window_start >= w.window_end - SERIES_SPAN,
            m.window_start < w.window_end,
            _counts_results(m),
        )
        first = select(func.min(m.window_start).label("start")).where(*in_range).subquery()
        origin = epoch_seconds(first.c.start)
        end = literal(int(w.window_end.timestamp()), BigInteger)
        seconds = int((w.window_end - w.window_start).total_seconds())
        step = _series_step_sql(seconds, end - origin)
        slot = (epoch_seconds(m.window_start) - origin) // step
        parts.append(
            select(
                m.task_id.label("task_id"),
                origin.label("origin"),
                step.label("step"),
                slot.label("slot"),
                func.min(m.window_start).label("start"),
                *(func.sum(c).label(c.key) for c in counts),
            )
            .join(first, true())
            .where(*in_range)
            .group_by(m.task_id, first.c.start, slot)
        )
    # Ordered by the output's names: a subquery around the union would have SQLAlchemy
    # build a proxy of every part's columns on each call.
    query = union_all(*parts).order_by(literal_column("task_id"), literal_column("slot"))
    out: dict[int, list[Point]] = {task_id: [] for task_id in shown}
    last: dict[int, int] = {}
    rows = session.execute(query).all()  # one fetch: fewer driver calls than row by row
    for task_id, origin, step, index, start, agree, pairs, edge, results in rows:
        points = out[task_id]
        if task_id in last and index > last[task_id] + 1:
            gap = origin + (last[task_id] + 1) * step
            points.append(Point(datetime.fromtimestamp(gap, UTC), None, None))
        last[task_id] = index
        points.append(Point(_timestamp(start), _rate(agree, pairs), _rate(edge, results)))
    return out


def _rate(num: int | None, den: int | None) -> float | None:
    return num / den if num is not None and den else None


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
    stage: str,
    killed: bool,
    open_alerts: int,
    found: Sequence[Breach],
    config_error: str | None,
    rules_error: str | None = None,
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
    if rules_error:
        out.append("its rules cannot be judged")
    return tuple(out)


def _rank(row: TaskRow) -> tuple[int, str]:
    """Rolled back, then killed, then open alerts, then breaching, then the rest; by name."""
    if row.stage == "rolled_back":
        return 0, row.task
    if row.killed:
        return 1, row.task
    if row.open_alerts:
        return 2, row.task
    if row.breaches or row.config_error or row.rules_error:
        return 3, row.task
    return 4, row.task


def overview(session: Session, now: datetime | None = None) -> Overview:
    """Every task's row, trouble on top; the kill switch; the alerts not yet resolved.
    `now` (default: the clock) tells a quiet task from one whose next window may fill."""
    now = now or utcnow()
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
    readable = {task.id for task, config, _ in tasks if config is not None}
    trends = series(session, {t: w.window for t, w in windows.items() if t in readable})
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
        quiet: datetime | None = None
        found: list[Breach] = []
        rules_error: str | None = None
        if config is not None and task.id in windows:
            window, stored = windows[task.id].window, windows[task.id].stored
            quiet = quiet_since(
                windows[task.id].traffic_end,
                config.window_seconds,
                config.allowed_lateness_seconds,
                now,
            )
            seconds = int((window.window_end - window.window_start).total_seconds())
            try:
                derived = {
                    bucket: metric_fields(
                        row, window_seconds=seconds, fixed_cost_per_day=config.fixed_cost_per_day
                    )
                    for bucket, row in stored.items()
                }
                found = breaches(config, stored)
            except Exception as exc:  # one task's figures must not take every task's page down
                log.exception("task %s: the overview could not judge its latest window", task.name)
                rules_error = f"{type(exc).__name__}: {exc}"
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
            trouble=_trouble(task.stage, killed, open_alerts, found, config_error, rules_error),
            grade=grades.get(task.name),
            quiet_since=quiet,
            series=tuple(trends.get(task.id, ())),
            rules_error=rules_error,
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

"""Routing what-if: the stored results of a period replayed under another routing setting
(a candidate cap and minimum edge confidence) beside what the task's flag does today, and
the cost–quality curve of the cap: agreement and cost against the edge's share as the cap
moves over the period's input lengths.

One SQL pass reads the period's results summed per input length (`length_rows`); pure
functions turn those rows into the table (`buckets`) and the curve (`curve`). What counts
as served by the edge, and what it costs: docs/http-api.md (`GET /v1/tasks/{task}/whatif`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Float, and_, case, false, func, literal, or_, select, text
from sqlalchemy.orm import Session

from controlplane.catalog.service import TaskRuntime
from controlplane.ingest.buckets import bucket_labels, length_bucket
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import _baseline_cost, _side_cost
from controlplane.metrics.stats import wilson
from controlplane.models import Flag, Result

# The curve's most points: past this many input lengths, the caps are spread evenly over
# the results the edge would serve (a chart of thousands of steps reads no better).
MAX_POINTS = 50

Route = Literal["candidate", "today"]
ROUTES: tuple[Route, ...] = ("candidate", "today")


@dataclass(frozen=True)
class Today:
    """What the task's flag does now: the share of eligible requests the edge serves
    (0 in shadow, rolled back, cloud, under the kill switch or without a flag), within
    its cap. In canary a request goes to the edge when its sticky bucket is below it."""

    stage: str | None
    edge_percent: int
    max_input_tokens: int | None
    killed: bool

    def setting(self) -> dict[str, Any]:
        return {
            "max_input_tokens": self.max_input_tokens,
            "min_confidence": None,
            "stage": self.stage,
            "edge_percent": self.edge_percent,
            "killed": self.killed,
        }


def today_of(document: Mapping[str, Any] | None) -> Today:
    """Today's routing from the task's flag document (None: no flag, all to the cloud)."""
    if document is None:
        return Today(None, 0, None, False)
    stage = document.get("stage")
    killed = document.get("killed") is not False
    serving = stage in ("canary", "full") and not killed
    percent = int(document.get("edge_percent") or 0) if serving else 0
    return Today(stage, percent, document.get("max_input_tokens"), killed)


@dataclass(frozen=True)
class Served:
    """What one routing gives the edge among some results: how many it serves, their
    pairs and agreements, edge runs and offload failures, and `saved`, the cloud-only cost
    of those results minus what they cost served so."""

    n: int = 0
    pairs: int = 0
    agree: int = 0
    edge_runs: int = 0
    offload_fails: int = 0
    saved: float = 0.0

    def __add__(self, other: Served) -> Served:
        return Served(
            n=self.n + other.n,
            pairs=self.pairs + other.pairs,
            agree=self.agree + other.agree,
            edge_runs=self.edge_runs + other.edge_runs,
            offload_fails=self.offload_fails + other.offload_fails,
            saved=self.saved + other.saved,
        )


@dataclass(frozen=True)
class LengthRow:
    """The period's results of one input length: how many, their cloud-only cost, and
    what the candidate (its confidence minimum, no cap) and today's flag (no cap) serve."""

    input_tokens: int
    n_results: int
    baseline_cost: float
    candidate: Served
    today: Served


# --- the one pass -----------------------------------------------------------------------


def _served_columns(
    route: Route, served: ColumnElement[bool], edge_cost: Any, baseline: Any
) -> list[Any]:
    edge_failed = and_(
        Result.edge_ran,
        or_(
            Result.edge_error.is_not(None),
            Result.edge_valid.is_(False),
            Result.outcome == "invalid",
        ),
    )
    by_edge = and_(served, Result.edge_ran)
    # An edge run that fails escalates to the cloud: it costs both sides.
    saved = case(
        (and_(by_edge, edge_failed), -edge_cost),
        (by_edge, baseline - edge_cost),
        else_=literal(0.0, Float),
    )
    return [
        func.count().filter(served).label(f"{route}_n"),
        func.count()
        .filter(and_(served, Result.outcome.in_(("agree", "conflict"))))
        .label(f"{route}_pairs"),
        func.count().filter(and_(served, Result.outcome == "agree")).label(f"{route}_agree"),
        func.count().filter(by_edge).label(f"{route}_edge_runs"),
        func.count().filter(and_(served, edge_failed)).label(f"{route}_offload_fails"),
        func.coalesce(func.sum(saved), literal(0.0, Float)).label(f"{route}_saved"),
    ]


def _nothing_served(route: Route) -> list[Any]:
    """The columns of a routing that serves the edge nothing, as constants: no aggregate
    to evaluate per result (today's, most of the time a what-if is asked)."""
    counts = ("n", "pairs", "agree", "edge_runs", "offload_fails")
    return [
        *(literal(0).label(f"{route}_{name}") for name in counts),
        literal(0.0, Float).label(f"{route}_saved"),
    ]


def _candidate_served(min_confidence: float | None) -> ColumnElement[bool]:
    """Served by the edge under the candidate, before its cap: the router found it
    eligible and, with a minimum, an edge run reported a confidence reaching it."""
    eligible = Result.decision == "edge"
    if min_confidence is None:
        return eligible
    return and_(
        eligible,
        or_(
            Result.edge_ran.is_(False),
            func.coalesce(Result.edge_confidence >= min_confidence, False),
        ),
    )


def _today_served(today: Today) -> ColumnElement[bool]:
    """Served by the edge under today's flag, before its cap (the routing rule:
    controlplane/client/routing.py; a request without a sticky key stays on the cloud)."""
    if today.edge_percent == 0:
        return false()
    eligible = Result.decision == "edge"
    if today.stage == "full":
        return eligible
    return and_(
        eligible, Result.sticky_bucket.is_not(None), Result.sticky_bucket < today.edge_percent
    )


def today_flag(session: Session, task_id: int) -> Today:
    return today_of(session.scalar(select(Flag.document).where(Flag.task_id == task_id)))


def reports_confidence(session: Session, task_id: int, since: datetime, until: datetime) -> bool:
    """Whether any edge answer of the period reported a confidence (a minimum means
    nothing for a task whose edge never reports one)."""
    found = select(Result.id).where(
        Result.task_id == task_id,
        Result.ts >= since,
        Result.ts < until,
        Result.edge_confidence.is_not(None),
    )
    return session.scalar(found.limit(1)) is not None


def length_rows(
    session: Session,
    runtime: TaskRuntime,
    *,
    since: datetime,
    until: datetime,
    min_confidence: float | None,
    today: Today,
) -> list[LengthRow]:
    """The period's results summed per input length, in one pass, shortest first."""
    prices = runtime.config.prices.model_dump()
    edge_cost = _side_cost("edge", prices)
    baseline = _baseline_cost(prices)
    stmt = (
        select(
            Result.input_tokens,
            func.count().label("n_results"),
            func.coalesce(func.sum(baseline), literal(0.0, Float)).label("baseline_cost"),
            *_served_columns("candidate", _candidate_served(min_confidence), edge_cost, baseline),
            *(
                _served_columns("today", _today_served(today), edge_cost, baseline)
                if today.edge_percent
                else _nothing_served("today")
            ),
        )
        .where(Result.task_id == runtime.id, Result.ts >= since, Result.ts < until)
        .group_by(Result.input_tokens)
        .order_by(Result.input_tokens)
    )
    if session.get_bind().dialect.name == "postgresql":
        # One pass of simple sums: PostgreSQL's JIT would spend about a second compiling
        # the expressions of a large period, more than it saves. For this transaction only.
        session.execute(text("SET LOCAL jit = off"))
    return [
        LengthRow(
            input_tokens=int(row["input_tokens"]),
            n_results=int(row["n_results"]),
            baseline_cost=float(row["baseline_cost"]),
            candidate=_served_of(row, "candidate"),
            today=_served_of(row, "today"),
        )
        for row in session.execute(stmt).mappings()
    ]


def _served_of(row: Any, route: Route) -> Served:
    return Served(
        n=int(row[f"{route}_n"]),
        pairs=int(row[f"{route}_pairs"]),
        agree=int(row[f"{route}_agree"]),
        edge_runs=int(row[f"{route}_edge_runs"]),
        offload_fails=int(row[f"{route}_offload_fails"]),
        saved=float(row[f"{route}_saved"]),
    )


# --- pure: the table and the curve --------------------------------------------------------


def _rate(num: int, den: int) -> dict[str, Any]:
    interval = wilson(num, den)
    return {
        "value": num / den if den else None,
        "num": num,
        "den": den,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
    }


def figures(n_results: int, baseline_cost: float, served: Served) -> dict[str, Any]:
    """A setting's figures over `n_results` results costing `baseline_cost` cloud-only."""
    cost = baseline_cost - served.saved
    return {
        "edge_share": _rate(served.n, n_results),
        "agreement": _rate(served.agree, served.pairs),
        "offload_fail_rate": _rate(served.offload_fails, served.edge_runs),
        "cost": cost,
        "savings": baseline_cost - cost,
    }


def _within(cap: int | None, row: LengthRow) -> bool:
    return cap is None or row.input_tokens <= cap


def buckets(
    rows: Sequence[LengthRow],
    boundaries: Sequence[int],
    *,
    candidate_cap: int | None,
    today_cap: int | None,
) -> list[dict[str, Any]]:
    """Per length bucket and `all`: the results, their cloud-only cost, and the figures
    of the candidate (within `candidate_cap`) and of today's flag (within `today_cap`)."""
    labels = [*bucket_labels(boundaries), ALL]
    sums: dict[str, list[Any]] = {label: [0, 0.0, Served(), Served()] for label in labels}
    for row in rows:
        candidate = row.candidate if _within(candidate_cap, row) else Served()
        today = row.today if _within(today_cap, row) else Served()
        for label in (length_bucket(row.input_tokens, boundaries), ALL):
            found = sums[label]
            found[0] += row.n_results
            found[1] += row.baseline_cost
            found[2] += candidate
            found[3] += today
    return [
        {
            "bucket": label,
            "n_results": n,
            "baseline_cost": baseline,
            "candidate": figures(n, baseline, candidate),
            "current": figures(n, baseline, today),
        }
        for label, (n, baseline, candidate, today) in sums.items()
    ]


def caps(rows: Sequence[LengthRow], max_points: int = MAX_POINTS) -> list[int]:
    """The curve's caps: every input length the candidate would serve some result of, or,
    past `max_points` of them, for k = 1..max_points the shortest length within which it
    serves at least k/max_points of what it serves without a cap (so the last is the
    longest: no cap)."""
    served = [(row.input_tokens, row.candidate.n) for row in rows if row.candidate.n > 0]
    lengths = sorted(served)
    if len(lengths) <= max_points:
        return [length for length, _ in lengths]
    total = sum(n for _, n in lengths)
    chosen: list[int] = []
    so_far, k = 0, 1
    for length, n in lengths:
        so_far += n
        if so_far * max_points >= k * total:
            chosen.append(length)
            while k <= max_points and so_far * max_points >= k * total:
                k += 1
    return chosen


def curve(rows: Sequence[LengthRow], max_points: int = MAX_POINTS) -> list[dict[str, Any]]:
    """The cost–quality curve of the cap: for each of `caps(rows)`, the candidate's figures
    over every result of the period when the edge serves only inputs within that cap."""
    n_results = sum(row.n_results for row in rows)
    baseline = sum(row.baseline_cost for row in rows)
    ordered = sorted(rows, key=lambda row: row.input_tokens)
    points: list[dict[str, Any]] = []
    served, i = Served(), 0
    for cap in caps(ordered, max_points):
        while i < len(ordered) and ordered[i].input_tokens <= cap:
            served += ordered[i].candidate
            i += 1
        points.append({"max_input_tokens": cap, **figures(n_results, baseline, served)})
    return points


def whatif(
    session: Session,
    runtime: TaskRuntime,
    *,
    since: datetime,
    until: datetime,
    max_input_tokens: int | None,
    min_confidence: float | None,
) -> dict[str, Any]:
    """The candidate's figures and today's flag's, per bucket and `all`, and the curve of
    the candidate's confidence minimum as the cap moves."""
    today = today_flag(session, runtime.id)
    rows = length_rows(
        session, runtime, since=since, until=until, min_confidence=min_confidence, today=today
    )
    return {
        "task": runtime.name,
        "since": since,
        "until": until,
        "candidate": {"max_input_tokens": max_input_tokens, "min_confidence": min_confidence},
        "current": today.setting(),
        "buckets": buckets(
            rows,
            runtime.config.length_buckets,
            candidate_cap=max_input_tokens,
            today_cap=today.max_input_tokens,
        ),
        "curve": curve(rows),
    }

"""Routing what-if: the stored results of a period replayed under another routing setting
(a candidate cap and minimum edge confidence) beside the current one, in one SQL pass
grouped by length bucket. What counts as served by the edge, and what it costs:
docs/http-api.md (`GET /v1/tasks/{task}/whatif`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Float, and_, case, func, literal, or_, select, text, true
from sqlalchemy.orm import Session

from controlplane.catalog.service import TaskRuntime
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import _baseline_cost, _side_cost, bucket_of
from controlplane.metrics.stats import wilson
from controlplane.models import Result

SETTINGS = ("candidate", "current")
COUNTS = ("n_served", "n_pairs", "n_agree", "n_edge_runs", "n_offload_fails")


def _served(max_input_tokens: int | None, min_confidence: float | None) -> ColumnElement[bool]:
    conditions: list[ColumnElement[bool]] = [Result.decision == "edge"]
    if max_input_tokens is not None:
        conditions.append(Result.input_tokens <= max_input_tokens)
    if min_confidence is not None:
        conditions.append(
            or_(
                Result.edge_ran.is_(False),
                func.coalesce(Result.edge_confidence >= min_confidence, False),
            )
        )
    return and_(true(), *conditions)


def _count_if(condition: Any) -> ColumnElement[Any]:
    """The rows where `condition` holds (an aggregate FILTER: cheaper than a sum of cases)."""
    return func.count().filter(condition)


def _columns(
    prefix: str, served: ColumnElement[bool], edge_cost: Any, baseline: Any
) -> list[ColumnElement[Any]]:
    edge_failed = and_(
        Result.edge_ran,
        or_(
            Result.edge_error.is_not(None),
            Result.edge_valid.is_(False),
            Result.outcome == "invalid",
        ),
    )
    by_edge = and_(served, Result.edge_ran)
    cost = case(
        (and_(by_edge, edge_failed), edge_cost + baseline),
        (by_edge, edge_cost),
        else_=baseline,
    )
    return [
        _count_if(served).label(f"{prefix}_n_served"),
        _count_if(and_(served, Result.outcome.in_(("agree", "conflict")))).label(
            f"{prefix}_n_pairs"
        ),
        _count_if(and_(served, Result.outcome == "agree")).label(f"{prefix}_n_agree"),
        _count_if(by_edge).label(f"{prefix}_n_edge_runs"),
        _count_if(and_(served, edge_failed)).label(f"{prefix}_n_offload_fails"),
        func.coalesce(func.sum(cost), literal(0.0, Float)).label(f"{prefix}_cost"),
    ]


def whatif(
    session: Session,
    runtime: TaskRuntime,
    *,
    since: datetime,
    until: datetime,
    max_input_tokens: int | None,
    min_confidence: float | None,
) -> dict[str, Any]:
    """The figures of the candidate and the current setting, per bucket and `all`."""
    config = runtime.config
    prices = config.prices.model_dump()
    boundaries: Sequence[int] = config.length_buckets
    edge_cost = _side_cost("edge", prices)
    baseline = _baseline_cost(prices)
    bucket = bucket_of(Result.input_tokens, boundaries).label("bucket")
    stmt = (
        select(
            bucket,
            func.count().label("n_results"),
            func.coalesce(func.sum(baseline), literal(0.0, Float)).label("baseline_cost"),
            *_columns("candidate", _served(max_input_tokens, min_confidence), edge_cost, baseline),
            *_columns("current", _served(config.max_input_tokens, None), edge_cost, baseline),
        )
        .where(Result.task_id == runtime.id, Result.ts >= since, Result.ts < until)
        .group_by(bucket)
    )
    sums: dict[str, dict[str, Any]] = {
        label: _empty() for label in (*bucket_labels(boundaries), ALL)
    }
    if session.get_bind().dialect.name == "postgresql":
        # One pass of simple sums: PostgreSQL's JIT would spend about a second compiling
        # the expressions of a large period, more than it saves. For this transaction only.
        session.execute(text("SET LOCAL jit = off"))
    for row in session.execute(stmt).mappings():
        for name, value in row.items():
            if name == "bucket":
                continue
            sums[row["bucket"]][name] = value
            sums[ALL][name] += value
    return {
        "task": runtime.name,
        "since": since,
        "until": until,
        "candidate": {"max_input_tokens": max_input_tokens, "min_confidence": min_confidence},
        "current": {"max_input_tokens": config.max_input_tokens, "min_confidence": None},
        "buckets": [_figures(label, found) for label, found in sums.items()],
    }


def _empty() -> dict[str, Any]:
    row: dict[str, Any] = {"n_results": 0, "baseline_cost": 0.0}
    for prefix in SETTINGS:
        row.update({f"{prefix}_{name}": 0 for name in COUNTS})
        row[f"{prefix}_cost"] = 0.0
    return row


def _rate(num: int, den: int) -> dict[str, Any]:
    interval = wilson(num, den)
    return {
        "value": num / den if den else None,
        "num": num,
        "den": den,
        "low": interval[0] if interval else None,
        "high": interval[1] if interval else None,
    }


def _figures(label: str, row: dict[str, Any]) -> dict[str, Any]:
    n = int(row["n_results"])
    baseline = float(row["baseline_cost"])
    out: dict[str, Any] = {"bucket": label, "n_results": n, "baseline_cost": baseline}
    for prefix in SETTINGS:
        c = {name: int(row[f"{prefix}_{name}"]) for name in COUNTS}
        cost = float(row[f"{prefix}_cost"])
        out[prefix] = {
            "edge_share": _rate(c["n_served"], n),
            "agreement": _rate(c["n_agree"], c["n_pairs"]),
            "offload_fail_rate": _rate(c["n_offload_fails"], c["n_edge_runs"]),
            "cost": cost,
            "savings": baseline - cost,
        }
    return out

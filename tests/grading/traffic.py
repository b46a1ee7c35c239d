"""Grading inputs a test reads like a description: a span of days, calls a day, token
percentiles, repeat pairs and how often the cloud agreed with itself."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from controlplane.catalog.schemas import TaskConfig
from controlplane.grading.grade import Traffic

UNTIL = datetime(2026, 5, 8, tzinfo=UTC)
VETO = 0.7  # settings.error_cost_veto's default


def make_traffic(
    *,
    days: int = 7,
    per_day: float = 90_000,
    p50: float | None = 300,
    p95: float | None = 450,
    mean_tokens: float = 340,
    repeat_pairs: int | None = None,
    self_agreement: float = 0.995,
    invalid: int = 0,
    diffs: Mapping[str, int] | None = None,
) -> Traffic:
    """A span of `days` whole days with traffic on each; repeat pairs default to 1% of the
    results (the default repeat_rate)."""
    results = round(per_day * days)
    pairs = round(results * 0.01) if repeat_pairs is None else repeat_pairs
    return Traffic(
        since=UNTIL - timedelta(days=days),
        until=UNTIL,
        results=results,
        days=days if results else 0,
        input_p50=p50,
        input_p95=p95,
        input_tokens_sum=mean_tokens * results,
        repeat_pairs=pairs,
        repeat_agree=round(pairs * self_agreement),
        repeat_invalid=invalid,
        repeat_diffs=dict(diffs or {}),
    )


def make_config(task: str = "t", comparator: Any = None, **fields: Any) -> TaskConfig:
    return TaskConfig.model_validate(
        {"task": task, "comparator": comparator or {"kind": "label"}, **fields}
    )

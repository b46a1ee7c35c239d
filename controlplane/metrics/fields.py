"""The metric fields of docs/evidence.md, derived from a stored metric row, under their names.

Stored rows hold counts, sums and percentiles; rates (with `_num`, `_den`, `_low`,
`_high`, Wilson at z = 1.96), totals, per-1k costs and savings are derived here, so every
reader (windows API, CSV, `/metrics`, alerts, the rollback rule) sees the same numbers.
A rate with a zero denominator is null, and so is its interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.metrics.stats import wilson

ALL = "all"

# rate name → (stored numerator, stored denominator)
RATES: dict[str, tuple[str, str]] = {
    "agreement": ("n_agree", "n_pairs"),
    "conflict_rate": ("n_conflict", "n_pairs"),
    "edge_error_rate": ("n_edge_errors", "n_edge_runs"),
    "edge_fail_rate": ("n_edge_fails", "n_edge_runs"),
    "offload_fail_rate": ("n_offload_fails", "n_edge_attempts"),
    "degrade_rate": ("n_degraded", "n_edge_attempts"),
    "edge_share": ("n_served_edge", "n_results"),
    # The cloud's own noise floor: (cloud, cloud_repeat) pairs that agree / such pairs.
    # Never counted as edge pairs; edge agreement is read against it.
    "self_agreement": ("n_repeat_agree", "n_repeat_pairs"),
}
COUNTS = ("n_results", "n_pairs", "n_edge_runs", "n_edge_attempts", "n_late", "n_repeat_pairs")
# Stored counts that only feed rates.
RATE_COUNTS = (
    "n_agree",
    "n_conflict",
    "n_invalid",
    "n_edge_errors",
    "n_edge_fails",
    "n_offload_fails",
    "n_degraded",
    "n_served_edge",
    "n_repeat_agree",
    "n_repeat_invalid",
)
PERCENTILES: dict[str, tuple[float, ...]] = {
    "edge_latency_ms": (0.5, 0.95, 0.99),
    "edge_ttfb_ms": (0.5, 0.95, 0.99),
    "cloud_latency_ms": (0.5, 0.95, 0.99),
    "cloud_ttfb_ms": (0.5, 0.95, 0.99),
    "input_tokens": (0.5, 0.95),
}
PERCENTILE_FIELDS = tuple(
    f"{column}_p{round(q * 100)}" for column, qs in PERCENTILES.items() for q in qs
)
# Float sums: costs (the cloud's includes its repeats: they are paid for) and input tokens.
COST_SUMS = ("edge_cost", "cloud_cost", "baseline_cost")
SUMS = (*COST_SUMS, "input_tokens_sum")
# {field or check: repeat pairs that differed on it}; null when no repeat pair had a list.
REPEAT_DIFFS = "repeat_diffs"
# `all` only: input lengths per fixed log-scale bin (metrics.lengths) and how many are over
# the cap; what the input-shift rule and alert compare.
INPUT_HIST = "input_hist"
LENGTH_FIELDS = (INPUT_HIST, "n_over_cap")
STORED = (*COUNTS, *RATE_COUNTS, *PERCENTILE_FIELDS, *SUMS, REPEAT_DIFFS, *LENGTH_FIELDS)

COST_FIELDS = (
    "edge_cost",
    "cloud_cost",
    "total_cost",
    "baseline_cost",
    "cost_per_1k",
    "baseline_cost_per_1k",
    "savings",
    "net_savings",
)
RATE_FIELDS = tuple(
    f"{name}{suffix}" for name in RATES for suffix in ("", "_num", "_den", "_low", "_high")
)
WINDOW_KEYS = ("window_start", "window_end", "bucket", "closed", "closed_at", "config_version")
# Every field of a windows row, in the order the API and the CSV give them.
FIELDS = (
    *WINDOW_KEYS,
    *COUNTS,
    *RATE_FIELDS,
    *PERCENTILE_FIELDS,
    *COST_FIELDS,
    "input_tokens_sum",
    REPEAT_DIFFS,
)


def rate_fields(name: str, num: int, den: int) -> dict[str, Any]:
    interval = wilson(num, den)
    return {
        name: num / den if den else None,
        f"{name}_num": num,
        f"{name}_den": den,
        f"{name}_low": interval[0] if interval else None,
        f"{name}_high": interval[1] if interval else None,
    }


def metric_fields(
    stored: Mapping[str, Any], *, window_seconds: int, fixed_cost_per_day: float
) -> dict[str, Any]:
    """Every metric field of one window and bucket, from its stored row."""
    out: dict[str, Any] = {name: stored[name] for name in COUNTS}
    for name, (num, den) in RATES.items():
        out.update(rate_fields(name, stored[num], stored[den]))
    out.update({name: stored[name] for name in PERCENTILE_FIELDS})
    n = stored["n_results"]
    total = stored["edge_cost"] + stored["cloud_cost"]
    baseline = stored["baseline_cost"]
    savings = baseline - total
    fixed = fixed_cost_per_day * window_seconds / 86400
    out.update(
        {
            "edge_cost": stored["edge_cost"],
            "cloud_cost": stored["cloud_cost"],
            "total_cost": total,
            "baseline_cost": baseline,
            "cost_per_1k": total / n * 1000 if n else None,
            "baseline_cost_per_1k": baseline / n * 1000 if n else None,
            "savings": savings,
            # The fixed cost of running the edge belongs to the task, not to one bucket.
            "net_savings": savings - fixed if stored["bucket"] == ALL else None,
            "input_tokens_sum": stored["input_tokens_sum"],
            REPEAT_DIFFS: stored[REPEAT_DIFFS],
        }
    )
    return out

"""`grade`: a task's tier from its own traffic (docs/grading.md). Pure: no I/O, no clock.

Four dimensions, each scored as suitability for the edge (1 = fully suitable): input
length, the cloud's own determinism, the declared error cost and call frequency. Error
cost is the only veto and is judged before any weighting; a declared `forbid` comes
before even that; too little traffic is `insufficient`; otherwise the weighted score
falls in a band: offload, shadow or keep_cloud.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controlplane.catalog.schemas import (
    DeterminismScale,
    FrequencyScale,
    GradingConfig,
    InputLengthScale,
    TaskConfig,
)
from controlplane.metrics.noise import noisy_fields
from controlplane.metrics.stats import wilson
from controlplane.timeutil import as_utc

DIMENSIONS = ("input_length", "determinism", "error_cost", "frequency")
LABELS = {
    "input_length": "input length",
    "determinism": "determinism",
    "error_cost": "error cost",
    "frequency": "frequency",
}
# At or above this declared error cost the dimension is a danger signal even below the veto.
ERROR_COST_SIGNAL = 0.5
FORBID_REASONS = {
    "planning": "declared long-chain planning (forbid: planning): errors add up step by "
    "step and where the chain breaks cannot be foreseen, so it never leaves the cloud",
    "fresh_knowledge": "declared fresh knowledge without retrieval (forbid: fresh_knowledge): "
    "a model without the facts in its weights makes them up, every answer looking real, so "
    "it never leaves the cloud",
}


@dataclass(frozen=True)
class Traffic:
    """Window aggregates over the grading span, bucket `all`."""

    since: datetime
    until: datetime
    results: int
    days: int  # distinct UTC days in the span with at least one result
    input_p50: float | None  # span P50 / P95 of input_tokens
    input_p95: float | None
    input_tokens_sum: float
    repeat_pairs: int
    repeat_agree: int
    repeat_invalid: int
    repeat_diffs: Mapping[str, int]  # {field or check: repeat pairs that differed on it}
    # Input lengths per fixed log-scale bin (metrics.lengths) and how many were over the cap:
    # kept with the grade as the baseline an offloaded task's inputs are compared with.
    input_hist: Sequence[int] = ()
    over_cap: int | None = None


# --- normalisations: each monotone, each within [0, 1] -----------------------------------


def falling(value: float, full: float, zero: float) -> float:
    """1 at or below `full`, 0 at or above `zero`, linear between (full < zero)."""
    if value <= full:
        return 1.0
    if value >= zero:
        return 0.0
    return (zero - value) / (zero - full)


def rising(value: float, zero: float, full: float) -> float:
    """0 at or below `zero`, 1 at or above `full`, linear between (zero < full)."""
    return 1.0 - falling(value, zero, full)


def tail_ratio(p50: float, p95: float) -> float:
    """P95 / P50, with P50 counted as at least one token (a median of empty inputs)."""
    return p95 / max(p50, 1.0)


def input_length_score(p50: float, p95: float, scale: InputLengthScale) -> float:
    """The lower of a ramp on the tail ratio P95/P50 and a ramp on P95 tokens."""
    return min(
        falling(tail_ratio(p50, p95), *scale.tail_ratio),
        falling(p95, *scale.p95_tokens),
    )


def determinism_score(agree: int, pairs: int, scale: DeterminismScale) -> float | None:
    """Linear in the Wilson lower bound (95%) of self-agreement: 0 at floor, 1 at full."""
    bounds = wilson(agree, pairs)
    if bounds is None:
        return None
    return rising(bounds[0], scale.floor, scale.full)


def per_day_score(per_day: float, scale: FrequencyScale) -> float:
    """Log-scale ramp on calls per day: 0 at the first value, 1 at the second."""
    low, high = scale.per_day
    if per_day <= low:
        return 0.0
    return rising(math.log(per_day), math.log(low), math.log(high))


def frequency_score(per_day: float, mean_tokens: float, scale: FrequencyScale) -> float:
    """The lower of the calls-per-day ramp and a falling ramp on mean input tokens."""
    return min(per_day_score(per_day, scale), falling(mean_tokens, *scale.mean_input_tokens))


def weighted_score(scores: Mapping[str, float | None], config: GradingConfig) -> float:
    """Σ w·s / Σ w over the four dimensions, rounded to 3 places; a dimension weighing 0
    is left out (it may have no score)."""
    weights = config.weights.model_dump()
    total = sum(weights[d] * (scores[d] or 0.0) for d in DIMENSIONS if weights[d] > 0)
    return round(total / sum(weights.values()), 3)


def tier_for(score: float, config: GradingConfig) -> str:
    if score >= config.tiers.offload:
        return "offload"
    if score >= config.tiers.shadow:
        return "shadow"
    return "keep_cloud"


# --- the grade ----------------------------------------------------------------------------


def grade(
    task: str, traffic: Traffic, config: TaskConfig, *, veto: float, computed_at: datetime
) -> dict[str, Any]:
    """The grade document of docs/grading.md for `task` from its span's `traffic`."""
    grading = config.grading
    dims = {
        "input_length": _input_length(traffic, grading.input_length),
        "determinism": _determinism(traffic, grading.determinism),
        "error_cost": _error_cost(config, veto),
        "frequency": _frequency(traffic, grading.frequency),
    }
    noisy = noisy_fields(traffic.repeat_diffs, traffic.repeat_pairs, grading.noisy_field_rate)
    if noisy:
        names = ", ".join(f"{n['name']} on {n['rate']:.1%}" for n in noisy)
        dims["determinism"]["reason"] += (
            f"; the cloud itself changes {names} of its repeats "
            f"(noisy: over {grading.noisy_field_rate:.0%})"
        )
    # What a tier would need: only asked when neither forbid nor the veto has decided.
    decided = config.forbid is not None or dims["error_cost"]["veto"]
    missing = [] if decided else _missing(traffic, grading, dims)

    reasons = []
    if config.forbid is not None:
        reasons.append(f"forbid: {FORBID_REASONS[config.forbid]}")
    # The veto's sentence first, then every other dimension with a danger signal.
    order = ["error_cost"] + [d for d in DIMENSIONS if d != "error_cost"]
    reasons += [f"{LABELS[d]}: {dims[d]['reason']}" for d in order if dims[d]["signal"]]

    score: float | None = None
    if config.forbid is not None:
        tier = "forbid"
        to_change = [
            f"forbid: {config.forbid} is declared in the task config; only removing it "
            "changes the tier"
        ]
    elif dims["error_cost"]["veto"]:
        tier = "keep_cloud"
        to_change = [
            f"keep_cloud is the error cost's veto: only a declared error cost below "
            f"{veto:g} (now {config.error_cost:g}) lets the other dimensions grade the task"
        ]
    elif missing:
        tier = "insufficient"
        to_change = ["a tier needs " + "; ".join(missing)]
    else:
        scores = {d: dims[d]["score"] for d in DIMENSIONS}
        score = weighted_score(scores, grading)
        tier = tier_for(score, grading)
        to_change = _to_change(score, tier, scores, traffic, config, veto)

    return {
        "task": task,
        "tier": tier,
        "score": score,
        "computed_at": as_utc(computed_at).isoformat(),
        "span": {
            "since": as_utc(traffic.since).isoformat(),
            "until": as_utc(traffic.until).isoformat(),
            "results": traffic.results,
            "repeat_pairs": traffic.repeat_pairs,
            "days": traffic.days,
        },
        "dimensions": dims,
        "reasons": reasons,
        "missing": missing,
        "noisy": noisy,
        "to_change": to_change,
        "input_lengths": {
            "counts": list(traffic.input_hist),
            "n": sum(traffic.input_hist),
            "over_cap": traffic.over_cap,
            "cap": config.max_input_tokens,
        },
    }


def _round(value: float | None, places: int = 3) -> float | None:
    return None if value is None else round(value, places)


def _input_length(traffic: Traffic, scale: InputLengthScale) -> dict[str, Any]:
    p50, p95 = traffic.input_p50, traffic.input_p95
    if p50 is None or p95 is None:
        return {
            "value": {"p50": p50, "p95": p95, "ratio": None},
            "score": None,
            "signal": False,
            "reason": "no input token counts in the span",
        }
    ratio = tail_ratio(p50, p95)
    score = _round(input_length_score(p50, p95, scale))
    signal = ratio >= scale.signal_ratio
    reason = f"P95 is {ratio:.1f}x P50 ({p95:,.0f} against {p50:,.0f} tokens)"
    if signal:
        reason += ": a long tail the edge reads badly"
    elif falling(p95, *scale.p95_tokens) < 1:
        reason += f"; inputs past {scale.p95_tokens[0]:,.0f} tokens weigh against the edge"
    else:
        reason += ": short and concentrated"
    return {
        "value": {"p50": p50, "p95": p95, "ratio": round(ratio, 2)},
        "score": score,
        "signal": signal,
        "reason": reason,
    }


def _determinism(traffic: Traffic, scale: DeterminismScale) -> dict[str, Any]:
    pairs = traffic.repeat_pairs
    bounds = wilson(traffic.repeat_agree, pairs)
    if bounds is None:
        return {
            "value": {"self_agreement": None, "low": None, "high": None, "in_schema": None},
            "score": None,
            "signal": False,
            "reason": "no repeat pairs in the span: the cloud's self-agreement is unknown",
        }
    agreement = traffic.repeat_agree / pairs
    in_schema = (pairs - traffic.repeat_invalid) / pairs
    signal = agreement < scale.signal_below
    reason = (
        f"the cloud agrees with itself on {agreement:.1%} of {pairs:,} repeat pairs "
        f"(95% interval {bounds[0]:.1%}–{bounds[1]:.1%})"
    )
    if signal:
        reason += ": the same input answered differently by the reference itself"
    if traffic.repeat_invalid:
        reason += f"; {1 - in_schema:.1%} of repeat pairs hold an answer outside the schema"
    return {
        "value": {
            "self_agreement": round(agreement, 4),
            "low": round(bounds[0], 4),
            "high": round(bounds[1], 4),
            "in_schema": round(in_schema, 4),
        },
        "score": _round(determinism_score(traffic.repeat_agree, pairs, scale)),
        "signal": signal,
        "reason": reason,
    }


def _error_cost(config: TaskConfig, veto: float) -> dict[str, Any]:
    cost = config.error_cost
    actions = list(config.irreversible_actions)
    vetoed = cost >= veto
    confirm = (
        f"the router must confirm {', '.join(actions)} before acting on any answer"
        if actions
        else "no irreversible actions are declared"
    )
    if vetoed:
        reason = (
            f"error cost {cost:g} is at or above the veto {veto:g}: the task stays on the "
            f"cloud whatever the other dimensions say; {confirm}"
        )
    elif cost >= ERROR_COST_SIGNAL:
        reason = f"error cost {cost:g} is high (money, permissions, commitments); {confirm}"
    else:
        reason = f"error cost {cost:g}: a wrong answer costs a retry, no lasting side effect"
    return {
        "value": cost,
        "irreversible_actions": actions,
        "veto": vetoed,
        "score": _round(1.0 - cost),
        "signal": vetoed or cost >= ERROR_COST_SIGNAL,
        "reason": reason,
    }


def _span_days(traffic: Traffic) -> float:
    return (traffic.until - traffic.since).total_seconds() / 86_400


def _frequency(traffic: Traffic, scale: FrequencyScale) -> dict[str, Any]:
    days = _span_days(traffic)
    if days <= 0 or traffic.results <= 0:
        return {
            "value": {"per_day": None, "mean_input_tokens": None},
            "score": None,
            "signal": False,
            "reason": "no calls in the span" if days > 0 else "the span is empty",
        }
    per_day = traffic.results / days
    mean_tokens = traffic.input_tokens_sum / traffic.results
    signal = per_day >= scale.signal_per_day and mean_tokens >= scale.signal_mean_input_tokens
    reason = f"{per_day:,.0f} calls a day, {mean_tokens:,.0f} input tokens a call on average"
    if signal:
        reason += ": a long context on every call of a frequent task"
    elif per_day_score(per_day, scale) < 1:
        reason += f"; under {scale.per_day[1]:,.0f} calls a day there is less to save"
    return {
        "value": {"per_day": round(per_day, 1), "mean_input_tokens": round(mean_tokens, 1)},
        "score": _round(frequency_score(per_day, mean_tokens, scale)),
        "signal": signal,
        "reason": reason,
    }


def _missing(traffic: Traffic, grading: GradingConfig, dims: Mapping[str, Any]) -> list[str]:
    missing = []
    if traffic.results < grading.min_results:
        missing.append(f"results: {traffic.results:,} of the {grading.min_results:,} needed")
    if traffic.repeat_pairs < grading.min_repeat_pairs:
        missing.append(
            f"repeat pairs: {traffic.repeat_pairs:,} of the {grading.min_repeat_pairs:,} needed"
        )
    if traffic.days < grading.min_days:
        missing.append(f"days with traffic: {traffic.days} of the {grading.min_days} needed")
    weights = grading.weights.model_dump()
    for name in DIMENSIONS:
        if weights[name] > 0 and dims[name]["score"] is None:
            missing.append(f"{LABELS[name]}: {dims[name]['reason']}")
    return missing


# --- what would change the tier -----------------------------------------------------------


def _to_change(
    score: float,
    tier: str,
    measured: Mapping[str, float | None],
    traffic: Traffic,
    config: TaskConfig,
    veto: float,
) -> list[str]:
    """Per band edge next to the score: the one dimension score (others held) that would
    cross it, with the measured value that gives it."""
    grading = config.grading
    weights = grading.weights.model_dump()
    total_weight = sum(weights.values())
    # Only a dimension weighing 0 may lack a score here, and it counts for nothing.
    scores = {d: measured[d] or 0.0 for d in DIMENSIONS}

    def needed(dimension: str, target: float) -> float:
        rest = sum(weights[d] * scores[d] for d in DIMENSIONS if d != dimension)
        return (target * total_weight - rest) / weights[dimension]

    sentences = []
    targets = [("offload", grading.tiers.offload)]
    if tier == "keep_cloud":
        targets.insert(0, ("shadow", grading.tiers.shadow))
    if tier == "offload":
        falls = []
        for d in DIMENSIONS:
            if weights[d] <= 0:
                continue
            # Rounded to 3 places, a score falls once it is below the band edge by 0.0005.
            edge = needed(d, grading.tiers.offload - 0.0005)
            if d == "error_cost" and 1 - edge >= veto:
                continue  # the veto comes first: said below
            if 0 < edge <= 1:
                falls.append(
                    f"{LABELS[d]} score {scores[d]:.2f} → below {edge:.2f} "
                    f"({_measure(d, edge, traffic, config, rising_to=False)})"
                )
        sentences.append(
            f"offload holds while the score stays at or above {grading.tiers.offload:g} "
            f"(now {score:.3f}); it falls to shadow with "
            + ("; or ".join(falls) if falls else "no single dimension alone")
        )
        if config.error_cost < veto:
            sentences.append(f"an error cost at or above {veto:g} would keep it on the cloud")
        return sentences
    for name, target in targets:
        rises = []
        for d in DIMENSIONS:
            if weights[d] <= 0:
                continue
            # Rounded to 3 places, a score reaches the edge from 0.0005 below it; aim at
            # the edge itself so the figure shown is enough on its own.
            need = max(needed(d, target), 0.0)
            if not need <= 1:  # out of reach by this dimension alone (or a weight near 0)
                continue
            need = _ceil_to(need, 2)
            if scores[d] < need <= 1:
                rises.append(
                    f"{LABELS[d]} score {scores[d]:.2f} → {need:.2f} "
                    f"({_measure(d, need, traffic, config, rising_to=True)})"
                )
        sentences.append(
            f"{name} needs a score of {target:g} (now {score:.3f}): "
            + ("; or ".join(rises) if rises else "no single dimension reaches it alone")
        )
    return sentences


def _measure(
    dimension: str, score: float, traffic: Traffic, config: TaskConfig, *, rising_to: bool
) -> str:
    """The measured value that gives `dimension` the score `score`: what it must reach
    (`rising_to`) or what it must pass to fall below."""
    grading = config.grading
    if dimension == "input_length":
        scale = grading.input_length
        ratio = scale.tail_ratio[1] - score * (scale.tail_ratio[1] - scale.tail_ratio[0])
        p95 = scale.p95_tokens[1] - score * (scale.p95_tokens[1] - scale.p95_tokens[0])
        if not rising_to:
            return f"P95/P50 above {ratio:.1f} or P95 above {p95:,.0f} tokens"
        assert traffic.input_p50 is not None and traffic.input_p95 is not None
        parts = []
        if tail_ratio(traffic.input_p50, traffic.input_p95) > ratio:
            parts.append(f"P95/P50 at or below {_floor_to(ratio, 1):.1f}")
        if traffic.input_p95 > p95:
            parts.append(f"P95 at or below {math.floor(p95):,} tokens")
        return " and ".join(parts) or f"P95/P50 at or below {_floor_to(ratio, 1):.1f}"
    if dimension == "determinism":
        det = grading.determinism
        low = det.floor + score * (det.full - det.floor)
        if not rising_to:
            return f"the lower bound of the cloud's self-agreement below {low:.1%}"
        return f"the lower bound of the cloud's self-agreement at or above {_ceil_to(low, 3):.1%}"
    if dimension == "error_cost":
        cost = 1.0 - score
        if not rising_to:
            return f"a declared error cost above {cost:.2f}"
        return f"a declared error cost at or below {_floor_to(cost, 2):.2f}"
    scale_f = grading.frequency
    lo, hi = (math.log(v) for v in scale_f.per_day)
    per_day = math.exp(lo + score * (hi - lo))
    mean = scale_f.mean_input_tokens[1] - score * (
        scale_f.mean_input_tokens[1] - scale_f.mean_input_tokens[0]
    )
    if not rising_to:
        return f"under {per_day:,.0f} calls a day or a mean above {mean:,.0f} input tokens"
    days = _span_days(traffic)
    parts = []
    if traffic.results / days < per_day:
        parts.append(f"at least {math.ceil(per_day):,} calls a day")
    if traffic.input_tokens_sum / traffic.results > mean:
        parts.append(f"a mean of at most {math.floor(mean):,} input tokens")
    return " and ".join(parts) or f"at least {math.ceil(per_day):,} calls a day"


# Figures a person reads as a threshold: rounded so that meeting the figure is enough.
def _floor_to(value: float, places: int) -> float:
    return math.floor(value * 10**places + 1e-9) / 10**places


def _ceil_to(value: float, places: int) -> float:
    return math.ceil(value * 10**places - 1e-9) / 10**places

"""grade()'s laws by hypothesis (docs/grading.md): forbid and the veto dominate, the score
is monotone in each dimension's suitability, the tier is the score's band, insufficient
exactly below a minimum, and each normalisation is monotone within [0, 1]."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from controlplane.catalog.schemas import (
    MIN_WEIGHT,
    DeterminismScale,
    FrequencyScale,
    InputLengthScale,
    TaskConfig,
)
from controlplane.grading.grade import (
    Traffic,
    determinism_score,
    falling,
    frequency_score,
    grade,
    input_length_score,
    per_day_score,
    rising,
)
from tests.grading.traffic import UNTIL, VETO, make_config, make_traffic

DIMENSIONS = ("input_length", "determinism", "error_cost", "frequency")
RANK = {"keep_cloud": 0, "shadow": 1, "offload": 2}

fractions = st.floats(0.0, 1.0, allow_nan=False)
tokens = st.floats(0.0, 50_000.0, allow_nan=False)


@st.composite
def ramp(draw: st.DrawFn, low: float, high: float) -> tuple[float, float]:
    """Two values rising within [low, high]."""
    a = low + (high - low) * draw(st.floats(0.0, 0.99))
    b = a + (high - a) * draw(st.floats(0.01, 1.0))
    assert a < b
    return (a, b)


@st.composite
def traffics(draw: st.DrawFn, *, least: int = 0) -> Traffic:
    """Any span's aggregates; with `least` 1, at least one result and one repeat pair."""
    span_hours = draw(st.integers(1, 30 * 24))
    results = draw(st.integers(least, 3_000_000))
    pairs = draw(st.integers(least, 30_000))
    agree = draw(st.integers(0, pairs))
    p50 = draw(tokens)
    diff_counts = st.integers(0, pairs)
    return Traffic(
        since=UNTIL - timedelta(hours=span_hours),
        until=UNTIL,
        results=results,
        days=draw(st.integers(min(least, results), math.ceil(span_hours / 24) + 1))
        if results
        else 0,
        input_p50=p50,
        input_p95=p50 + draw(tokens),
        input_tokens_sum=results * draw(tokens),
        repeat_pairs=pairs,
        repeat_agree=agree,
        repeat_invalid=draw(st.integers(0, pairs - agree)),
        repeat_diffs=draw(
            st.dictionaries(st.sampled_from(["amount", "note", "order"]), diff_counts)
        ),
    )


@st.composite
def grading_configs(draw: st.DrawFn, *, minimums: bool = True) -> dict[str, Any]:
    # A weight is 0 (left out) or at least MIN_WEIGHT (the config refuses what lies between).
    weights = {d: draw(st.just(0.0) | st.floats(MIN_WEIGHT, 1.0)) for d in DIMENSIONS}
    assume(sum(weights.values()) > 0.01)
    tiers = sorted([draw(fractions), draw(fractions)])
    per_day = draw(ramp(1.0, 1e6))
    return {
        "weights": weights,
        "tiers": {"shadow": tiers[0], "offload": tiers[1]},
        "min_results": draw(st.integers(0, 5000)) if minimums else 0,
        "min_repeat_pairs": draw(st.integers(0, 500)) if minimums else 0,
        "min_days": draw(st.integers(0, 8)) if minimums else 0,
        "noisy_field_rate": draw(fractions),
        "input_length": {
            "tail_ratio": draw(ramp(1.0, 50.0)),
            "p95_tokens": draw(ramp(1.0, 50_000.0)),
            "signal_ratio": draw(st.floats(1.0, 50.0)),
        },
        "determinism": dict(
            zip(("floor", "full"), draw(ramp(0.0, 1.0)), strict=True),
            signal_below=draw(fractions),
        ),
        "frequency": {
            "per_day": per_day,
            "mean_input_tokens": draw(ramp(1.0, 50_000.0)),
            "signal_per_day": draw(st.floats(1.0, 1e6)),
            "signal_mean_input_tokens": draw(st.floats(1.0, 50_000.0)),
        },
    }


def config_of(
    grading: dict[str, Any], error_cost: float = 0.2, forbid: str | None = None
) -> TaskConfig:
    return make_config(error_cost=error_cost, forbid=forbid, grading=grading)


def graded(traffic: Traffic, config: TaskConfig, veto: float = VETO) -> dict[str, Any]:
    return grade("t", traffic, config, veto=veto, computed_at=UNTIL)


# --- forbid and the veto ------------------------------------------------------------------


@given(traffics(), grading_configs(), fractions, st.sampled_from(["planning", "fresh_knowledge"]))
def test_forbid_dominates_everything(
    traffic: Traffic, grading: dict[str, Any], error_cost: float, forbid: str
) -> None:
    document = graded(traffic, config_of(grading, error_cost, forbid))
    assert document["tier"] == "forbid"
    assert document["score"] is None
    assert document["missing"] == []
    words = {"planning": "planning", "fresh_knowledge": "fresh knowledge"}[forbid]
    assert document["reasons"][0].startswith("forbid: ")
    assert words in document["reasons"][0]


@given(traffics(), grading_configs(), st.floats(0.01, 1.0), fractions)
def test_the_veto_dominates_whatever_the_traffic_and_other_scores(
    traffic: Traffic, grading: dict[str, Any], veto: float, above: float
) -> None:
    error_cost = veto + above * (1 - veto)  # in [veto, 1]
    document = graded(traffic, config_of(grading, error_cost), veto)
    assert document["tier"] == "keep_cloud"
    assert document["score"] is None
    cost = document["dimensions"]["error_cost"]
    assert cost["veto"] is True and cost["signal"] is True
    assert document["reasons"][0].startswith("error cost: ")
    assert "veto" in document["reasons"][0]
    assert all(a in document["reasons"][0] for a in cost["irreversible_actions"])
    assert "veto" in document["to_change"][0]
    assert document["missing"] == []  # the veto decided: nothing more is needed


@given(traffics(least=1), grading_configs(minimums=False), st.floats(0.0, 0.69))
def test_below_the_veto_the_error_cost_never_vetoes(
    traffic: Traffic, grading: dict[str, Any], error_cost: float
) -> None:
    document = graded(traffic, config_of(grading, error_cost))
    assert document["dimensions"]["error_cost"]["veto"] is False
    assert document["tier"] in RANK


# --- the score: monotone in each dimension, the tier its band --------------------------


@st.composite
def sufficient(draw: st.DrawFn) -> tuple[Traffic, TaskConfig]:
    """Traffic past every minimum and a config below the veto: a graded tier."""
    traffic = draw(traffics(least=1))
    return traffic, config_of(draw(grading_configs(minimums=False)), draw(st.floats(0.0, 0.69)))


def score_and_rank(traffic: Traffic, config: TaskConfig) -> tuple[float, int]:
    document = graded(traffic, config)
    assert document["score"] is not None
    return document["score"], RANK[document["tier"]]


def assert_not_worse(worse: tuple[Traffic, TaskConfig], better: tuple[Traffic, TaskConfig]) -> None:
    low_score, low_rank = score_and_rank(*worse)
    high_score, high_rank = score_and_rank(*better)
    assert high_score >= low_score
    assert high_rank >= low_rank


@given(sufficient(), st.data())
def test_better_self_agreement_never_lowers_the_score(
    case: tuple[Traffic, TaskConfig], data: st.DataObject
) -> None:
    traffic, config = case
    agree = data.draw(st.integers(traffic.repeat_agree, traffic.repeat_pairs))
    better = replace(
        traffic,
        repeat_agree=agree,
        repeat_invalid=min(traffic.repeat_invalid, traffic.repeat_pairs - agree),
    )
    assert_not_worse(case, (better, config))


@given(sufficient(), fractions, fractions)
def test_a_shorter_tail_never_lowers_the_score(
    case: tuple[Traffic, TaskConfig], shorter: float, higher_median: float
) -> None:
    traffic, config = case
    assert traffic.input_p50 is not None and traffic.input_p95 is not None
    p50, p95 = traffic.input_p50, traffic.input_p95
    better = replace(traffic, input_p95=p50 + (p95 - p50) * shorter)
    assert_not_worse(case, (better, config))
    # A median nearer the P95 is a shorter tail too.
    better = replace(traffic, input_p50=p50 + (p95 - p50) * higher_median)
    assert_not_worse(case, (better, config))


@given(sufficient(), st.integers(0, 3_000_000))
def test_more_calls_per_day_never_lower_the_score(
    case: tuple[Traffic, TaskConfig], more: int
) -> None:
    traffic, config = case
    mean = traffic.input_tokens_sum / traffic.results
    results = traffic.results + more
    better = replace(traffic, results=results, input_tokens_sum=mean * results)
    assert_not_worse(case, (better, config))


@given(sufficient(), fractions)
def test_shorter_inputs_on_every_call_never_lower_the_score(
    case: tuple[Traffic, TaskConfig], share: float
) -> None:
    traffic, config = case
    better = replace(traffic, input_tokens_sum=traffic.input_tokens_sum * share)
    assert_not_worse(case, (better, config))


@given(sufficient(), fractions)
def test_a_lower_error_cost_never_lowers_the_score(
    case: tuple[Traffic, TaskConfig], share: float
) -> None:
    traffic, config = case
    better = config.model_copy(update={"error_cost": config.error_cost * share})
    assert_not_worse(case, (traffic, better))


def band(score: float, grading: Any) -> str:
    if score >= grading.tiers.offload:
        return "offload"
    return "shadow" if score >= grading.tiers.shadow else "keep_cloud"


@given(sufficient())
def test_the_score_is_the_weighted_mean_and_the_tier_its_band(
    case: tuple[Traffic, TaskConfig],
) -> None:
    traffic, config = case
    document = graded(traffic, config)
    dims = document["dimensions"]
    weights = config.grading.weights.model_dump()
    # Error cost enters as 1 - error_cost.
    assert dims["error_cost"]["score"] == round(1 - config.error_cost, 3)
    mean = sum(weights[d] * dims[d]["score"] for d in DIMENSIONS) / sum(weights.values())
    assert document["score"] == round(mean, 3)
    assert document["tier"] == band(document["score"], config.grading)
    assert document["missing"] == []


@given(sufficient(), grading_configs(minimums=False))
def test_the_same_score_gives_the_same_tier_under_the_same_bands(
    case: tuple[Traffic, TaskConfig], other: dict[str, Any]
) -> None:
    # Another task's scales and weights, the same bands: equal scores, equal tiers.
    traffic, config = case
    other["tiers"] = config.grading.tiers.model_dump()
    first = graded(traffic, config)
    second = graded(traffic, config_of(other, config.error_cost))
    if first["score"] == second["score"]:
        assert first["tier"] == second["tier"]
    assert second["tier"] == band(second["score"], config.grading)


@given(sufficient())
def test_every_signal_has_its_reason_and_the_error_cost_comes_first(
    case: tuple[Traffic, TaskConfig],
) -> None:
    traffic, config = case
    document = graded(traffic, config)
    dims = document["dimensions"]
    labels = {d: d.replace("_", " ") for d in DIMENSIONS}
    signalled = [d for d in DIMENSIONS if dims[d]["signal"]]
    assert len(document["reasons"]) == len(signalled)
    for d in signalled:
        assert f"{labels[d]}: {dims[d]['reason']}" in document["reasons"]
    if dims["error_cost"]["signal"]:
        assert document["reasons"][0].startswith("error cost: ")
    assert all(isinstance(dims[d]["reason"], str) and dims[d]["reason"] for d in DIMENSIONS)


# --- insufficient -----------------------------------------------------------------------


@given(traffics(least=1), grading_configs(), st.floats(0.0, 0.69))
def test_insufficient_exactly_below_a_minimum_naming_each(
    traffic: Traffic, grading: dict[str, Any], error_cost: float
) -> None:
    document = graded(traffic, config_of(grading, error_cost))
    expected = []
    if traffic.results < grading["min_results"]:
        expected.append(f"results: {traffic.results:,} of the {grading['min_results']:,} needed")
    if traffic.repeat_pairs < grading["min_repeat_pairs"]:
        expected.append(
            f"repeat pairs: {traffic.repeat_pairs:,} of the {grading['min_repeat_pairs']:,} needed"
        )
    if traffic.days < grading["min_days"]:
        expected.append(f"days with traffic: {traffic.days} of the {grading['min_days']} needed")
    assert document["missing"] == expected
    assert (document["tier"] == "insufficient") == bool(expected)
    assert (document["score"] is None) == bool(expected)
    # The dimensions are shown all the same.
    assert all(document["dimensions"][d]["score"] is not None for d in DIMENSIONS)


def test_a_weighted_dimension_that_cannot_be_measured_is_missing() -> None:
    no_minimums = {"min_results": 0, "min_repeat_pairs": 0, "min_days": 0}
    config = make_config(grading=no_minimums)
    document = graded(make_traffic(p50=None, p95=None, repeat_pairs=0), config)
    assert document["tier"] == "insufficient"
    assert document["missing"] == [
        "input length: no input token counts in the span",
        "determinism: no repeat pairs in the span: the cloud's self-agreement is unknown",
    ]
    assert document["dimensions"]["input_length"]["score"] is None
    assert document["dimensions"]["determinism"]["value"]["self_agreement"] is None
    # Weighing nothing, it is not needed.
    unweighted = make_config(
        grading={**no_minimums, "weights": {"input_length": 0, "determinism": 0}}
    )
    document = graded(make_traffic(p50=None, p95=None, repeat_pairs=0), unweighted)
    assert document["tier"] != "insufficient" and document["missing"] == []


def test_no_traffic_at_all_is_insufficient_naming_results_pairs_and_days() -> None:
    document = graded(make_traffic(per_day=0, p50=None, p95=None), make_config())
    assert document["tier"] == "insufficient"
    assert document["missing"][:3] == [
        "results: 0 of the 1,000 needed",
        "repeat pairs: 0 of the 100 needed",
        "days with traffic: 0 of the 1 needed",
    ]
    assert document["dimensions"]["frequency"]["score"] is None


# --- noisy fields -------------------------------------------------------------------------


@given(traffics(least=1), fractions)
def test_noisy_lists_exactly_what_the_cloud_changes_past_the_rate(
    traffic: Traffic, rate: float
) -> None:
    document = graded(traffic, make_config(grading={"noisy_field_rate": rate}))
    expected = {
        name: count
        for name, count in traffic.repeat_diffs.items()
        if count / traffic.repeat_pairs > rate
    }
    assert {n["name"]: n["count"] for n in document["noisy"]} == expected
    for noisy in document["noisy"]:
        assert noisy["pairs"] == traffic.repeat_pairs
        assert noisy["rate"] == noisy["count"] / traffic.repeat_pairs
        assert noisy["name"] in document["dimensions"]["determinism"]["reason"]


# --- the normalisations -------------------------------------------------------------------


@given(ramp(0.0, 1e6), st.floats(0.0, 2e6), st.floats(0.0, 2e6))
def test_the_ramps_are_monotone_and_within_0_and_1(
    bounds: tuple[float, float], a: float, b: float
) -> None:
    low, high = sorted([a, b])
    for value in (a, b):
        assert 0.0 <= falling(value, *bounds) <= 1.0
        assert 0.0 <= rising(value, *bounds) <= 1.0
    assert falling(low, *bounds) >= falling(high, *bounds)
    assert rising(low, *bounds) <= rising(high, *bounds)
    assert falling(bounds[0], *bounds) == 1.0 and falling(bounds[1], *bounds) == 0.0


@given(ramp(1.0, 50.0), ramp(1.0, 50_000.0), tokens, tokens, tokens)
def test_input_length_score_falls_with_the_tail_and_the_p95(
    ratio: tuple[float, float], p95_tokens: tuple[float, float], p50: float, a: float, b: float
) -> None:
    scale = InputLengthScale(tail_ratio=ratio, p95_tokens=p95_tokens)
    short, long = sorted([a, b])
    assert 0.0 <= input_length_score(p50, p50 + long, scale) <= 1.0
    assert input_length_score(p50, p50 + short, scale) >= input_length_score(p50, p50 + long, scale)
    # A median nearer a fixed P95: a shorter tail.
    p95 = p50 + long
    assert input_length_score(p50 + short, p95, scale) >= input_length_score(p50, p95, scale)


@given(ramp(0.0, 1.0), st.integers(1, 1_000_000), fractions, fractions)
def test_determinism_score_rises_with_self_agreement(
    bounds: tuple[float, float], pairs: int, a: float, b: float
) -> None:
    scale = DeterminismScale(floor=bounds[0], full=bounds[1])
    fewer, more = sorted([round(a * pairs), round(b * pairs)])
    low, high = determinism_score(fewer, pairs, scale), determinism_score(more, pairs, scale)
    assert low is not None and high is not None
    assert 0.0 <= low <= high <= 1.0
    assert determinism_score(0, 0, scale) is None


@given(
    ramp(1.0, 1e6), ramp(1.0, 50_000.0), st.floats(0.0, 1e8), st.floats(0.0, 1e8), tokens, tokens
)
def test_frequency_score_rises_with_calls_and_falls_with_context(
    per_day: tuple[float, float],
    mean_tokens: tuple[float, float],
    a: float,
    b: float,
    c: float,
    d: float,
) -> None:
    scale = FrequencyScale(per_day=per_day, mean_input_tokens=mean_tokens)
    fewer, more = sorted([a, b])
    short, long = sorted([c, d])
    assert 0.0 <= per_day_score(fewer, scale) <= per_day_score(more, scale) <= 1.0
    assert per_day_score(per_day[0], scale) == 0.0 and per_day_score(per_day[1], scale) == 1.0
    assert frequency_score(more, short, scale) >= frequency_score(fewer, short, scale)
    assert frequency_score(more, short, scale) >= frequency_score(more, long, scale)
    assert 0.0 <= frequency_score(fewer, long, scale) <= 1.0

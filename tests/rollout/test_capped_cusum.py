"""`capped_cusum`: hand-computed sums, its laws by hypothesis, its config and its sentence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.catalog.schemas import ConfigError, parse_config
from controlplane.rollout.detectors import capped_cusum, cusum, cusum_steps, should_rollback
from controlplane.rollout.explain import STEPS_KEPT, explain, run_evidence
from controlplane.rollout.policy import evaluate
from controlplane.rollout.verdicts import CellWindow, Op

# Rule `agreement >= 0.90`, min_effect 0.05: out of control at 0.85. Per sample, by hand:
# an agreeing pair adds ln(0.85 / 0.90) = -0.0571584, a disagreeing one ln(0.15 / 0.10) =
# +0.4054651.
HIT, MISS = -0.0571584, 0.4054651


def series(agree: Sequence[int], den: int = 100) -> list[CellWindow]:
    return [CellWindow(i, a, den) for i, a in enumerate(agree)]


def test_the_sums_match_a_hand_computation() -> None:
    # 95/100: 95 × HIT + 5 × MISS = -3.4027 → the sum stays at 0.
    # 46/100: 46 × HIT + 54 × MISS = 19.2658 → counts 2 → 2.
    # 88/100: 88 × HIT + 12 × MISS = -0.1644 → 1.8356.
    # 52/100: 16.4901 → counts 2 → 3.8356.
    # 50/100: 17.4153 → counts 2 → 5.8356 ≥ 5: fires, on its 4-window run.
    windows = series([95, 46, 88, 52, 50])
    steps = cusum_steps(windows, ">=", 0.90, 0.05, 2.0)
    assert [round(s.raw, 3) for s in steps] == [-3.403, 19.266, -0.164, 16.49, 17.415]
    assert [s.counted for s in steps] == pytest.approx([-3.4027, 2, -0.1644, 2, 2], abs=1e-4)
    assert [s.total for s in steps] == pytest.approx([0, 2, 1.8356, 3.8356, 5.8356], abs=1e-4)
    assert steps[1].raw == pytest.approx(46 * HIT + 54 * MISS, abs=1e-5)

    fired = capped_cusum(windows, ">=", 0.90, 0.05, 5.0, 2.0)
    assert fired is not None and fired.how == "capped_cusum" and fired.at_window == 4
    assert fired.statistic == pytest.approx(5.8356, abs=1e-4)
    assert [s.window for s in fired.steps] == [1, 2, 3, 4]

    # Without the cap, the first bad window alone reaches h.
    plain = cusum(windows, ">=", 0.90, 0.05, 5.0)
    assert plain is not None and plain.how == "cusum" and plain.at_window == 1
    assert plain.statistic == pytest.approx(19.2658, abs=1e-4)


def test_a_rate_rule_counts_its_numerator_as_the_bad_side() -> None:
    # `offload_fail_rate <= 0.02`, out of control at 0.07: 10 failures in 100 add
    # 10 ln(0.07/0.02) + 90 ln(0.93/0.98) = 12.5276 - 4.7130 = 7.8146, capped at 2.
    windows = [CellWindow(i, 10, 100) for i in range(4)]
    fired = capped_cusum(windows, "<=", 0.02, 0.05, 5.0, 2.0)
    assert fired is not None and fired.at_window == 2
    assert fired.steps[0].raw == pytest.approx(7.8146, abs=1e-4)
    assert capped_cusum([CellWindow(i, 1, 100) for i in range(50)], "<=", 0.02, 0.05, 5, 2) is None


def test_the_run_restarts_where_the_sum_returns_to_zero() -> None:
    # Two bad windows, a very good one that empties the sum, then three bad ones: the
    # evidence is the last three, not the first two.
    windows = series([50, 50, 100, 50, 50, 50])
    fired = capped_cusum(windows, ">=", 0.90, 0.05, 5.0, 2.0)
    assert fired is not None and fired.at_window == 5
    assert [s.window for s in fired.steps] == [3, 4, 5]
    # Windows without samples add nothing and stay in the run.
    gappy = [
        CellWindow(0, 50, 100),
        CellWindow(1, 0, 0),
        CellWindow(2, 50, 100),
        CellWindow(3, 50, 100),
    ]
    fired = capped_cusum(gappy, ">=", 0.90, 0.05, 5.0, 2.0)
    assert fired is not None and [s.window for s in fired.steps] == [0, 1, 2, 3]


# --- laws ---------------------------------------------------------------------------------

ops = st.sampled_from([">=", "<="])
thresholds = st.floats(0.02, 0.98)
effects = st.floats(0.01, 0.3)


@st.composite
def cells(draw: Any, max_size: int = 30) -> list[CellWindow]:
    sizes = draw(st.lists(st.integers(0, 5000), min_size=1, max_size=max_size))
    return [CellWindow(i, draw(st.integers(0, den)), den) for i, den in enumerate(sizes)]


@st.composite
def h_and_cap(draw: Any) -> tuple[float, float]:
    h = draw(st.floats(0.5, 50))
    # Below h by more than rounding (the config refuses a cap within 1e-9 of h).
    return h, draw(st.floats(0.05, h * (1 - 1e-9)))


def reference_cusum(
    windows: Sequence[CellWindow], op: Op, threshold: float, min_effect: float, h: float
) -> tuple[int, float] | None:
    """The textbook Bernoulli CUSUM (no cap), written out independently."""
    p0 = min(max(threshold, 1e-6), 1 - 1e-6)
    p1 = min(max(threshold + min_effect if op == "<=" else threshold - min_effect, 1e-6), 1 - 1e-6)
    total = 0.0
    for w in windows:
        llr = w.num * math.log(p1 / p0) + (w.den - w.num) * math.log((1 - p1) / (1 - p0))
        total = max(0.0, total + llr)
        if total >= h:
            return w.window, total
    return None


@given(cells(max_size=1), ops, thresholds, effects, h_and_cap())
def test_one_window_never_fires_whatever_its_counts(
    windows: list[CellWindow], op: Op, threshold: float, effect: float, hc: tuple[float, float]
) -> None:
    h, cap = hc
    assert capped_cusum(windows, op, threshold, effect, h, cap) is None
    assert capped_cusum([CellWindow(0, 0, 10**7)], op, threshold, effect, h, cap) is None
    assert capped_cusum([CellWindow(0, 10**7, 10**7)], op, threshold, effect, h, cap) is None


@given(cells(), ops, thresholds, effects, h_and_cap())
def test_firing_takes_at_least_h_over_cap_windows_of_evidence(
    windows: list[CellWindow], op: Op, threshold: float, effect: float, hc: tuple[float, float]
) -> None:
    h, cap = hc
    fired = capped_cusum(windows, op, threshold, effect, h, cap)
    if fired is not None:
        adding = [s for s in fired.steps if s.counted > 0]
        assert len(adding) >= math.ceil(h / cap - 1e-9)
        assert all(s.counted <= cap for s in fired.steps)
        assert fired.steps[-1].window == fired.at_window
        assert fired.statistic == fired.steps[-1].total >= h * (1 - 1e-12)


@given(cells(), ops, thresholds, effects, h_and_cap(), st.data())
def test_more_bad_evidence_never_delays_a_firing(
    windows: list[CellWindow],
    op: Op,
    threshold: float,
    effect: float,
    hc: tuple[float, float],
    data: Any,
) -> None:
    h, cap = hc
    i = data.draw(st.integers(0, len(windows) - 1))
    w = windows[i]
    # The bad side: fewer agreeing pairs under `>=`, more failures under `<=`.
    moved = data.draw(st.integers(0, w.num)) if op == ">=" else data.draw(st.integers(w.num, w.den))
    worse = [*windows[:i], CellWindow(w.window, moved, w.den), *windows[i + 1 :]]
    before = cusum_steps(windows, op, threshold, effect, cap)
    after = cusum_steps(worse, op, threshold, effect, cap)
    assert all(b.total <= a.total + 1e-9 for b, a in zip(before, after, strict=True))
    fired = capped_cusum(windows, op, threshold, effect, h, cap)
    fired_worse = capped_cusum(worse, op, threshold, effect, h, cap)
    if fired is not None:
        assert fired_worse is not None and fired_worse.at_window <= fired.at_window


@given(cells(), ops, thresholds, effects, st.floats(0.5, 50))
def test_without_a_cap_it_is_the_plain_cusum(
    windows: list[CellWindow], op: Op, threshold: float, effect: float, h: float
) -> None:
    expected = reference_cusum(windows, op, threshold, effect, h)
    for fired in (
        capped_cusum(windows, op, threshold, effect, h, math.inf),
        cusum(windows, op, threshold, effect, h),
    ):
        if expected is None:
            assert fired is None
        else:
            assert fired is not None and fired.at_window == expected[0]
            assert fired.statistic == pytest.approx(expected[1])


# --- config, default and sentence ---------------------------------------------------------


def config(rollback: dict[str, Any]) -> Any:
    return parse_config({"task": "t", "comparator": {"kind": "label"}, "rollback": rollback})


RULE = {"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"}


def test_capped_cusum_is_the_default_and_a_named_detector_is_kept() -> None:
    default = config({"rules": [RULE]}).rollback.resolved_rules()[0]
    assert (default.detector, default.h, default.cap, default.min_effect) == (
        "capped_cusum",
        5.0,
        2.0,
        0.05,
    )
    for named in ("consecutive", "cusum"):
        assert (
            config({"detector": named, "rules": [RULE]}).rollback.resolved_rules()[0].detector
            == named
        )
        assert (
            config({"rules": [{**RULE, "detector": named}]}).rollback.resolved_rules()[0].detector
            == named
        )


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"cap": 5}, "cap (5) must be below h (5, the default)"),
        ({"cap": 3, "h": 2}, "cap (3) must be below h (2)"),
        ({"cap": 2, "h": 2}, "cap (2) must be below h (2)"),
        ({"cap": 0}, "rollback.rules.0.cap"),
        ({"cap": float("inf")}, "rollback.rules.0.cap"),
    ],
)
def test_a_cap_not_below_h_is_refused_naming_both(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        config({"rules": [{**RULE, **rule}]})
    assert any(message in e for e in refused.value.errors), refused.value.errors
    assert any("rollback.rules.0" in e for e in refused.value.errors)


def test_a_large_h_without_a_cap_can_still_fire_within_the_windows_read() -> None:
    """h 1000 at the default cap 2 would need 500 windows, and an evaluation reads 100 (at
    least): without a cap of its own the rule counts h / 100 per window."""
    rule = config({"rules": [{**RULE, "h": 1000}]}).rollback.resolved_rules()[0]
    assert rule.cap == 10
    windows = [CellWindow(i, 0, 10_000) for i in range(100)]
    fired = capped_cusum(windows, ">=", 0.9, 0.05, rule.h, rule.cap)
    assert fired is not None and fired.at_window == 99
    assert config({"rules": [{**RULE, "h": 200}]}).rollback.resolved_rules()[0].cap == 2


def test_a_small_h_without_a_cap_still_takes_two_windows() -> None:
    rule = config({"rules": [{**RULE, "h": 1}]}).rollback.resolved_rules()[0]
    assert rule.cap == 0.5
    huge = [CellWindow(0, 0, 10_000), CellWindow(1, 0, 10_000)]
    assert (
        should_rollback(huge[:1], [], op=">=", threshold=0.9, confidence=0.8, h=1, cap=rule.cap)
        is None
    )
    assert (
        should_rollback(huge, [], op=">=", threshold=0.9, confidence=0.8, h=1, cap=rule.cap)
        is not None
    )


def test_the_sentence_lists_the_evidence_an_sre_can_check_by_hand() -> None:
    cfg = config({"rules": [RULE]})
    rows = [
        (w, {"2048+": {"n_pairs": 100, "n_agree": agree}})
        for w, agree in enumerate([95, 46, 52, 50])
    ]
    fired = [o for o in evaluate(cfg, rows) if o.firing is not None]
    assert [o.cell for o in fired] == ["2048+", "all"]
    assert explain("ticket_classify", fired[0], cfg) == (
        "ticket_classify rolled back: agreement on inputs of 2048+ tokens: evidence 6.0 ≥ 5 "
        "over 3 windows (each window counts at most 2): 46%, 52%, 50% vs 0.90."
    )
    plain = config({"detector": "cusum", "rules": [RULE]})
    (first, *_rest) = [o for o in evaluate(plain, rows) if o.firing is not None]
    assert explain("t", first, plain) == (
        "t rolled back: agreement on inputs of 2048+ tokens: evidence 19.3 ≥ 5 over 1 window: "
        "46% vs 0.90."
    )


def test_a_long_run_keeps_its_latest_windows_and_counts_the_rest() -> None:
    """A sparse cell adds a little each window: its run may be hundreds of windows long. The
    decision keeps the latest STEPS_KEPT of them and says how many it left out."""
    cfg = config({"rules": [{**RULE, "h": 100, "cap": 1}]})
    rows = [(w, {"2048+": {"n_pairs": 10, "n_agree": 8}}) for w in range(400)]
    fired = next(o for o in evaluate(cfg, rows) if o.firing is not None and o.cell == "2048+")
    assert fired.firing is not None and len(fired.firing.steps) > STEPS_KEPT
    evidence = run_evidence(fired, cfg)
    assert len(evidence["steps"]) == STEPS_KEPT
    assert evidence["steps_omitted"] == len(fired.firing.steps) - STEPS_KEPT
    assert evidence["steps"][-1]["sum"] == pytest.approx(fired.firing.statistic, abs=1e-3)
    assert (evidence["h"], evidence["cap"], evidence["min_effect"]) == (100, 1, 0.05)
    sentence = explain("t", fired, cfg)
    assert f"over {len(fired.firing.steps)} windows" in sentence and ": …, 80%" in sentence

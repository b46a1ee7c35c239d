"""should_rollback and verdicts: the laws of docs/evidence.md, by hypothesis, and units of
cusum and pooling."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.rollout.detectors import consecutive, cusum, should_rollback
from controlplane.rollout.verdicts import CellWindow, Verdict, one_sided_bound, verdicts

N = 3
kinds = st.sampled_from(["breach", "ok", "insufficient"])


def history(sequence: list[str]) -> list[Verdict]:
    return [Verdict(i, i, 0, 0, None, None, 0.9, kind) for i, kind in enumerate(sequence)]  # type: ignore[arg-type]


def longest_breach_run(sequence: list[str]) -> int:
    best = run = 0
    for kind in sequence:
        if kind == "ok":
            run = 0
        elif kind == "breach":
            run += 1
            best = max(best, run)
    return best


@given(st.lists(kinds, max_size=60))
def test_fires_exactly_when_n_conclusive_breaches_run_without_an_ok(sequence: list[str]) -> None:
    # Span large enough never to lapse: the law is about runs alone.
    fired = consecutive(history(sequence), N, max_span_windows=10_000)
    assert (fired is not None) == (longest_breach_run(sequence) >= N)
    if fired is not None:
        assert len(fired.verdicts) == N
        assert all(v.verdict == "breach" for v in fired.verdicts)


@given(st.lists(kinds, max_size=40), st.lists(st.integers(0, 40), max_size=10))
def test_insufficient_windows_neither_count_nor_reset(sequence: list[str], at: list[int]) -> None:
    padded = list(sequence)
    for i in sorted(at, reverse=True):
        padded.insert(min(i, len(padded)), "insufficient")
    with_gaps = consecutive(history(padded), N, max_span_windows=10_000) is not None
    assert with_gaps == (consecutive(history(sequence), N, max_span_windows=10_000) is not None)
    assert consecutive(history(["insufficient"] * len(padded)), N, 10_000) is None


@given(st.integers(0, 20), st.integers(0, N - 1))
def test_an_ok_resets_the_run(before: int, after: int) -> None:
    sequence = ["breach"] * (N - 1) + ["ok"] + ["breach"] * after
    assert consecutive(history(["insufficient"] * before + sequence), N, 10_000) is None
    assert consecutive(history(sequence + ["breach"] * (N - after)), N, 10_000) is not None


def test_a_run_stretched_over_more_than_max_span_windows_lapses() -> None:
    stretched = ["breach", *["insufficient"] * 5, "breach", "breach"]
    assert consecutive(history(stretched), N, max_span_windows=6) is None
    assert consecutive(history(stretched), N, max_span_windows=8) is not None


def test_one_bad_window_never_rolls_back_and_low_traffic_is_pooled() -> None:
    # Agreement >= 0.90 at 80% confidence, 200 samples minimum, pools of up to 12 windows.
    rule = {
        "op": ">=",
        "threshold": 0.90,
        "confidence": 0.80,
        "min_samples": 200,
        "max_pool_windows": 12,
    }
    cells = [CellWindow(0, 170, 200), *(CellWindow(i, 196, 200) for i in range(1, 6))]
    found = verdicts(cells, **rule)
    assert [v.verdict for v in found] == ["breach", "ok", "ok", "ok", "ok", "ok"]
    assert should_rollback(cells, found, op=">=", threshold=0.90, confidence=0.80) is None
    # 50 a window: four windows pool into one verdict of 200 (counted once).
    sparse = [CellWindow(i, 40, 50) for i in range(8)]
    pooled = verdicts(sparse, **rule)
    assert [(v.first_window, v.last_window, v.den, v.verdict) for v in pooled] == [
        (0, 3, 200, "breach"),
        (4, 7, 200, "breach"),
    ]
    # A pool that never reaches the minimum within 12 windows is insufficient.
    trickle = [CellWindow(i, 1, 2) for i in range(13)]
    assert [v.verdict for v in verdicts(trickle, **rule)] == ["insufficient"]


def _normal_quantile(q: Fraction) -> Decimal:
    """The standard normal quantile by bisection on math.erf (not NormalDist.inv_cdf)."""
    lo, hi = 0.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if (1 + math.erf(mid / math.sqrt(2))) / 2 < q:
            lo = mid
        else:
            hi = mid
    return Decimal(lo)


def _exact_wilson(num: int, den: int, z: Decimal) -> tuple[Decimal, Decimal]:
    """Both roots of (p̂ - p)² = z² p (1 - p) / n, the Wilson score interval's definition,
    solved in 50-digit decimal arithmetic."""
    with localcontext() as ctx:
        ctx.prec = 50
        n, p_hat, z2 = Decimal(den), Decimal(num) / Decimal(den), z * z
        a = 1 + z2 / n
        b = -(2 * p_hat + z2 / n)
        c = p_hat * p_hat
        root = (b * b - 4 * a * c).sqrt()
        return (-b - root) / (2 * a), (-b + root) / (2 * a)


def test_bounds_are_one_sided_wilson() -> None:
    # 170/200 = 0.85: the 80% upper bound sits just above, the lower just below.
    upper = one_sided_bound(170, 200, ">=", 0.80)
    lower = one_sided_bound(170, 200, "<=", 0.80)
    assert upper is not None and lower is not None
    # The one-sided 80% quantile, tabulated as 0.8416212336, and the interval from it.
    z = _normal_quantile(Fraction(8, 10))
    assert abs(z - Decimal("0.8416212336")) < Decimal("1e-10")
    exact_lower, exact_upper = _exact_wilson(170, 200, z)
    assert upper == pytest.approx(float(exact_upper), abs=1e-12)
    assert lower == pytest.approx(float(exact_lower), abs=1e-12)
    assert round(upper, 5) == 0.87001 and round(lower, 5) == 0.82752
    assert lower < 0.85 < upper
    assert one_sided_bound(170, 200, ">=", "point") == 0.85
    assert one_sided_bound(0, 0, ">=", 0.8) is None
    wider = one_sided_bound(170, 200, ">=", 0.95)
    assert wider is not None and wider > upper


def test_cusum_accumulates_evidence_and_forgets_good_windows() -> None:
    # Rate rule `<= 0.02`, out of control at 0.07: 10 errors in 100 is strong evidence.
    bad = [CellWindow(i, 10, 100) for i in range(5)]
    fired = cusum(bad, "<=", 0.02, 0.05, 5.0)
    assert fired is not None and fired.at_window == 0
    llr = 10 * math.log(0.07 / 0.02) + 90 * math.log(0.93 / 0.98)
    assert fired.statistic == pytest.approx(llr)
    good = [CellWindow(i, 1, 100) for i in range(50)]
    assert cusum(good, "<=", 0.02, 0.05, 5.0) is None
    # Agreement rule `>= 0.90`: a slide to 0.80 builds up over windows.
    slide = [CellWindow(i, 160, 200) for i in range(3)]
    fired = cusum(slide, ">=", 0.90, 0.05, 5.0)
    assert fired is not None
    assert cusum([CellWindow(0, 185, 200)], ">=", 0.90, 0.05, 5.0) is None


def test_the_critical_tripwire_fires_on_one_window() -> None:
    cells = [CellWindow(0, 196, 200), CellWindow(1, 100, 200)]
    found = verdicts(
        cells, op=">=", threshold=0.9, confidence=0.8, min_samples=200, max_pool_windows=12
    )
    fired = should_rollback(
        cells, found, op=">=", threshold=0.9, confidence=0.8, critical_threshold=0.6
    )
    assert fired is not None and fired.how == "critical" and fired.at_window == 1
    assert should_rollback(cells, found, op=">=", threshold=0.9, confidence=0.8) is None


def _rows(agree: dict[str, tuple[int, int]]) -> dict[str, dict[str, int]]:
    base = {
        k: 0
        for k in ("n_edge_fails", "n_edge_runs", "n_offload_fails", "n_edge_attempts", "n_degraded")
    }
    return {bucket: {**base, "n_agree": a, "n_pairs": n} for bucket, (a, n) in agree.items()}


def test_a_breach_in_one_bucket_fires_while_all_is_fine() -> None:
    from controlplane.catalog.schemas import parse_config
    from controlplane.rollout.policy import evaluate

    config = parse_config(
        {
            "task": "t",
            "comparator": {"kind": "label"},
            "rollback": {
                "rules": [
                    {"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"}
                ]
            },
        }
    )
    healthy = {"0-127": (970, 1000), "128-511": (970, 1000), "512-2047": (960, 1000)}
    # The long bucket breaks (70% agreement) while `all` stays at ~95%.
    windows = [(i, _rows({**healthy, "2048+": (140, 200), "all": (3040, 3200)})) for i in range(3)]
    outcomes = {o.cell: o for o in evaluate(config, windows)}
    assert outcomes["all"].firing is None
    assert outcomes["all"].windows[0].num == 3040 and outcomes["all"].windows[0].den == 3200
    fired = outcomes["2048+"].firing
    # The default capped CUSUM: each of the three windows counts its cap (2), 6 >= 5.
    assert fired is not None and fired.at_window == 2 and len(fired.steps) == 3
    assert [o.firing for c, o in outcomes.items() if c not in ("2048+",)] == [None] * 4


def test_rules_judge_only_the_buckets_the_edge_may_serve() -> None:
    from controlplane.rollout.policy import judged_buckets

    assert judged_buckets([128, 512, 2048], None) == ["0-127", "128-511", "512-2047", "2048+"]
    assert judged_buckets([128, 512, 2048], 512) == ["0-127", "128-511", "512-2047"]
    assert judged_buckets([128, 512, 2048], 100) == ["0-127"]


@pytest.mark.parametrize(
    ("rollback", "message"),
    [
        (
            {"detector": "ewma"},
            "rollback.detector: Input should be 'capped_cusum', 'consecutive' or 'cusum'",
        ),
        ({"confidence": 1.5}, "rollback.confidence"),
        (
            {"rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "mode": "page"}]},
            "rollback.rules.0.mode",
        ),
        ({"rules": [{"metric": "vibes", "op": ">=", "threshold": 0.9}]}, "rollback.rules.0.metric"),
        (
            {"rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "min_samples": 0}]},
            "rollback.rules.0.min_samples",
        ),
        ({"consecutive_windows": 0}, "rollback.consecutive_windows"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(rollback: dict, message: str) -> None:
    from controlplane.catalog.schemas import ConfigError, parse_config

    with pytest.raises(ConfigError) as refused:
        parse_config({"task": "t", "comparator": {"kind": "label"}, "rollback": rollback})
    assert any(message in e for e in refused.value.errors), refused.value.errors


def test_rule_overrides_take_precedence_over_the_policy() -> None:
    from controlplane.catalog.schemas import parse_config
    from controlplane.rollout.policy import evaluate

    config = parse_config(
        {
            "task": "t",
            "comparator": {"kind": "label"},
            "rollback": {
                "min_samples": 1000,
                "rules": [
                    {
                        "metric": "agreement",
                        "op": ">=",
                        "threshold": 0.9,
                        "min_samples": 50,
                        "detector": "cusum",
                    },
                    {"metric": "agreement", "op": ">=", "threshold": 0.9, "mode": "off"},
                ],
            },
        }
    )
    rows = _rows({"0-127": (30, 60), "all": (30, 60)})
    outcomes = evaluate(config, [(0, rows)])
    assert len(outcomes) == 1  # the `off` rule is not evaluated
    assert [v.verdict for v in outcomes[0].verdicts] == ["breach"]  # judged on 60 >= 50
    assert outcomes[0].firing is not None and outcomes[0].firing.how == "cusum"


@given(
    healthy=st.lists(st.tuples(st.integers(600, 1000), st.integers(0, 20)), min_size=3, max_size=3),
    bad_pairs=st.integers(60, 200),
    bad_share=st.floats(0.0, 0.6),
    windows=st.integers(3, 8),
)
def test_a_breach_in_one_bucket_fires_even_when_all_looks_fine(
    healthy: list[tuple[int, int]], bad_pairs: int, bad_share: float, windows: int
) -> None:
    """Law: the 2048+ bucket at <= 60% agreement fires its per-bucket rule in its third
    window whatever the other buckets do, while the healthy buckets (>= 96.7%) never fire
    and neither does `all` when the healthy buckets keep it at 93% or more."""
    from controlplane.catalog.schemas import parse_config
    from controlplane.rollout.policy import evaluate

    config = parse_config(
        {
            "task": "t",
            "comparator": {"kind": "label"},
            "rollback": {
                "min_samples": 50,
                "rules": [
                    {"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"}
                ],
            },
        }
    )
    buckets = {
        name: (pairs - misses, pairs)
        for name, (pairs, misses) in zip(["0-127", "128-511", "512-2047"], healthy, strict=True)
    }
    buckets["2048+"] = (int(bad_pairs * bad_share), bad_pairs)
    total_agree = sum(a for a, _ in buckets.values())
    total_pairs = sum(n for _, n in buckets.values())
    history = [(i, _rows(buckets)) for i in range(windows)]
    outcomes = {o.cell: o for o in evaluate(config, history)}
    fired = outcomes["2048+"].firing
    assert fired is not None and fired.at_window == 2
    if total_agree / total_pairs >= 0.93:  # `all` comfortably above the line
        assert outcomes["all"].firing is None
    for bucket in ("0-127", "128-511", "512-2047"):
        assert outcomes[bucket].firing is None

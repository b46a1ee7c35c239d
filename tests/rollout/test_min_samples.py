"""What `min_samples` means under each detector (docs/evidence.md, "Rollouts"; issue 29: a
rollback on ~72-pair windows under a `min_samples` of 200 is right for the default capped
CUSUM, and the setting's docs must say why). Under `consecutive` it is the least pairs a
verdict is judged on, so sparse windows pool; under `capped_cusum` and `cusum` it does not
gate firing at all: every window adds its evidence, however few its pairs."""

from __future__ import annotations

import math
from typing import Any

from controlplane.catalog.schemas import RollbackConfig, Rule, parse_config
from controlplane.rollout.policy import evaluate

BUCKET = "2048+"
# A broken long-ticket bucket, as the rehearsal saw it: 72 pairs a window, 47 agreeing.
PAIRS, AGREE = 72, 47


def windows(count: int) -> list[tuple[int, dict[str, dict[str, Any]]]]:
    row = {"n_agree": AGREE, "n_pairs": PAIRS}
    return [(w, {BUCKET: row}) for w in range(count)]


def fired_at(rollback: dict[str, Any], count: int = 12) -> int | None:
    """The window at which the agreement rule on the long bucket fires, if it does."""
    config = parse_config(
        {
            "task": "t",
            "comparator": {"kind": "label"},
            "rollback": {
                **rollback,
                "rules": [
                    {"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"},
                    *rollback.get("rules", []),
                ],
            },
        }
    )
    outcomes = [o for o in evaluate(config, windows(count)) if o.cell == BUCKET]
    [outcome] = outcomes
    return None if outcome.firing is None else outcome.firing.at_window


def test_capped_cusum_fires_on_windows_below_min_samples_whatever_it_is() -> None:
    # By hand: p0 = 0.90, p1 = 0.85 (min_effect 0.05). Each window's evidence
    # 47 ln(0.85/0.90) + 25 ln(0.15/0.10) = -2.687 + 10.137 = 7.45, capped at 2:
    # the sum is 2, 4, 6 and reaches h = 5 at the third window (index 2).
    evidence = AGREE * math.log(0.85 / 0.90) + (PAIRS - AGREE) * math.log(0.15 / 0.10)
    assert 7.4 < evidence < 7.5
    assert fired_at({}) == 2  # the default policy: min_samples 200, above 72
    assert fired_at({"min_samples": 10_000}) == 2
    assert fired_at({"min_samples": 1}) == 2


def test_consecutive_pools_windows_until_min_samples_then_needs_three_verdicts() -> None:
    # min_samples 200: three windows pool into one verdict (216 pairs, 141 agreeing: a clear
    # breach), so the third breaching verdict closes with window 9 (index 8).
    assert fired_at({"detector": "consecutive"}) == 8
    # min_samples at or under 72: one verdict per window, the third at index 2.
    assert fired_at({"detector": "consecutive", "min_samples": 72}) == 2
    # Past what 12 windows hold (max_pool_windows): every pool is insufficient, never fires.
    assert fired_at({"detector": "consecutive", "min_samples": 72 * 12 + 1}, count=36) is None


def test_the_schema_says_what_min_samples_means_under_each_detector() -> None:
    for field in (RollbackConfig.model_fields["min_samples"], Rule.model_fields["min_samples"]):
        text = field.description or ""
        for word in ("consecutive", "capped_cusum", "net_savings", "input_shift"):
            assert word in text, (word, text)

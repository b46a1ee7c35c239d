"""The label rules (`route_acc`, `failure_class`) on route-accuracy windows (pure): counts
in effective labels, the same verdicts and detectors as every rule, evidence in the
route-accuracy windows' length."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.catalog.schemas import parse_config
from controlplane.rollout.explain import (
    breach_ranges,
    explain,
    rule_name,
    step_view,
    verdict_view,
)
from controlplane.rollout.policy import evaluate


def config(*rules: dict[str, Any]) -> Any:
    return parse_config(
        {
            "task": "t",
            "comparator": {"kind": "exact"},
            "rollback": {"min_samples": 20, "rules": list(rules)},
            "review": {"route_acc_window_seconds": 3600},
        }
    )


def row(estimate: float | None, size: float, **classes: float) -> dict[str, Any]:
    return {"estimate": estimate, "n_effective": size, "failure_classes": classes}


HOUR0 = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp()) // 3600


def test_route_acc_fires_after_three_breaching_hours_counted_in_effective_labels() -> None:
    cfg = config({"metric": "route_acc", "op": ">=", "threshold": 0.95, "detector": "consecutive"})
    labelled = [(HOUR0 + k, row(0.70, 40.5)) for k in range(3)]
    (outcome,) = evaluate(cfg, [], labelled)
    assert outcome.cell == "all"
    assert [v.verdict for v in outcome.verdicts] == ["breach"] * 3
    assert outcome.verdicts[0].den == pytest.approx(40.5)
    assert outcome.verdicts[0].num == pytest.approx(0.70 * 40.5)
    assert outcome.firing is not None and outcome.firing.at_window == HOUR0 + 2
    view = verdict_view(outcome.verdicts[0], cfg, "route_acc")
    start = datetime.fromisoformat(view["window_start"])
    assert datetime.fromisoformat(view["window_end"]) - start == timedelta(hours=1)
    assert view["den"] == 40.5 and view["counts"] == "effective labels"
    ranges = breach_ranges(outcome, cfg)
    assert [end - begin for begin, end in ranges] == [timedelta(hours=1)] * 3
    assert ranges[0][0] == datetime(2026, 11, 30, tzinfo=UTC)
    sentence = explain("t", outcome, cfg)
    assert "route accuracy from labels overall breached >= 0.95" in sentence
    assert "70.0% of 40.5 effective labels" in sentence


def test_the_default_detector_sums_effective_labels_and_needs_three_hours_at_least() -> None:
    """capped_cusum on label windows: each hour's evidence from its effective labels (per
    label ln(0.90/0.95) right, ln(0.10/0.05) wrong), capped at 2; the hours that added it are
    the firing's ranges."""
    import math

    cfg = config({"metric": "route_acc", "op": ">=", "threshold": 0.95})
    labelled = [(HOUR0 + k, row(0.70, 40.5)) for k in range(4)]
    (outcome,) = evaluate(cfg, [], labelled)
    firing = outcome.firing
    assert firing is not None and firing.how == "capped_cusum" and firing.at_window == HOUR0 + 2
    raw = 0.70 * 40.5 * math.log(0.90 / 0.95) + 0.30 * 40.5 * math.log(0.10 / 0.05)
    assert [s.raw for s in firing.steps] == pytest.approx([raw] * 3)
    assert [s.total for s in firing.steps] == pytest.approx([2.0, 4.0, 6.0])
    view = step_view(firing.steps[0], cfg, "route_acc")
    assert view["counts"] == "effective labels" and view["den"] == 40.5
    assert datetime.fromisoformat(view["window_end"]) - datetime.fromisoformat(
        view["window_start"]
    ) == timedelta(hours=1)
    ranges = breach_ranges(outcome, cfg)
    assert [end - begin for begin, end in ranges] == [timedelta(hours=1)] * 3
    assert explain("t", outcome, cfg) == (
        "t rolled back: route accuracy from labels overall: evidence 6.0 ≥ 5 over 3 windows "
        "(each window counts at most 2): 70%, 70%, 70% vs 0.95."
    )
    # Few labels an hour: the same share over 4 effective labels adds up more slowly.
    sparse = [(HOUR0 + k, row(0.70, 4.0)) for k in range(12)]
    (outcome,) = evaluate(cfg, [], sparse)
    assert outcome.firing is not None and outcome.firing.at_window > HOUR0 + 2


def test_route_acc_ok_and_sparse_windows() -> None:
    cfg = config({"metric": "route_acc", "op": ">=", "threshold": 0.9})
    good = [(HOUR0 + k, row(0.99, 60.0)) for k in range(5)]
    (outcome,) = evaluate(cfg, [], good)
    assert [v.verdict for v in outcome.verdicts] == ["ok"] * 5 and outcome.firing is None
    # Hours without labels give no evidence either way: pooled, then insufficient.
    empty = [(HOUR0 + k, row(None, 0.0)) for k in range(12)]
    (outcome,) = evaluate(cfg, [], empty)
    assert [v.verdict for v in outcome.verdicts] == ["insufficient"]
    assert outcome.firing is None
    # No closed windows at all: nothing to judge.
    (outcome,) = evaluate(cfg, [], [])
    assert outcome.verdicts == [] and outcome.firing is None


def test_per_bucket_label_rule_judges_the_whole_task() -> None:
    cfg = config({"metric": "route_acc", "op": ">=", "threshold": 0.9, "scope": "per_bucket"})
    outcomes = evaluate(cfg, [], [(HOUR0, row(0.5, 30.0))])
    assert [o.cell for o in outcomes] == ["all"]


def test_failure_class_rule_reads_its_class_share() -> None:
    cfg = config(
        {"metric": "failure_class", "class": "amount", "op": "<=", "threshold": 0.02},
        {"metric": "failure_class", "class": "tone", "op": "<=", "threshold": 0.02},
    )
    labelled = [(HOUR0 + k, row(0.8, 50.0, amount=0.2, tone=0.0)) for k in range(3)]
    amount, tone = evaluate(cfg, [], labelled)
    assert amount.firing is not None and tone.firing is None
    assert amount.verdicts[-1].num == pytest.approx(10.0)
    assert [v.verdict for v in tone.verdicts] == ["ok"] * 3
    assert rule_name(amount.rule) == "failure_class amount <= 0.02"
    assert "failure class amount" in explain("t", amount, cfg)
    # A class the window's labels never named has share 0 there.
    (missing,) = evaluate(cfg, [], [(HOUR0, row(0.8, 50.0))])[1:]
    assert missing.verdicts[0].num == 0.0 and missing.verdicts[0].den == 50.0


def test_a_firing_label_rule_holds_the_promotion_gate() -> None:
    from controlplane.rollout.gate import verdict

    cfg = config({"metric": "route_acc", "op": ">=", "threshold": 0.95})
    healthy = [(HOUR0 + k, row(0.99, 80.0)) for k in range(3)]
    breaching = [(HOUR0 + k, row(0.70, 40.0)) for k in range(3)]
    passes = verdict("t", "shadow", cfg, [], evaluate(cfg, [], healthy))
    held = verdict("t", "shadow", cfg, [], evaluate(cfg, [], breaching))
    assert not any("route_acc" in r for r in passes["reasons"])
    assert "rule route_acc >= 0.95 would fire in all" in held["reasons"]

"""Hostile tests of `capped_cusum` (the default rollback detector): its sums, its config,
its sentence and its evidence, from a hostile round. Each defect it found is pinned here,
fixed: NaN and infinity in a YAML config, caps too small to ever fire, `min_effect` past the
rates 0–1, float rounding short of h, a sentence showing the sum below h, NaN counts
erasing evidence."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from controlplane.catalog.schemas import ConfigError, TaskConfig, parse_config
from controlplane.notify.documents import decision_document
from controlplane.rollout.detectors import capped_cusum, cusum_steps, should_rollback
from controlplane.rollout.explain import LISTED, explain, notice_sentence, step_view
from controlplane.rollout.policy import evaluate
from controlplane.rollout.repository import evaluation_windows
from controlplane.rollout.verdicts import CellWindow
from tests.conftest import Api, make_api

RULE: dict[str, Any] = {"metric": "agreement", "op": ">=", "threshold": 0.9}


def config(rules: list[dict[str, Any]], **rollback: Any) -> TaskConfig:
    return parse_config(
        {"task": "t", "comparator": {"kind": "label"}, "rollback": {"rules": rules, **rollback}}
    )


def rows(agree: list[int], pairs: int = 100, bucket: str = "2048+") -> list[Any]:
    return [(w, {bucket: {"n_pairs": pairs, "n_agree": a}}) for w, a in enumerate(agree)]


def fired(cfg: TaskConfig, windows: Any, labelled: Any = ()) -> list[Any]:
    return [o for o in evaluate(cfg, windows, labelled) if o.firing is not None]


# --- defects -----------------------------------------------------------------------------


def test_the_sentence_never_shows_evidence_below_h() -> None:
    cfg = config([{**RULE, "h": 0.04, "cap": 0.02}])
    outcome = fired(cfg, rows([50, 50, 50]))[0]
    sentence = explain("t", outcome, cfg)
    # Today: "t rolled back: agreement overall: evidence 0.0 ≥ 0.04 over 2 windows ...".
    assert "evidence 0.0 ≥ 0.04" not in sentence, sentence


@pytest.mark.parametrize(("h", "cap"), [("0.9", "0.3"), ("1.8", "0.6"), ("1", "0.1"), ("3", "0.3")])
def test_full_windows_fire_after_exactly_ceil_h_over_cap(h: str, cap: str) -> None:
    expected = math.ceil(Fraction(h) / Fraction(cap))
    heavy = [CellWindow(i, 0, 10_000) for i in range(expected + 5)]
    firing = capped_cusum(heavy, ">=", 0.9, 0.05, float(h), float(cap))
    assert firing is not None
    assert firing.at_window + 1 == expected, (h, cap, firing.at_window + 1, firing.statistic)


@pytest.mark.parametrize(
    "override", [{"cap": 1e-9}, {"h": 1000, "cap": 0.001}, {"cap": 0.01}, {"h": 1000, "cap": 1}]
)
def test_a_rule_that_can_never_fire_is_refused(override: dict[str, Any]) -> None:
    try:
        cfg = config([{**RULE, **override}])
    except ConfigError as refused:
        assert any("cap" in e for e in refused.errors), refused.errors
        return
    rule = cfg.rollback.resolved_rules()[0]
    needed = math.ceil(rule.h / rule.cap)
    # Even windows of nothing but disagreement cannot fire within what an evaluation reads.
    readable = evaluation_windows(cfg)
    heavy = [CellWindow(i, 0, 10_000) for i in range(readable)]
    assert capped_cusum(heavy, ">=", 0.9, 0.05, rule.h, rule.cap) is not None, (
        f"accepted, but needs {needed} windows and an evaluation reads {readable}"
    )


def test_a_tiny_cap_does_not_overflow_or_hang() -> None:
    # What held: a tiny cap only makes the sum slow; nothing overflows or takes long.
    heavy = [CellWindow(i, 0, 10**9) for i in range(10_000)]
    assert capped_cusum(heavy, ">=", 0.9, 0.05, 5.0, 1e-9) is None
    assert capped_cusum(heavy, ">=", 0.9, 0.05, 1000.0, 0.1) is not None


def test_a_low_threshold_rule_with_the_default_min_effect_still_fires() -> None:
    # `edge_share >= 0.03`-like rule (any '>=' with threshold < min_effect): 1% observed,
    # a clear breach, across 100 windows of 10,000 pairs each.
    cfg = config([{**RULE, "threshold": 0.03}])
    # 0.03 cannot fall by the default 0.05: the CUSUM looks for half the room, 0.015.
    assert cfg.rollback.resolved_rules()[0].min_effect == pytest.approx(0.015)
    outcomes = fired(cfg, rows([100] * 100, pairs=10_000))
    assert outcomes, "1% agreement against '>= 0.03' never fired"


def test_a_min_effect_past_the_rate_range_is_refused_or_still_detects() -> None:
    try:
        cfg = config([{**RULE, "min_effect": 0.95}])
    except ConfigError as refused:
        assert any("min_effect" in e for e in refused.errors), refused.errors
        return
    assert fired(cfg, rows([50] * 100)), "50% agreement against >= 0.90 never fired"


def test_a_high_threshold_rate_rule_still_fires() -> None:
    cfg = config([{"metric": "agreement", "op": "<=", "threshold": 0.97}])
    rule = cfg.rollback.resolved_rules()[0]
    assert rule.min_effect == pytest.approx(0.015)
    windows = [CellWindow(i, 99, 100) for i in range(200)]
    assert capped_cusum(windows, "<=", 0.97, rule.min_effect, rule.h, rule.cap) is not None


def test_a_nan_window_neither_adds_nor_erases_evidence() -> None:
    windows = [CellWindow(0, 0, 100), CellWindow(1, float("nan"), 100), CellWindow(2, 0, 100)]
    steps = cusum_steps(windows, ">=", 0.9, 0.05, 2.0)
    assert steps[1].total == 2.0, steps
    assert steps[2].total == 4.0, steps


def test_a_nan_label_window_does_not_delay_the_firing() -> None:
    cfg = config([{"metric": "route_acc", "op": ">=", "threshold": 0.95}])
    labelled = [
        (0, {"estimate": 0.5, "n_effective": 200.0, "failure_classes": {}}),
        (1, {"estimate": float("nan"), "n_effective": 200.0, "failure_classes": {}}),
        (2, {"estimate": 0.5, "n_effective": 200.0, "failure_classes": {}}),
        (3, {"estimate": 0.5, "n_effective": 200.0, "failure_classes": {}}),
        (4, {"estimate": 0.5, "n_effective": 200.0, "failure_classes": {}}),
    ]
    outcome = fired(cfg, [], labelled)[0]
    assert outcome.firing is not None
    views = [step_view(s, cfg, "route_acc") for s in outcome.firing.steps]
    json.dumps(views, allow_nan=False)
    # And the NaN window did not erase the evidence of window 0: it fires at window 3.
    assert outcome.firing.at_window == 3


# --- what held ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("h", "cap"), [(6.0, 2.0), (0.3, 0.1), (5.0, 2.0), (1000.0, 999.0), (1e-300, 5e-301)]
)
def test_one_window_never_fires_and_exact_multiples_fire_on_time(h: float, cap: float) -> None:
    heavy = [CellWindow(i, 0, 10**9) for i in range(10)]
    firing = capped_cusum(heavy, ">=", 0.9, 0.05, h, cap)
    assert firing is not None and firing.at_window >= 1
    assert firing.at_window + 1 == math.ceil(Fraction(str(h)) / Fraction(str(cap)))


@pytest.mark.parametrize(
    "window",
    [
        CellWindow(0, 0, 10**15),
        CellWindow(0, 10**15, 10**15),
        CellWindow(0, 0, 0),
        CellWindow(0, 5, 2),  # num > den
        CellWindow(0, 0.3, 0.7),  # fractional label counts
        CellWindow(0, 0, float("inf")),
    ],
)
@pytest.mark.parametrize("op", [">=", "<="])
def test_one_window_of_any_counts_never_fires(window: CellWindow, op: Any) -> None:
    for threshold in (0.0, 1e-9, 0.02, 0.5, 0.9, 1.0):
        assert capped_cusum([window], op, threshold, 0.05, 5.0, 2.0) is None
        assert should_rollback([window], [], op=op, threshold=threshold, confidence=0.8) is None


@pytest.mark.parametrize("threshold", [0.0, 1.0])
@pytest.mark.parametrize("op", [">=", "<="])
def test_thresholds_at_the_ends_give_finite_weights(threshold: float, op: Any) -> None:
    windows = [CellWindow(i, n, 100) for i, n in enumerate([0, 100, 50, 0, 100])]
    for step in cusum_steps(windows, op, threshold, 0.05, 2.0):
        assert math.isfinite(step.raw) and math.isfinite(step.total)
    # A rule no rate can breach (>= 0, <= 1) never fires.
    unbreakable = (op == ">=" and threshold == 0.0) or (op == "<=" and threshold == 1.0)
    if unbreakable:
        assert capped_cusum(windows * 10, op, threshold, 0.05, 5.0, 2.0) is None


@pytest.mark.parametrize(
    ("rule", "names"),
    [
        ({"cap": 5}, ("cap (5)", "h (5, the default)")),
        ({"cap": 2, "h": 1.5}, ("cap (2)", "h (1.5)")),
        ({"cap": -1}, ("rollback.rules.0.cap",)),
        ({"h": 0}, ("rollback.rules.0.h",)),
        ({"h": 1001}, ("rollback.rules.0.h",)),
        ({"cap": float("nan")}, ("rollback.rules.0.cap",)),
        ({"h": float("inf")}, ("rollback.rules.0.h",)),
        ({"min_effect": 0}, ("rollback.rules.0.min_effect",)),
        ({"min_effect": -0.05}, ("rollback.rules.0.min_effect",)),
    ],
)
def test_bad_h_cap_min_effect_are_refused_naming_the_field(
    rule: dict[str, Any], names: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as refused:
        config([{**RULE, **rule}])
    text = "; ".join(refused.value.errors)
    assert all(n in text for n in names), text
    assert "rollback.rules.0" in text


def test_a_small_h_without_a_cap_gets_half_and_never_fires_on_one_window() -> None:
    for h in (1e-6, 0.5, 2.0):
        rule = config([{**RULE, "h": h}]).rollback.resolved_rules()[0]
        assert rule.cap == h / 2
        assert fired(config([{**RULE, "h": h}]), rows([0])) == []
        assert fired(config([{**RULE, "h": h}]), rows([0, 0]))


def test_windows_with_no_data_inside_a_run_add_nothing_and_read_no_data() -> None:
    cfg = config([RULE])
    windows = [
        (0, {"2048+": {"n_pairs": 100, "n_agree": 50}}),
        (1, {}),
        (2, {"2048+": {"n_pairs": 0, "n_agree": 0}}),
        (3, {"2048+": {"n_pairs": 100, "n_agree": 50}}),
        (4, {"2048+": {"n_pairs": 100, "n_agree": 50}}),
    ]
    outcome = [o for o in fired(cfg, windows) if o.cell == "all"][0]
    assert outcome.firing is not None and outcome.firing.at_window == 4
    steps = outcome.firing.steps
    assert [s.counted for s in steps] == [2.0, 0.0, 0.0, 2.0, 2.0]
    views = [step_view(s, cfg, "agreement") for s in steps]
    assert views[1]["estimate"] is None
    json.dumps(views, allow_nan=False)
    assert "50%, no data, no data, 50%, 50% vs 0.90" in explain("t", outcome, cfg)


def test_a_long_sparse_run_keeps_the_sentence_short() -> None:
    # 400 sparse windows of 3 pairs, each with 1 disagreement: ~0.29 of evidence each.
    cfg = config([{**RULE, "h": 100, "cap": 1}])
    outcome = fired(cfg, rows([2] * 400, pairs=3))[0]
    assert outcome.firing is not None
    sentence = explain("t", outcome, cfg)
    assert len(outcome.firing.steps) > LISTED and sentence.count("%") == LISTED
    assert "…" in sentence and len(sentence) < 300
    views = [step_view(s, cfg, "agreement") for s in outcome.firing.steps]
    json.dumps(views, allow_nan=False)


def test_a_rate_rule_sentence_reads_its_threshold_and_small_percentages() -> None:
    cfg = config([{"metric": "offload_fail_rate", "op": "<=", "threshold": 0.005}])
    windows = [(w, {"2048+": {"n_edge_attempts": 1000, "n_offload_fails": 80}}) for w in range(4)]
    outcome = fired(cfg, windows)[0]
    sentence = explain("t", outcome, cfg)
    assert sentence.endswith("8%, 8%, 8% vs 0.005."), sentence
    assert "each window counts at most 2" in sentence
    assert notice_sentence("t", outcome, cfg).startswith("t would roll back (rule in notify")


def test_fractional_effective_labels_are_counted_and_shown_rounded() -> None:
    cfg = config([{"metric": "route_acc", "op": ">=", "threshold": 0.95}])
    labelled = [
        (w, {"estimate": 0.6, "n_effective": 37.123456, "failure_classes": {}}) for w in range(5)
    ]
    outcome = fired(cfg, [], labelled)[0]
    assert outcome.firing is not None and outcome.firing.how == "capped_cusum"
    view = step_view(outcome.firing.steps[0], cfg, "route_acc")
    assert view["den"] == 37.123 and view["counts"] == "effective labels"
    json.dumps(view, allow_nan=False)


def test_the_webhook_document_names_the_run_and_its_last_step() -> None:
    cfg = config([RULE])
    outcome = [o for o in fired(cfg, rows([50, 50, 50])) if o.cell == "all"][0]
    assert outcome.firing is not None
    steps = [step_view(s, cfg, "agreement") for s in outcome.firing.steps]
    doc = decision_document(
        {
            "id": 1,
            "task": "t",
            "action": "rollback",
            "actor": "policy",
            "reason": "r",
            "evidence": {"steps": steps, "explanation": explain("t", outcome, cfg)},
        }
    )
    assert doc["evidence"]["windows"] == 3 and doc["evidence"]["last_window"] == steps[-1]
    json.dumps(doc, allow_nan=False)


def test_the_evaluation_is_deterministic_so_a_decision_key_repeats() -> None:
    # The dedupe key is (rule, cell, at_window, stage); a later pass over the same windows
    # plus newer ones must name the same firing window.
    cfg = config([RULE])
    first = fired(cfg, rows([50, 50, 50]))
    later = fired(cfg, rows([50, 50, 50, 50, 20, 95]))
    assert [(o.cell, o.firing.at_window) for o in first] == [
        (o.cell, o.firing.at_window) for o in later
    ]


# --- the HTTP API ------------------------------------------------------------------------


@pytest.fixture
def sqlite_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


YAML_BAD_CAP = b"""
task: hostile
comparator: {kind: label}
rollback:
  rules:
    - {metric: agreement, op: ">=", threshold: 0.9, h: 3, cap: 3}
"""


def test_the_api_refuses_a_cap_not_below_h_naming_both(sqlite_api: Api) -> None:
    for body, kind in (
        (YAML_BAD_CAP, "application/yaml"),
        (
            json.dumps(
                {
                    "task": "hostile",
                    "comparator": {"kind": "label"},
                    "rollback": {"rules": [{**RULE, "cap": 7}]},
                }
            ).encode(),
            "application/json",
        ),
    ):
        response = sqlite_api.client.post(
            "/v1/tasks", content=body, headers={**sqlite_api.headers("admin"), "Content-Type": kind}
        )
        assert response.status_code == 422, response.text
        detail = json.dumps(response.json())
        assert "rollback.rules.0" in detail and "cap (" in detail and "must be below h" in detail


def post_h(api: Api, value: str) -> Any:
    body = YAML_BAD_CAP.replace(b"h: 3, cap: 3", value.encode())
    return api.client.post(
        "/v1/tasks",
        content=body,
        headers={**api.headers("admin"), "Content-Type": "application/yaml"},
    )


def test_the_api_refuses_a_zero_or_negative_h_naming_the_field(sqlite_api: Api) -> None:
    for value in ("h: -1", "h: 0", "cap: -1", "cap: 0", "h: 1001"):
        response = post_h(sqlite_api, value)
        assert response.status_code == 422, (value, response.text)
        assert "rollback.rules.0." + value.split(":")[0] in json.dumps(response.json())


@pytest.mark.parametrize("value", ["h: .nan", "h: .inf", "cap: .inf", "min_effect: .nan"])
def test_the_api_refuses_nan_and_inf_naming_the_field(sqlite_api: Api, value: str) -> None:
    response = post_h(sqlite_api, value)
    assert response.status_code == 422, (value, response.status_code, response.text[:300])
    assert "rollback.rules.0." + value.split(":")[0] in json.dumps(response.json())

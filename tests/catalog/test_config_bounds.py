"""Every duration, count and number of a task config has a bound; the error names the field,
the value and the bound. A typo such as `allowed_lateness_seconds: 1e12` is refused at the
door instead of stopping every pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.catalog.schemas import ConfigError, TaskConfig, parse_config
from tests.conftest import Api

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = {"task": "bounded", "comparator": {"kind": "exact"}}
RULE = {"metric": "agreement", "op": ">=", "threshold": 0.9}
INF = float("inf")

# (override, the field as the error names it, the value past the bound, the bound as named)
OVER: list[tuple[dict[str, Any], str, str]] = [
    ({"allowed_lateness_seconds": 604_801}, "allowed_lateness_seconds", "604800"),
    ({"alerts": {"silence_windows": 1001}}, "alerts.silence_windows", "1000"),
    ({"alerts": {"baseline_windows": 1001}}, "alerts.baseline_windows", "1000"),
    ({"alerts": {"conflict_jump": INF}}, "alerts.conflict_jump", "finite"),
    ({"alerts": {"input_shift": INF}}, "alerts.input_shift", "finite"),
    ({"rollback": {"consecutive_windows": 101}}, "rollback.consecutive_windows", "100"),
    ({"rollback": {"min_samples": 10_000_001}}, "rollback.min_samples", "10000000"),
    ({"rollback": {"max_pool_windows": 1001}}, "rollback.max_pool_windows", "1000"),
    ({"rollback": {"max_span_windows": 100_001}}, "rollback.max_span_windows", "100000"),
    ({"rollback": {"rules": [RULE] * 101}}, "rollback.rules", "at most 100 items"),
    (
        {"rollback": {"rules": [{**RULE, "min_samples": 10_000_001}]}},
        "rollback.rules.0.min_samples",
        "10000000",
    ),
    ({"rollback": {"rules": [{**RULE, "h": 1001}]}}, "rollback.rules.0.h", "1000"),
    ({"rollback": {"rules": [{**RULE, "threshold": INF}]}}, "rollback.rules.0.threshold", "finite"),
    ({"promotion": {"min_windows": 10_001}}, "promotion.min_windows", "10000"),
    (
        {"promotion": {"min_samples_per_bucket": 10_000_001}},
        "promotion.min_samples_per_bucket",
        "10000000",
    ),
    (
        {"promotion": {"canary_steps": list(range(1, 22))}},
        "promotion.canary_steps",
        "at most 20 items",
    ),
    ({"review": {"quota_per_window": 100_001}}, "review.quota_per_window", "100000"),
    ({"review": {"reviewers_per_item": 11}}, "review.reviewers_per_item", "10"),
    (
        {"review": {"route_acc_window_seconds": 30 * 86_400 + 1}},
        "review.route_acc_window_seconds",
        "2592000",
    ),
    (
        {"review": {"route_acc_lateness_seconds": 90 * 86_400 + 1}},
        "review.route_acc_lateness_seconds",
        "7776000",
    ),
    ({"length_buckets": list(range(1, 34))}, "length_buckets", "at most 32 items"),
    ({"length_buckets": [128, 2**31]}, "length_buckets.1", "2147483647"),
    ({"max_input_tokens": 2**31}, "max_input_tokens", "2147483647"),
    (
        {"comparator": {"kind": "label", "labels": [f"l{i}" for i in range(1001)]}},
        "comparator.labels",
        "at most 1000 items",
    ),
    (
        {"comparator": {"kind": "json_fields", "fields": {f"f{i}": "string" for i in range(1001)}}},
        "comparator.fields",
        "at most 1000 items",
    ),
    (
        {"comparator": {"kind": "text_conservation", "length_ratio": [0.7, INF]}},
        "comparator.length_ratio.1",
        "finite",
    ),
    ({"prices": {"edge": {"in": INF}}}, "prices.edge.in", "finite"),
    ({"prices": {"cloud": {"out": 1_000_001}}}, "prices.cloud.out", "1000000"),
    ({"prices": {"cloud": {"out": -0.1}}}, "prices.cloud.out", "greater than or equal to 0"),
    ({"fixed_cost_per_day": INF}, "fixed_cost_per_day", "finite"),
    ({"fixed_cost_per_day": 1e10}, "fixed_cost_per_day", "1000000000"),
    ({"error_cost": float("nan")}, "error_cost", "finite"),
    # 10 s windows with a day of lateness would keep 8,640 windows open, each recomputed at
    # every pass.
    (
        {"window_seconds": 10, "allowed_lateness_seconds": 86_400},
        "allowed_lateness_seconds",
        "at most 20160 with window_seconds 10",
    ),
]


@pytest.mark.parametrize(("override", "field", "bound"), OVER, ids=[o[1] for o in OVER])
def test_a_value_past_its_bound_is_refused_naming_the_field_and_the_bound(
    override: dict[str, Any], field: str, bound: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, **override})
    assert len(caught.value.errors) == 1, caught.value.errors
    error = caught.value.errors[0]
    assert error.startswith(f"{field}: "), error
    assert bound in error, error


def test_the_default_config_every_example_and_values_at_their_bounds_validate() -> None:
    # A guard for the bounds above: none is so tight that a config in use is refused.
    assert parse_config(BASE) == TaskConfig(**BASE)
    examples = sorted((ROOT / "controlplane" / "catalog" / "example_tasks").glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document is not None:
                parse_config(document)
    config = parse_config(
        {
            **BASE,
            "window_seconds": 300,
            "allowed_lateness_seconds": 604_800,
            "alerts": {"silence_windows": 1000, "baseline_windows": 1000},
            "rollback": {
                "consecutive_windows": 100,
                "min_samples": 10_000_000,
                "max_pool_windows": 1000,
                "max_span_windows": 100_000,
                "rules": [{**RULE, "h": 1000, "min_samples": 10_000_000}],
            },
            "promotion": {
                "min_windows": 10_000,
                "min_samples_per_bucket": 10_000_000,
                "canary_steps": list(range(1, 21)),
            },
            "review": {
                "quota_per_window": 100_000,
                "reviewers_per_item": 10,
                "route_acc_window_seconds": 30 * 86_400,
                "route_acc_lateness_seconds": 90 * 86_400,
            },
            "length_buckets": [*range(1, 32), 2**31 - 1],
            "max_input_tokens": 2**31 - 1,
            "fixed_cost_per_day": 1e9,
        }
    )
    assert config.allowed_lateness_seconds == 604_800


def test_a_lateness_of_1e12_is_refused_from_json_yaml_and_the_api(api: Api) -> None:
    from_json = json.loads('{"allowed_lateness_seconds": 1e12}')
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, **from_json})
    assert caught.value.errors == [
        "allowed_lateness_seconds: Input should be less than or equal to 604800 "
        "(got 1000000000000.0)"
    ]
    # YAML reads `1e12` as text and `1.0e+12` as a number: both are refused.
    for text in ("1e12", "1.0e+12", "1e999", ".inf"):
        with pytest.raises(ConfigError, match="^allowed_lateness_seconds: "):
            parse_config({**BASE, **yaml.safe_load(f"allowed_lateness_seconds: {text}")})
    response = api.client.post(
        "/v1/tasks",
        content=b'{"task": "typo", "comparator": {"kind": "exact"}, "allowed_lateness_seconds": 1e12}',
        headers={**api.headers("admin"), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["detail"] == [
        "allowed_lateness_seconds: Input should be less than or equal to 604800 "
        "(got 1000000000000.0)"
    ]


def test_a_task_name_must_match_its_pattern_in_full() -> None:
    # `$` also matches before a trailing newline: the name is matched in full.
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, "task": "abc\n"})
    assert caught.value.errors == [
        "task: must start with a lowercase letter and hold only a-z, 0-9, '_', '.', '-' "
        '(at most 100 characters) (got "abc\\n")'
    ]
    assert parse_config({**BASE, "task": "a" + "b" * 99}).task == "a" + "b" * 99

"""The task configs `shadowplane demo` applies (`demo_config`), per scenario: valid, each
task with the cost rule over a span the demo's minutes hold and its fixed costs itemised;
the canary's cost rule rolls back only where its canary can save (`costly_edge`); every task
keeps its review guidelines, and the canary queues the demo's small regression sample."""

from __future__ import annotations

import yaml

from controlplane.catalog.examples import paths as example_paths
from controlplane.catalog.schemas import TaskConfig
from controlplane.demo import (
    CANARY,
    DEMO_REGRESSION_ITEMS,
    FIXED_COSTS,
    SCENARIOS,
    SPAN_SECONDS,
    demo_config,
)
from controlplane.rollout.flags import derive


def test_every_scenario_gives_valid_configs_with_the_span_rules() -> None:
    examples = {
        raw["task"]: raw for raw in (yaml.safe_load(p.read_text("utf-8")) for p in example_paths())
    }
    assert CANARY in examples
    for scenario in SCENARIOS:
        for task, raw in examples.items():
            config = TaskConfig.model_validate(demo_config(raw, scenario))
            rules = {rule.metric: rule for rule in config.rollback.resolved_rules()}
            cost, shift = rules["net_savings"], rules["input_shift"]
            assert (cost.op, cost.threshold, cost.span_seconds) == (">=", 0, SPAN_SECONDS)
            assert (shift.op, shift.span_seconds) == ("<=", SPAN_SECONDS)
            # A few windows: the rules judge within the demo's minutes.
            assert 2 <= SPAN_SECONDS // config.window_seconds <= 10
            assert config.fixed_costs == FIXED_COSTS
            assert config.fixed_cost_per_day == sum(FIXED_COSTS.values())
            # What reviewers read above each item, as the example wrote it.
            assert config.review.guidelines == raw["review"]["guidelines"]
            if task == CANARY:
                assert config.review.regression_items == DEMO_REGRESSION_ITEMS
            # The example's own rules are kept beside them.
            written = raw.get("rollback", {}).get("rules", [])
            assert {r["metric"] for r in written} <= set(rules)
            flag = derive("canary", 0, config, killed=False)
            if task != CANARY:
                assert cost.mode == "auto_rollback"  # in shadow throughout: notices only
            elif scenario == "costly_edge":
                # Half the sessions on the edge, one answer in ten checked by the cloud: the
                # canary saves money until the edge's cost rises, and the rule rolls back.
                assert cost.mode == "auto_rollback"
                assert flag["shadow_rate"] < 1 and flag["edge_percent"] >= 25
            else:
                # The cloud beside every edge answer: the canary pays both sides by design.
                assert cost.mode == "notify" and flag["shadow_rate"] == 1


def test_the_demo_names_a_bad_scenario_before_starting() -> None:
    from typer.testing import CliRunner

    from controlplane.cli import app

    done = CliRunner().invoke(app, ["demo", "--scenario", "meteor"])
    assert done.exit_code == 1
    assert (
        "scenario: 'meteor' is not one of long_tickets, costly_edge, longer_inputs" in done.output
    )

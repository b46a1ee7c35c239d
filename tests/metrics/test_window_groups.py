"""A window's counts come from its results grouped by their categorical values: the counts
each group adds to (`counts_of`), the packed values the percentiles read, and one small
window of four results aggregated on SQLite and PostgreSQL (whole and in two slices)
against figures worked out by hand below."""

from __future__ import annotations

import struct
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select

from controlplane.db import get_engine, session_scope
from controlplane.metrics import repository
from controlplane.metrics.repository import aggregate_window, counts_of, float8_values
from controlplane.models import Result, Task
from controlplane.rollout.configs import apply_config
from tests.windowdata import T0

NONE = {
    "outcome": None,
    "served": "cloud",
    "degraded": False,
    "edge_ran": False,
    "edge_errored": False,
    "edge_valid": None,
    "repeat_outcome": None,
}


@pytest.mark.parametrize(
    ("group", "counted"),
    [
        (NONE, set()),
        (
            {**NONE, "outcome": "agree", "served": "edge", "edge_ran": True, "edge_valid": True},
            {"n_pairs", "n_agree", "n_served_edge", "n_edge_runs", "n_edge_attempts"},
        ),
        # Not an edge attempt (served by the cloud, not degraded): no offload failure.
        (
            {**NONE, "outcome": "conflict", "edge_ran": True, "edge_errored": True},
            {"n_pairs", "n_conflict", "n_edge_runs", "n_edge_errors", "n_edge_fails"},
        ),
        # An invalid edge output, degraded to the cloud, with an agreeing repeat pair.
        (
            {
                **NONE,
                "outcome": "invalid",
                "degraded": True,
                "edge_ran": True,
                "edge_valid": False,
                "repeat_outcome": "agree",
            },
            {
                "n_invalid",
                "n_edge_runs",
                "n_edge_fails",
                "n_edge_attempts",
                "n_offload_fails",
                "n_degraded",
                "n_repeat_pairs",
                "n_repeat_agree",
            },
        ),
        # An error where the edge did not run counts nothing for the edge.
        (
            {**NONE, "edge_errored": True, "edge_valid": False, "repeat_outcome": "invalid"},
            {"n_repeat_pairs", "n_repeat_invalid"},
        ),
    ],
)
def test_each_group_adds_to_the_counts_its_values_decide(
    group: dict[str, Any], counted: set[str]
) -> None:
    assert set(group) == set(repository.GROUP_KEYS)
    found = counts_of(group)
    assert set(found) == set(repository.COUNTED)
    assert {name for name, yes in found.items() if yes} == counted
    # SQLite may hand booleans back as 0 and 1: the same counts.
    as_ints = {k: int(v) if isinstance(v, bool) else v for k, v in group.items()}
    assert counts_of(as_ints) == found


def test_packed_float8_values_are_read_back_in_order() -> None:
    values = [0.5, -3.25, 1e300, 41.0]
    assert float8_values(struct.pack(">4d", *values)).tolist() == values
    assert float8_values(None).size == 0


PRICES = {"edge": {"in": 1.0, "out": 2.0}, "cloud": {"in": 10.0, "out": 20.0}}


def _result(i: int, seconds: int, tokens: int, **fields: Any) -> dict[str, Any]:
    ts = T0 + timedelta(seconds=seconds)
    row = {
        "request_id": f"g-{i}",
        "ts": ts,
        "received_at": ts,
        "input_tokens": tokens,
        "decision": "edge",
        "served": "cloud",
        "degraded": False,
        "config_version": 1,
        "bucket": "-",
        "comparator": "label",
        "comparator_version": 1,
        "edge_ran": True,
        "cloud_ran": True,
    }
    return {**row, **fields}


ROWS = [
    # 0-99
    _result(
        1, 5, 50, outcome="agree", served="edge", edge_valid=True, edge_latency_ms=10.0,
        edge_output_tokens=4, cloud_latency_ms=100.0, cloud_cost=0.5, cloud_output_tokens=6,
    ),
    _result(
        2, 20, 80, outcome="conflict", edge_valid=True, edge_latency_ms=30.0, edge_cost=0.01,
        cloud_latency_ms=300.0, cloud_output_tokens=10,
    ),
    # 100+
    _result(
        3, 35, 200, degraded=True, edge_error="timeout", cloud_latency_ms=200.0,
        cloud_cost=0.2, repeat_outcome="agree", repeat_cost=0.1,
    ),
    _result(
        4, 50, 300, outcome="invalid", served="edge", edge_valid=False, edge_latency_ms=20.0,
        edge_output_tokens=5, cloud_ran=False, repeat_outcome="invalid",
    ),
]  # fmt: skip

# Worked out by hand from ROWS and PRICES (per 1k tokens):
# edge cost: A (50·1 + 4·2)/1000 = 0.058, B 0.01 reported, C 200·1/1000 = 0.2,
# D (300·1 + 5·2)/1000 = 0.31;
# cloud cost: A 0.5, B (80·10 + 10·20)/1000 = 1.0, C 0.2 + its repeat 0.1, D did not run;
# baseline: A (50·10 + 6·20)/1000 = 0.62, B 1.0, C 2.0, D (300·10 + 5·20)/1000 = 3.1.
EXPECTED: dict[str, dict[str, Any]] = {
    "0-99": {
        "n_results": 2, "n_pairs": 2, "n_agree": 1, "n_conflict": 1, "n_invalid": 0,
        "n_edge_runs": 2, "n_edge_errors": 0, "n_edge_fails": 0, "n_edge_attempts": 1,
        "n_offload_fails": 0, "n_degraded": 0, "n_served_edge": 1, "n_repeat_pairs": 0,
        "n_repeat_agree": 0, "n_repeat_invalid": 0,
        "edge_cost": 0.068, "cloud_cost": 1.5, "baseline_cost": 1.62, "input_tokens_sum": 130.0,
        "edge_latency_ms_p50": 20.0, "cloud_latency_ms_p50": 200.0, "input_tokens_p50": 65.0,
        "edge_ttfb_ms_p50": None,
    },
    "100+": {
        "n_results": 2, "n_pairs": 0, "n_agree": 0, "n_conflict": 0, "n_invalid": 1,
        "n_edge_runs": 2, "n_edge_errors": 1, "n_edge_fails": 2, "n_edge_attempts": 2,
        "n_offload_fails": 2, "n_degraded": 1, "n_served_edge": 1, "n_repeat_pairs": 2,
        "n_repeat_agree": 1, "n_repeat_invalid": 1,
        "edge_cost": 0.51, "cloud_cost": 0.3, "baseline_cost": 5.1, "input_tokens_sum": 500.0,
        "edge_latency_ms_p50": 20.0, "cloud_latency_ms_p50": 200.0, "input_tokens_p50": 250.0,
        "edge_ttfb_ms_p50": None,
    },
    "all": {
        "n_results": 4, "n_pairs": 2, "n_agree": 1, "n_conflict": 1, "n_invalid": 1,
        "n_edge_runs": 4, "n_edge_errors": 1, "n_edge_fails": 2, "n_edge_attempts": 3,
        "n_offload_fails": 2, "n_degraded": 1, "n_served_edge": 2, "n_repeat_pairs": 2,
        "n_repeat_agree": 1, "n_repeat_invalid": 1,
        "edge_cost": 0.578, "cloud_cost": 1.8, "baseline_cost": 6.72, "input_tokens_sum": 630.0,
        # [10, 20, 30]: p95 at rank 1.9 → 20 + 0.9·10; cloud [100, 200, 300]: p99 → 298.
        "edge_latency_ms_p50": 20.0, "edge_latency_ms_p95": 29.0, "cloud_latency_ms_p99": 298.0,
        # [50, 80, 200, 300]: p50 at rank 1.5 → 80 + 0.5·120.
        "input_tokens_p50": 140.0, "n_over_cap": 1,
        # Octave bins from 0-15: 50 in 32-63, 80 in 64-127, 200 in 128-255, 300 in 256-511.
        "input_hist": [0, 0, 1, 1, 1, 1] + [0] * 9,
    },
}  # fmt: skip


def _assert_expected(out: dict[str, dict[str, Any]]) -> None:
    assert set(out) == set(EXPECTED)
    for bucket, want in EXPECTED.items():
        for name, value in want.items():
            got = out[bucket][name]
            where = f"{bucket} {name}"
            if isinstance(value, float):
                assert got == pytest.approx(value, rel=1e-12), where
            else:
                assert got == value, where


def test_a_small_window_gives_the_hand_computed_figures(db_url: str) -> None:
    engine = get_engine(db_url)
    with session_scope(engine) as session:
        apply_config(
            session,
            {"task": "groups", "comparator": {"kind": "label", "labels": ["a", "b"]}},
            actor="test",
        )
        task_id = session.scalar(select(Task.id).where(Task.name == "groups"))
        session.execute(insert(Result), [{"task_id": task_id, **row} for row in ROWS])
    end = T0 + timedelta(seconds=60)
    with session_scope(engine) as session:
        whole = aggregate_window(session, task_id, T0, end, [100], PRICES, max_input_tokens=250)
    _assert_expected(whole)


@pytest.mark.integration
def test_two_slices_on_postgresql_give_the_hand_computed_figures(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = get_engine(pg_url)
    with session_scope(engine) as session:
        apply_config(
            session,
            {"task": "groups", "comparator": {"kind": "label", "labels": ["a", "b"]}},
            actor="test",
        )
        task_id = session.scalar(select(Task.id).where(Task.name == "groups"))
        session.execute(insert(Result), [{"task_id": task_id, **row} for row in ROWS])
    monkeypatch.setattr(repository.os, "cpu_count", lambda: 2)
    end = T0 + timedelta(seconds=60)
    with session_scope(engine) as session:
        sliced = aggregate_window(
            session, task_id, T0, end, [100], PRICES, expected_rows=10**6, max_input_tokens=250
        )
    _assert_expected(sliced)

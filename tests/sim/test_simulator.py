"""The simulator: realistic per-task profiles and scenarios (pure), and `simulate` posting live over HTTP."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import func, select

from controlplane.api import create_app
from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.metrics import lengths
from controlplane.metrics.shift import SpanWindow
from controlplane.models import Result
from controlplane.rollout.spans import net_savings_terms
from controlplane.settings import Settings
from controlplane.sim.profiles import (
    COSTLY_EDGE_DEGRADES,
    COSTLY_EDGE_RAMP_SECONDS,
    EDGE_COST_TOP,
    EDGE_MODEL,
    EDGE_MODEL_FIX,
    LONG_TICKET,
    LONGER_INPUTS,
    costly_edge_ramp,
    generate,
)
from controlplane.sim.runner import Plan
from tests.conftest import Api, make_api
from tests.liveapi import free_port, run_cli

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
LABEL = {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]}
TICKET = {"task": "ticket_classify", "comparator": LABEL}


@functools.cache
def _tickets(scenario: str = "none", edge_model: str = EDGE_MODEL) -> list[dict]:
    """20000 simulated tickets (seed 1), made once per scenario for the tests that read them."""
    return generate(
        "ticket_classify", 20000, seed=1, now=NOW, scenario=scenario, edge_model=edge_model
    )


def _miss_rate(results: list[dict], long: bool) -> float:
    chosen = [
        r
        for r in results
        if (r["input_tokens"] >= LONG_TICKET) == long and r["edge"]["error"] is None
    ]
    misses = sum(
        compare(LABEL, r["edge"]["output"], r["cloud"]["output"]).outcome != "agree" for r in chosen
    )
    return misses / len(chosen)


def test_tickets_have_a_length_mix_and_agreement_falls_with_length() -> None:
    results = _tickets()
    long_share = sum(r["input_tokens"] >= LONG_TICKET for r in results) / len(results)
    assert 0.05 < long_share < 0.15
    assert _miss_rate(results, long=True) > _miss_rate(results, long=False)
    assert all(r["served"] == "cloud" and not r["degraded"] for r in results)  # shadow traffic
    assert all(r["cloud"]["cost"] > 0 and r["edge"]["input_tokens"] > 0 for r in results)


def test_long_tickets_break_only_the_long_bucket() -> None:
    normal, broken = _tickets(), _tickets("long_tickets")
    assert _miss_rate(broken, long=True) > 0.3 > 0.1 > _miss_rate(normal, long=True)
    assert abs(_miss_rate(broken, long=False) - _miss_rate(normal, long=False)) < 0.01


def test_the_fixed_edge_model_misses_long_tickets_no_more_than_short_ones() -> None:
    """Under long_tickets, small-int4@4 misses the long bucket about as often as the short
    one (FIX_TICKET_MISS each), on the same tickets and truths as small-int4@3; the result
    names the model that answered."""
    today, fixed = _tickets("long_tickets"), _tickets("long_tickets", EDGE_MODEL_FIX)
    assert [r["input"] for r in today] == [r["input"] for r in fixed]
    assert [r["cloud"] for r in today] == [r["cloud"] for r in fixed]
    assert {r["edge"]["model"] for r in today} == {EDGE_MODEL}
    assert {r["edge"]["model"] for r in fixed} == {EDGE_MODEL_FIX}
    long, short = _miss_rate(fixed, long=True), _miss_rate(fixed, long=False)
    assert long < 0.04 and short < 0.04 and abs(long - short) < 0.015
    assert _miss_rate(today, long=True) > 0.3
    with pytest.raises(ValueError, match="edge_model"):
        generate("ticket_classify", 1, seed=1, now=NOW, edge_model="small-int4@9")


def test_edge_outage_silence_and_traffic_jump() -> None:
    outage = generate(
        "invoice_extract", 5000, seed=2, now=NOW, scenario="edge_outage", edge_serves=True
    )
    errors = sum(r["edge"]["error"] is not None for r in outage) / len(outage)
    assert 0.35 < errors < 0.45
    # On the serving path an edge error is a degrade to the cloud, with its reason.
    assert all(r["degraded"] and r["served"] == "cloud" for r in outage if r["edge"]["error"])
    assert {r["degrade_reason"] for r in outage if r["degraded"]} >= {"timeout", "exception"}
    assert generate("reply_rewrite", 100, seed=3, now=NOW, scenario="silence") == []
    assert len(generate("reply_rewrite", 100, seed=3, now=NOW, scenario="traffic_jump")) == 500


def _window_of(result: dict, seconds: int) -> int:
    return int((datetime.fromisoformat(result["ts"]) - NOW).total_seconds() // seconds)


def test_costly_edge_raises_the_edge_cost_until_net_savings_turn_negative() -> None:
    """The edge serving every request it is sure of (no cloud beside it), 20 a second for
    two minutes: per 10 s window the edge's reported cost, as a share of what the cloud
    charges for the same requests, rises to EDGE_COST_TOP over the ramp and stays; the
    window's net savings (cloud baseline − paid − 40 a day of fixed costs, prorated) start
    positive and end negative."""
    span, window = 120, 10
    results = generate(
        "ticket_classify",
        20 * span,
        seed=4,
        now=NOW + timedelta(seconds=span),
        span_seconds=span,
        scenario="costly_edge",
        edge_serves=True,
    )
    windows: dict[int, list[dict]] = {}
    for r in results:
        windows.setdefault(_window_of(r, window), []).append(r)
    shares, nets = [], []
    for w, rows in sorted(windows.items()):
        edge = sum(r["edge"]["cost"] for r in rows)
        # The baseline is the cloud's price for every request; the cloud is paid only
        # where the edge degraded to it.
        base = sum(r["cloud"]["cost"] for r in rows)
        cloud = sum(r["cloud"]["cost"] for r in rows if r["degraded"])
        shares.append(edge / base)
        terms = net_savings_terms(
            [SpanWindow(w, len(rows), edge, cloud, base)],
            elapsed_windows=1,
            window_seconds=window,
            fixed_cost_per_day=40.0,
            level=0.95,
        )
        nets.append(terms["net_savings"])
    ramp = int(COSTLY_EDGE_RAMP_SECONDS // window)
    assert shares[0] < 0.1 * EDGE_COST_TOP
    assert all(a < b for a, b in zip(shares[:ramp], shares[1:ramp], strict=False))
    assert all(abs(s - EDGE_COST_TOP) < 0.05 for s in shares[ramp + 1 :])
    assert nets[0] > 0 and all(n < 0 for n in nets[ramp:])


def test_costly_edge_degrades_more_as_it_rises() -> None:
    """The same requests without the scenario degrade on a subset: costly_edge only adds
    unsure answers, about COSTLY_EDGE_DEGRADES of them once the ramp is done."""
    n, span = 12000, 300.0
    plain, costly = (
        generate(
            "invoice_extract",
            n,
            seed=5,
            now=NOW,
            span_seconds=span,
            scenario=scenario,
            edge_serves=True,
        )
        for scenario in ("none", "costly_edge")
    )
    assert all(c["degraded"] for p, c in zip(plain, costly, strict=True) if p["degraded"])
    ramped = n * COSTLY_EDGE_RAMP_SECONDS / span
    after = [
        c["degraded"] and not p["degraded"]
        for i, (p, c) in enumerate(zip(plain, costly, strict=True))
        if i >= ramped
    ]
    extra = sum(after) / len(after)
    assert 0.7 * COSTLY_EDGE_DEGRADES < extra < 1.3 * COSTLY_EDGE_DEGRADES
    assert costly_edge_ramp(0) == 0 and costly_edge_ramp(COSTLY_EDGE_RAMP_SECONDS * 2) == 1


def test_longer_inputs_triples_the_inputs_from_the_switch() -> None:
    """Every task's input lengths, 3x: each quantile, and a population stability index far
    over the input_shift rule's 0.25. The runner's plan switches it on at `after_seconds`."""
    for task in ("ticket_classify", "invoice_extract", "reply_rewrite"):
        before = sorted(r["input_tokens"] for r in generate(task, 4000, seed=6, now=NOW))
        after = sorted(
            r["input_tokens"]
            for r in generate(task, 4000, seed=6, now=NOW, scenario="longer_inputs")
        )
        for q in (0.1, 0.5, 0.9):
            ratio = after[int(q * 4000)] / before[int(q * 4000)]
            assert abs(ratio - LONGER_INPUTS) < 0.15 * LONGER_INPUTS, (task, q, ratio)
        shift = lengths.psi(lengths.histogram(after), lengths.histogram(before))
        assert shift is not None and shift > 1.0, (task, shift)
    plan = Plan("longer_inputs", {"ticket_classify"}, 30.0)
    assert plan.active("ticket_classify", 29.9) == "none"
    assert plan.active("ticket_classify", 30.0) == "longer_inputs"
    assert plan.active("reply_rewrite", 100.0) == "none"
    assert plan.seconds_in(29.0) == 0 and plan.seconds_in(45.0) == 15.0


@pytest.fixture
def live_api(sqlite_url: str) -> Iterator[tuple[str, Api]]:
    for api in make_api(sqlite_url):
        port = free_port()
        app = create_app(Settings(database_url=sqlite_url, tick_seconds=0, log_level="WARNING"))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", api
        server.should_exit = True
        thread.join(timeout=10)


def test_simulate_posts_live_results_at_the_rate_over_http(
    live_api: tuple[str, Api], tmp_path: Path
) -> None:
    base, api = live_api
    from controlplane.keys.service import create_key
    from controlplane.rollout.configs import apply_config

    with session_scope(api.engine) as session:
        apply_config(
            session,
            {"task": "reply_rewrite", "comparator": {"kind": "text_conservation"}},
            actor="test",
        )
        _, key = create_key(session, name="router", scopes=["ingest", "flags:read"], actor="test")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    started = datetime.now(UTC)
    done = run_cli(
        [
            "simulate",
            "--url",
            base,
            "--key",
            key,
            "--task",
            "ticket_classify",
            "--task",
            "reply_rewrite",
            "--rate",
            "25",
            "--duration",
            "3",
            "--scenario",
            "silence",
            "--scenario-task",
            "reply_rewrite",
        ],
        env,
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reply_rewrite: generated 0, accepted 0" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("ticket_classify:"))
    generated = int(line.split("generated ")[1].split(",")[0])
    assert (
        generated > 0 and f"accepted {generated}, duplicates 0, rejected 0, not delivered 0" in line
    )
    with session_scope(api.engine) as session:
        n, first, last = session.execute(
            select(func.count(), func.min(Result.ts), func.max(Result.ts))
        ).one()
    assert n == generated
    # Stamped as they happen, like a router's results.
    assert started - timedelta(seconds=2) <= first <= last <= datetime.now(UTC)


def test_simulate_refuses_a_key_its_routers_could_not_read_flags_with(
    live_api: tuple[str, Api], tmp_path: Path
) -> None:
    """Issue 29: `--key` was "an ingest key", but the simulated routers read their flags
    with it too; without `flags:read` they routed everything to the cloud and the run
    looked fine. Now the help names both scopes and such a key is refused before any
    traffic, naming the scope it lacks."""
    base, api = live_api
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    shown = run_cli(["simulate", "--help"], env, tmp_path)
    assert shown.returncode == 0, shown.stderr
    key_help = " ".join(shown.stdout.split("--key", 1)[1].split("--task", 1)[0].split())
    assert "ingest" in key_help and "flags:read" in key_help, key_help
    argv = ["simulate", "--url", base, "--task", "ticket_classify", "--duration", "1"]
    done = run_cli([*argv, "--key", api.keys["ingest"]], env, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "flags:read" in done.stderr, done.stderr
    with session_scope(api.engine) as session:
        assert session.scalar(select(func.count()).select_from(Result)) == 0
    refused = run_cli([*argv, "--key", "sp_not-a-key"], env, tmp_path)
    assert refused.returncode == 1 and "401" in refused.stderr, refused.stderr


def test_simulate_names_a_bad_scenario(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    done = run_cli(
        [
            "simulate",
            "--key",
            "x",
            "--scenario",
            "meteor",
        ],
        env,
        tmp_path,
    )
    assert done.returncode == 1
    assert (
        "scenario: 'meteor' is not one of none, long_tickets, edge_outage, silence, "
        "traffic_jump, costly_edge, longer_inputs" in done.stderr
    )


def test_the_simulator_keys_on_sticky_by_and_routes_only_what_it_finds_eligible(
    live_api: tuple[str, Api],
) -> None:
    from controlplane.client import sticky_bucket
    from controlplane.keys.service import create_key
    from controlplane.sim.profiles import ELIGIBLE_MAX_TOKENS
    from controlplane.sim.runner import stream

    base, api = live_api
    with session_scope(api.engine) as session:
        _, key = create_key(session, name="router", scopes=["ingest", "flags:read"], actor="test")
    config = {
        **TICKET,
        "sticky_by": "user",
        "promotion": {"canary_steps": [50]},
        "shadow_rate": 0.0,
    }
    assert api.client.post("/v1/tasks", json=config, headers=api.headers()).status_code == 201
    promoted = api.client.post(
        "/v1/tasks/ticket_classify/promote",
        json={"reason": "sim", "force": True},
        headers=api.headers(),
    )
    assert promoted.status_code == 200  # shadow -> canary at 50%, keyed on the user
    totals = stream(base, key, ["ticket_classify"], rate=300, duration=2, flag_stream=False)
    t = totals["ticket_classify"]
    assert t.accepted == t.generated > 0 and t.dropped == 0 and not t.rejected, t.errors
    with session_scope(api.engine) as session:
        rows = session.execute(
            select(
                Result.session_id,
                Result.user_id,
                Result.input_tokens,
                Result.decision,
                Result.served,
                Result.degraded,
                Result.edge_ran,
                Result.cloud_ran,
            )
        ).all()
    assert len(rows) == t.generated
    by_user_differs = 0
    for r in rows:
        eligible = r.input_tokens <= ELIGIBLE_MAX_TOKENS
        assert r.decision == ("edge" if eligible else "cloud")
        in_canary = sticky_bucket("ticket_classify", r.user_id) < 50  # type: ignore[operator]
        edge_on_path = r.served == "edge" or r.degraded
        assert edge_on_path == (eligible and in_canary), r
        assert r.edge_ran == edge_on_path and r.cloud_ran == (not edge_on_path or r.degraded)
        session_in = sticky_bucket("ticket_classify", r.session_id) < 50  # type: ignore[operator]
        by_user_differs += session_in != in_canary
    assert by_user_differs > 0  # the session would have routed some of them otherwise
    assert any(not r.input_tokens <= ELIGIBLE_MAX_TOKENS for r in rows)


def test_the_simulator_serves_the_edge_where_the_flag_says(live_api: tuple[str, Api]) -> None:
    from controlplane.keys.service import create_key
    from controlplane.sim.runner import stream

    base, api = live_api
    with session_scope(api.engine) as session:
        _, key = create_key(session, name="router", scopes=["ingest", "flags:read"], actor="test")
    api.client.post(
        "/v1/tasks",
        json={**TICKET, "max_input_tokens": 512, "shadow_rate": 0.0},
        headers=api.headers(),
    )
    for _ in range(3):  # shadow → canary → full, forced (no evidence yet), audited
        assert (
            api.client.post(
                "/v1/tasks/ticket_classify/promote",
                json={"reason": "sim", "force": True},
                headers=api.headers(),
            ).status_code
            == 200
        )
    totals = stream(base, key, ["ticket_classify"], rate=40, duration=2)["ticket_classify"]
    assert totals.accepted == totals.generated > 0 and not totals.errors
    with session_scope(api.engine) as session:
        rows = session.execute(
            select(
                Result.served,
                Result.input_tokens,
                Result.cloud_ran,
                Result.degraded,
                Result.flag_version,
            )
        ).all()
    assert {r.flag_version for r in rows} == {5}  # created, reconfigured, promoted three times
    for served, tokens, cloud_ran, degraded, _ in rows:
        if tokens <= 512 and not degraded:
            assert served == "edge" and not cloud_ran  # shadow_rate 0: no verification side
        elif tokens > 512:
            assert served == "cloud"
    assert any(r.served == "edge" for r in rows) and any(r.served == "cloud" for r in rows)

"""`shadowplane demo --once` on the embedded default: stored, scored results, closed windows,
the cost rule's notices in shadow, a real-time rollback, keys that work, the dashboard
beside the API while it runs, and the loop closed after the rollback: the regression set
labelled through the review API, a run of the next edge model scored on it, the block
lifted without force, the task re-armed and promoted again.

Without `--once` the demo keeps sending traffic after its scenario until Ctrl-C: that phase
is tested on its own (the scenario is the run above), in this process and as a process
stopped by SIGINT."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
from sqlalchemy import create_engine, text

from controlplane.client.tls import default_tls
from controlplane.db import get_engine
from controlplane.demo import (
    CANARY,
    DEMO_REGRESSION_ITEMS,
    FIXED_COSTS,
    EmbeddedApi,
    keep_going,
    register,
)
from controlplane.settings import Settings
from controlplane.sim.profiles import EDGE_MODEL, EDGE_MODEL_FIX, FIX_TICKET_MISS
from controlplane.sim.runner import Plan, Totals
from tests.liveapi import WAIT, free_port, output, start_python, wait_until

DEMO = [
    "demo",
    "--once",
    "--port",
    "0",
    # The regression from the start, at a rate that gives every ten-second window the 20
    # long-ticket pairs a verdict needs: three breaching windows, not six pooled ones after
    # the default 30 s of good traffic.
    "--scenario-after",
    "0",
    "--rate",
    "60",
    # Shadow traffic for 10 s, not 20: at 60/s that still gives every task 600 results and
    # 150 repeat pairs to be graded from (the hidden option is for tests; users get 20 s).
    "--shadow-seconds",
    "10",
]
DASHBOARD_LINE = re.compile(r"^Dashboard on (http://127\.0\.0\.1:\d+): ", re.MULTILINE)


def _health(url: str) -> str | None:
    try:
        return httpx.get(f"{url}/_stcore/health", timeout=2, verify=default_tls()).text
    except httpx.HTTPError:
        return None


def test_demo_stores_scored_results_without_servers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    # The CLI command as its own process (forked from one that imported the app already).
    demo = start_python(
        f"from controlplane.cli import app; app(args={DEMO!r}, prog_name='shadowplane')",
        env,
        tmp_path,
    )

    def dashboard_url() -> str | None:
        if demo.poll() is not None:
            raise AssertionError(f"the demo ended before its dashboard line:\n{output(tmp_path)}")
        found = DASHBOARD_LINE.search(output(tmp_path).stdout)
        return found.group(1) if found else None

    # The dashboard runs beside the API while the demo streams traffic: it answers.
    dashboard = wait_until(dashboard_url, "the demo to print the dashboard's URL", 120, 0.2)
    assert _health(dashboard) == "ok"
    code = demo.wait(300)
    if code is None:
        demo.signal(signal.SIGKILL)
        demo.wait(WAIT)
    done = output(tmp_path)
    done.returncode = code
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # Posted in the shadow and canary phases, then while the next edge model ran.
    posted: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        found = re.match(
            r"  (\w+) +generated (\d+), accepted (\d+), duplicates 0, rejected 0, not delivered 0$",
            line,
        )
        if found:
            before = posted.get(found.group(1), (0, 0))
            posted[found.group(1)] = (
                before[0] + int(found.group(2)),
                before[1] + int(found.group(3)),
            )
    assert set(posted) == {"ticket_classify", "invoice_extract", "reply_rewrite"}, out
    assert all(generated == accepted > 0 for generated, accepted in posted.values())
    # The tasks left in shadow: once their stage holds the cost rule's whole span, the rule
    # says in words and money that offloading costs more than it saves (a notice, never a
    # rollback), at a day's pace too.
    shadow = {"invoice_extract", "reply_rewrite"}
    fixed = sum(FIXED_COSTS.values())
    # Itemised as the evidence keeps them: the largest first.
    largest = sorted(FIXED_COSTS.items(), key=lambda item: -item[1])
    items = ", ".join(f"{k} {v:.2f}" for k, v in largest)
    for task in shadow:
        notice = re.search(
            rf"^\[ *\d+ s\] NOTICE on {task}: {task} would roll back in canary \(in shadow: "
            r"notice only\): offloading cost more than it saved over the last \w+: net savings "
            r"-[\d.,]+ = .*\n    a day at this pace: net savings -[\d.,]+ = savings -?[\d.,]+ "
            rf"− fixed costs {fixed:.2f} \({re.escape(items)}\)$",
            out,
            re.MULTILINE,
        )
        assert notice is not None, (task, out[out.index("Posted over HTTP") :])
    assert "per input-length bucket:" in out and "     2048+  n" in out
    # The real-time rollback: the policy, in words, on the long-ticket bucket.
    assert (
        "DECISION by the policy: ticket_classify rolled back: agreement on inputs of 2048+ tokens"
        in out
    )
    assert "ticket_classify is now in rolled_back" in out
    # Before the canary, each task graded from its shadow traffic: the ticket classifier's
    # long tail makes it `shadow`, said by input length, before the rollback it foretold.
    graded = dict(
        re.findall(
            r"^  (\w+) +(offload|shadow|keep_cloud|forbid|insufficient) +score [\d.-]+ +\S",
            out,
            re.MULTILINE,
        )
    )
    assert set(graded) == {"ticket_classify", "invoice_extract", "reply_rewrite"}, out
    ticket = re.search(
        r"^  ticket_classify +shadow +score ([\d.]+) +input length: P95 is ([\d.]+)x P50",
        out,
        re.MULTILINE,
    )
    assert ticket is not None, out
    forced = out.index("forced past the gate and its grade (the grade says shadow: input length:")
    assert (
        ticket.start() < forced < out.index("DECISION by the policy: ticket_classify rolled back")
    )
    # The invoice's noisy free-text field is named with its grade.
    section = out[out.index("\nGrades from ") : forced]
    invoice = section[section.index("  invoice_extract  ") : section.index("  reply_rewrite  ")]
    assert "note on " in invoice, section
    # Its evidence, window by window: the default detector's run up to h = 5.
    run = re.findall(
        r"^    \S+: \d+/\d+ = [\d.]+%: evidence [-+][\d.]+, counted [-+][\d.]+, sum ([\d.]+)$",
        out,
        re.MULTILINE,
    )
    assert len(run) >= 3 and float(run[-1]) >= 4.99, out
    key = out.strip().splitlines()[-1].removeprefix("KEY=")
    assert key.startswith("sp_")
    # The dashboard's URL and the keys to sign in with, printed; the dashboard stops with
    # the demo.
    keys = dict(re.findall(r"^  (reviewer|admin) key \([^)]*\): +(sp_\S+)$", out, re.MULTILINE))
    assert keys["admin"] == key and keys["reviewer"].startswith("sp_"), out
    assert f"  {dashboard} " in out
    assert _health(dashboard) is None
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        outcomes = dict(
            conn.execute(text("SELECT outcome, count(*) FROM results GROUP BY outcome")).all()
        )
    engine.dispose()
    assert sum(outcomes.values()) == sum(accepted for _, accepted in posted.values())
    assert outcomes["agree"] > sum(outcomes.values()) / 2 and outcomes["conflict"] > 0
    # The in-process scheduler computed the windows, every result in one, and closed every
    # one that got traffic up to the promotion after the re-arm (the demo ends with the last
    # ones open), with a row for every bucket and `all`.
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        windows = conn.execute(
            text(
                "SELECT w.closed_at IS NOT NULL, w.window_start < (SELECT min(d.created_at) "
                "FROM decisions d WHERE d.action = 'rearm'), sum(m.n_results) FROM windows w "
                "JOIN window_metrics m ON m.window_id = w.id JOIN tasks t ON t.id = w.task_id "
                "WHERE t.name = 'ticket_classify' AND m.bucket = 'all' GROUP BY w.id"
            )
        ).all()
        buckets = set(
            conn.execute(
                text(
                    "SELECT t.name, count(*) FROM window_metrics m JOIN tasks t "
                    "ON t.id = m.task_id GROUP BY t.name, m.window_id"
                )
            ).all()
        )
    engine.dispose()
    assert any(before and n for _, before, n in windows)
    assert all(closed for closed, before, n in windows if n and before)
    assert sum(n for *_, n in windows) == posted["ticket_classify"][1]
    # Three boundaries give four buckets and `all`; reply_rewrite has two boundaries.
    assert buckets == {("ticket_classify", 5), ("invoice_extract", 5), ("reply_rewrite", 4)}
    assert _policy_decisions(tmp_path / "shadowplane.db") == [
        ("ticket_classify", "rollback", "2048+")
    ]
    _assert_loop_closed(out, tmp_path / "shadowplane.db", key, keys["reviewer"])
    # The notices are in the outbox (what webhooks send): each with its components, which
    # add up by hand — net = savings − fixed costs, the fixed costs prorated from a day.
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        notices = conn.execute(
            text("SELECT task, document FROM outbox_events WHERE kind = 'notice'")
        ).all()
    engine.dispose()
    costs = {}
    for task, document in notices:
        found = json.loads(document) if isinstance(document, str) else document
        if found["rule"].startswith("net_savings >= 0"):
            costs.setdefault(task, found["evidence"])
    assert set(costs) >= shadow, notices
    for found in costs.values():
        assert found["net_savings"] < 0
        assert abs(found["net_savings"] - (found["savings"] - found["fixed_cost"])) < 1e-5
        share = found["span_seconds"] / 86400
        assert abs(found["fixed_cost"] - fixed * share) < 1e-5
        assert set(found["fixed_costs"]) == set(FIXED_COSTS)
    # The printed key is a real admin key (the API is gone; check it against the stored hash).
    from controlplane.auth.service import hash_key

    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        scopes = conn.execute(
            text("SELECT scopes FROM api_keys WHERE key_hash = :h"), {"h": hash_key(key)}
        ).scalar_one()
    engine.dispose()
    assert "admin" in scopes
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        scopes = conn.execute(
            text("SELECT scopes FROM api_keys WHERE key_hash = :h"),
            {"h": hash_key(keys["reviewer"])},
        ).scalar_one()
    engine.dispose()
    assert "review" in scopes and "admin" not in scopes and "read" not in scopes
    # The reply rewriter's payloads are stored redacted: no customer email or phone left.
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT p.input, p.edge_output, p.cloud_output FROM payloads p "
                "JOIN results r ON r.id = p.result_id JOIN tasks t ON t.id = r.task_id "
                "WHERE t.name = 'reply_rewrite'"
            )
        ).all()
    engine.dispose()
    # The long tail the grade named is in the raw shadow traffic (pandas over the stored
    # results before the promotion): P95 of input tokens at least 3x (the signal) its P50.
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        tokens = pd.read_sql(
            text(
                "SELECT r.input_tokens FROM results r JOIN tasks t ON t.id = r.task_id "
                "WHERE t.name = 'ticket_classify' AND r.ts < (SELECT min(created_at) FROM "
                "decisions WHERE action = 'promote')"
            ),
            conn,
        )["input_tokens"]
        kept = conn.execute(
            text(
                "SELECT g.tier FROM task_grades g JOIN tasks t ON t.id = g.task_id "
                "WHERE t.name = 'ticket_classify'"
            )
        ).scalar_one()
    engine.dispose()
    assert len(tokens) > 150 and tokens.quantile(0.95) >= 3 * tokens.quantile(0.5)
    assert float(ticket.group(2)) >= 3 and kept == "shadow"
    assert stored, "conflicting rewrites keep their payloads"
    joined = " ".join(str(v) for row in stored for v in row)
    assert "@example.com" not in joined and "<EMAIL_1>" in joined


def _policy_decisions(db: Path) -> list[tuple[str, str, str]]:
    rows = _query(
        db,
        "SELECT t.name, d.action, d.bucket FROM decisions d "
        "JOIN tasks t ON t.id = d.task_id WHERE d.actor = 'policy'",
    )
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _query(db: Path, sql: str, **params: object) -> list[tuple[object, ...]]:
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(text(sql), params).all()]
    engine.dispose()
    return rows


def _json(value: object) -> dict[str, object]:
    found = json.loads(value) if isinstance(value, str) else value
    assert isinstance(found, dict)
    return found


def _assert_loop_closed(out: str, db: Path, admin_key: str, review_key: str) -> None:
    """After the rollback, each step printed in order, and the database holding what it
    says: the regression items labelled blind through the review API before any other
    item, the regression layer filled from those labels with no backfill, a stored run of
    the next edge model on it, the block lifted without force, the task re-armed and
    promoted to canary again on a gate that passed."""
    from controlplane.auth.service import hash_key

    steps = [
        r"\] DECISION by the policy: ticket_classify rolled back",
        rf"\] SHIP: the routers now run the next edge model, {EDGE_MODEL_FIX}",
        r"\] REVIEW: (\d+) of (\d+) regression items labelled",
        r"\] REGRESSION SET: (\d+) of (\d+) regression items in ticket_classify's regression "
        r"eval set, from the labels alone \(no backfill\)\. To unblock small-int4@3 it still "
        rf"needs a run of {EDGE_MODEL_FIX} on this set ≥ 95%\.",
        rf"\] RUN {EDGE_MODEL_FIX} on the regression set: (\d+)/(\d+) = ([\d.]+)% ≥ 95%",
        rf"\] UNBLOCK {EDGE_MODEL} on ticket_classify: passed without force",
        r"\] REARM ticket_classify to shadow",
        r"\] GATE on 2 of the 2 shadow windows it reads: passed",
        rf"\] PROMOTE ticket_classify to canary 5% \(flag v\d+, edge model {EDGE_MODEL_FIX}\)",
    ]
    found = []
    for step in steps:
        match = re.search(step, out)
        assert match is not None, (step, out[out.index("DECISION by the policy") :])
        found.append(match)
    assert [m.start() for m in found] == sorted(m.start() for m in found)
    labelled, needed = int(found[2].group(1)), int(found[2].group(2))
    assert 0 < labelled == needed <= DEMO_REGRESSION_ITEMS
    assert (int(found[3].group(1)), int(found[3].group(2))) == (needed, needed)
    correct, n = int(found[4].group(1)), int(found[4].group(2))
    # small-int4@4 misses 2% of tickets whatever their length, and a run misses as many as
    # that share of its items, rounded (40 items: 0.8, so 1 miss: 39/40 = 97.5%).
    assert n == needed and correct == n - round(n * FIX_TICKET_MISS)
    assert float(found[4].group(3)) == round(100 * correct / n, 1)

    names = dict(
        _query(
            db,
            "SELECT key_hash, name FROM api_keys WHERE key_hash IN (:a, :r)",
            a=hash_key(admin_key),
            r=hash_key(review_key),
        )
    )
    admin, reviewer = names[hash_key(admin_key)], names[hash_key(review_key)]
    # The reviewer was handed the rollback's regression items and nothing else first: every
    # item it labelled is one, and every one is labelled.
    labelled_items = _query(
        db,
        "SELECT DISTINCT i.id, i.layer, i.state FROM review_labels l "
        "JOIN review_items i ON i.id = l.item_id WHERE l.reviewer = :r",
        r=reviewer,
    )
    regression_items = _query(
        db,
        "SELECT i.id, i.layer, i.state FROM review_items i JOIN tasks t ON t.id = i.task_id "
        "WHERE t.name = :t AND i.layer = 'regression'",
        t=CANARY,
    )
    assert len(regression_items) == needed
    assert sorted(labelled_items) == sorted(regression_items)
    assert {state for *_, state in regression_items} == {"done"}
    # The regression layer filled from those labels alone: no backfill was asked.
    layer = _query(
        db,
        "SELECT e.item_id FROM eval_items e JOIN tasks t ON t.id = e.task_id "
        "WHERE t.name = :t AND e.layer = 'regression'",
        t=CANARY,
    )
    assert len(layer) == needed
    assert _query(db, "SELECT id FROM audit_log WHERE action = 'evalsets.backfill'") == []
    # The run, stored as printed, on every item of the set.
    runs = _query(
        db,
        "SELECT r.model, r.layer, r.n_items, r.n_correct, r.accuracy, r.actor FROM eval_runs r "
        "JOIN tasks t ON t.id = r.task_id WHERE t.name = :t",
        t=CANARY,
    )
    assert runs == [(EDGE_MODEL_FIX, "regression", n, correct, correct / n, admin)]
    # The block lifted by the admin, audited as not forced.
    blocks = _query(
        db,
        "SELECT b.model, b.lifted_by FROM blocked_models b JOIN tasks t ON t.id = b.task_id "
        "WHERE t.name = :t",
        t=CANARY,
    )
    assert blocks == [(EDGE_MODEL, admin)]
    audited = _query(db, "SELECT actor, task, details FROM audit_log WHERE action = 'task.unblock'")
    assert len(audited) == 1
    actor, task, details = audited[0]
    assert (actor, task) == (admin, CANARY)
    assert _json(details)["model"] == EDGE_MODEL and _json(details)["forced"] is False
    # Re-armed and promoted again by a person, on a gate that passed: the promotion went
    # past the grade at most, never past the gate.
    decisions = _query(
        db,
        "SELECT d.action, d.actor, d.stage_before, d.stage_after, d.evidence FROM decisions d "
        "JOIN tasks t ON t.id = d.task_id WHERE t.name = :t ORDER BY d.id",
        t=CANARY,
    )
    assert [(a, s0, s1) for a, _, s0, s1, _ in decisions] == [
        ("promote", "shadow", "canary"),
        ("rollback", "canary", "rolled_back"),
        ("rearm", "rolled_back", "shadow"),
        ("promote", "shadow", "canary"),
    ]
    assert {actor for _, actor, *_ in decisions[2:]} == {admin}
    again = _json(decisions[-1][4])
    gate = again["gate"]
    assert isinstance(gate, dict) and gate["passed"] is True
    assert "gate" not in (again.get("forced_past") or {})
    stage = _query(
        db,
        "SELECT t.stage, f.document FROM tasks t JOIN flags f ON f.task_id = t.id "
        "WHERE t.name = :t",
        t=CANARY,
    )
    assert stage[0][0] == "canary" and _json(stage[0][1])["edge_percent"] == 5


# --- after the scenario: traffic until Ctrl-C ---------------------------------------------

# The steady phase's line now and then: results sent, results accepted, where to look.
STILL_SENDING = re.compile(
    r"^\[ *\d+ s\] still sending: ([\d,]+) results since the scenario \(([\d,]+) accepted\); (.+)$"
)


def _stored(url: str) -> int:
    with get_engine(url).connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM results")).scalar_one())


def _closed_windows(base: str, key: str, task: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{base}/v1/tasks/{task}/windows",
        params={"bucket": "all"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
        verify=default_tls(),
    )
    answer.raise_for_status()
    return [w for w in answer.json()["windows"] if w["closed"] and w["n_results"]]


def test_steady_traffic_keeps_results_arriving_and_windows_closing_with_figures(
    sqlite_url: str,
) -> None:
    # The demo's tasks and keys; windows closed as soon as they end (the demo waits 5 s).
    tasks, keys = register(
        get_engine(sqlite_url),
        "long_tickets",
        {"window_seconds": 10, "allowed_lateness_seconds": 0},
    )
    api = EmbeddedApi(Settings(database_url=sqlite_url), free_port())
    assert api.start()
    stop = threading.Event()
    lines: list[str] = []
    sent: dict[str, Totals] = {}

    def traffic() -> None:
        sent.update(
            keep_going(
                api.base,
                keys["router"],
                tasks,
                rate=10,
                plan=Plan(),
                stop=stop,
                where="dashboard http://dashboard.example",
                clock=time.monotonic,
                say=lines.append,
                every=1.0,
            )
        )

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        # Every task's window closes with figures, and results keep arriving after it.
        for task in tasks:
            wait_until(
                lambda task=task: _closed_windows(api.base, keys["admin"], task),
                f"a closed window of {task} with results",
                30,
                0.5,
            )
        arrived = _stored(sqlite_url)
        wait_until(lambda: _stored(sqlite_url) > arrived, "more results after the windows", 10, 0.2)
    finally:
        stop.set()
        sender.join(WAIT)
    try:
        for task in tasks:
            for window in _closed_windows(api.base, keys["admin"], task):
                assert window["agreement"] is not None and window["n_pairs"] > 0, window
    finally:
        api.stop()
    assert not sender.is_alive()
    # Everything sent was stored, and the lines now and then counted it as it went.
    assert set(sent) == set(tasks)
    generated = sum(t.generated for t in sent.values())
    assert sum(t.accepted for t in sent.values()) == generated == _stored(sqlite_url) > 0
    counts = [STILL_SENDING.match(line) for line in lines]
    assert counts and all(counts), lines
    said = [int(m.group(1).replace(",", "")) for m in counts if m]
    assert said == sorted(said) and 0 < said[-1] <= generated
    assert {m.group(3) for m in counts if m} == {"dashboard http://dashboard.example"}


def test_ctrl_c_after_the_scenario_stops_the_demo_cleanly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    # The steady phase alone (the scenario is the --once run above), in a process of its own
    # that takes SIGINT as Python started from a terminal does (the forker's children take
    # it as SIG_DFL, which would end them at once). Its dashboard on any free port: the
    # --once run's, started at the same moment on another worker, would find 8501 free too,
    # and the second Streamlit to bind it would fail.
    demo = start_python(
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import controlplane.demo\n"
        "controlplane.demo.DASHBOARD_PORT = 0\n"
        "controlplane.demo.run_demo(0, 10, 0, False, 0, steady_only=True)\n",
        env,
        tmp_path,
    )
    database = f"sqlite:///{tmp_path / 'shadowplane.db'}"

    def sending() -> bool:
        if demo.poll() is not None:
            raise AssertionError(f"the demo ended before Ctrl-C:\n{output(tmp_path)}")
        out = output(tmp_path).stdout
        return "The demo keeps going until Ctrl-C" in out and _stored(database) > 0

    try:
        wait_until(sending, "the demo to send steady traffic", 120, 0.2)
        out = output(tmp_path).stdout
        api = re.search(r"^API on (http://127\.0\.0\.1:\d+) ", out, re.MULTILINE)
        dashboard = DASHBOARD_LINE.search(out)
        assert api and dashboard, out
        assert _health(dashboard.group(1)) == "ok"
        demo.signal(signal.SIGINT)
        code = demo.wait(WAIT)
    finally:
        if demo.poll() is None:
            demo.signal(signal.SIGKILL)
            demo.wait(WAIT)
    done = output(tmp_path)
    # Ctrl-C is the demo's usual end once its scenario has run: exit 0, no traceback.
    assert code == 0, done
    assert "Traceback" not in done.stderr, done.stderr
    stopped = re.search(
        r"^Stopped; ([\d,]+) results of steady traffic stored\.$", done.stdout, re.M
    )
    assert stopped is not None, done.stdout
    # What was sent before Ctrl-C was delivered before the API stopped; both servers are gone.
    assert int(stopped.group(1).replace(",", "")) == _stored(database) > 0
    assert _health(dashboard.group(1)) is None
    try:
        httpx.get(f"{api.group(1)}/healthz", timeout=2, verify=default_tls())
        answered = True
    except httpx.HTTPError:
        answered = False
    assert not answered

"""`shadowplane demo`: the whole system on the embedded default, for a first look.

Migrates the SQLite file, registers the example tasks with ten-second windows, starts the
API in this process (its in-process scheduler computes and closes windows, then runs the
rollout rules) and the dashboard beside it (`shadowplane dashboard`, its own process on
the same database, stopped when the demo ends), streams shadow traffic long enough to
grade every task from it (with the cloud asked a second time on a share of requests) and
prints the three grades and why, promotes the ticket classifier to canary by hand past
its grade, streams simulated traffic routed by the flags, switches the scenario on (by
default the long-ticket regression; `costly_edge`, `longer_inputs`), and prints the windows
filling up, the notices of the cost rule, and the rollback when the policy makes it — then
where to look and keys to look with. The clock is real: nothing is faked.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import typer
import uvicorn
import yaml
from sqlalchemy import select
from sqlalchemy.engine import Engine

from controlplane.api import create_app
from controlplane.catalog.schemas import DEFAULT_RULES, SPAN_METRICS
from controlplane.catalog.service import task_runtimes
from controlplane.db import get_engine, session_scope
from controlplane.grading.service import grade_task
from controlplane.ingest.repository import conflict_ids
from controlplane.keys.service import create_key
from controlplane.migrate import ROOT, upgrade
from controlplane.models import OutboxEvent
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings, get_settings
from controlplane.sim.profiles import (
    COSTLY_EDGE_DEGRADES,
    COSTLY_EDGE_RAMP_SECONDS,
    EDGE_COST_TOP,
    LONGER_INPUTS,
)
from controlplane.sim.runner import Plan, Totals, stream

EXAMPLE_TASKS = ROOT / "examples" / "tasks"


def _free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


DEMO_WINDOW = {"window_seconds": 10, "allowed_lateness_seconds": 5}
# Grading needs a day of traffic, 1,000 results and 100 repeat pairs by default; the demo
# grades from its first seconds of shadow traffic instead, and asks the cloud a second
# time on a quarter of requests (production: 1%) so the repeat pairs come quickly.
DEMO_GRADING = {"repeat_rate": 0.25, "min_results": 150, "min_repeat_pairs": 20, "min_days": 0}
# The shadow phase before the canary: at least this long, and long enough for about this
# many repeat pairs per task at the chosen rate (so the cloud's self-agreement is measured
# closely enough to grade determinism).
SHADOW_SECONDS = 20.0
SHADOW_REPEAT_PAIRS = 150
# The canary's rules judge each window on 20 pairs or more, so a rollback can happen in
# about three windows; production keeps the default 200.
DEMO_ROLLBACK = {"min_samples": 20}
CANARY = "ticket_classify"
# What goes wrong on the canary (`--scenario`): the edge fails long tickets (the default),
# the edge's cost rises until offloading costs more than it saves, or inputs grow 3×.
SCENARIOS = ("long_tickets", "costly_edge", "longer_inputs")
# The two rules judged over a trailing span, over six ten-second windows here so they judge
# within the demo's minutes (production: net_savings a day, input_shift two hours).
SPAN_SECONDS = 60
NET_SAVINGS = {"metric": "net_savings", "op": ">=", "threshold": 0, "span": SPAN_SECONDS}
INPUT_SHIFT = {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": SPAN_SECONDS}
# Every task's fixed costs per day, itemised.
FIXED_COSTS = {"routing": 10, "gpu": 25, "ops": 5}
# With `costly_edge`, the canary serves half the sessions from the edge and checks one edge
# answer in ten against the cloud (the shadow runs the edge on one request in ten), so it
# saves more than the cloud's second answers for grading cost, until the edge's cost rises.
COSTLY_EDGE_SHADOW_RATE = 0.1
COSTLY_EDGE_CANARY_PERCENT = 50
# How often the in-process scheduler computes and closes windows: a window closes within a
# second of its lateness running out, and a rollback shows within a second of its verdict.
DEMO_TICK_SECONDS = 1.0
# The dashboard's port (a free one if taken), and how long it may take to start answering.
DASHBOARD_PORT = 8501
DASHBOARD_START_SECONDS = 30.0


def demo_config(raw: dict[str, Any], scenario: str) -> dict[str, Any]:
    """An example task's config as the demo applies it: ten-second windows, grading from
    the first seconds, every task's fixed costs itemised and the two span rules over
    SPAN_SECONDS; the canary task judges on fewer samples. Its net_savings rule notifies
    instead of rolling back unless the scenario is `costly_edge`: with shadow_rate 1.0 the
    cloud answers beside every edge answer in canary too, so the canary pays for both and
    cannot save; `costly_edge` checks one answer in ten instead, on a canary of half the
    sessions."""
    config = {**raw, **DEMO_WINDOW, "fixed_costs": FIXED_COSTS}
    config["grading"] = {**raw.get("grading", {}), **DEMO_GRADING}
    rollback = dict(raw.get("rollback", {}))
    written = rollback.get("rules") or [
        rule.model_dump(mode="json", by_alias=True, exclude_defaults=True) for rule in DEFAULT_RULES
    ]
    cost_rule = NET_SAVINGS
    if raw["task"] == CANARY:
        rollback.update(DEMO_ROLLBACK)
        if scenario == "costly_edge":
            config["shadow_rate"] = COSTLY_EDGE_SHADOW_RATE
            config["promotion"] = {
                **raw.get("promotion", {}),
                "canary_steps": [COSTLY_EDGE_CANARY_PERCENT],
            }
        else:
            cost_rule = {**NET_SAVINGS, "mode": "notify"}
    rules = [r for r in written if r["metric"] not in SPAN_METRICS]
    rollback["rules"] = [*rules, cost_rule, INPUT_SHIFT]
    config["rollback"] = rollback
    return config


class Dashboard:
    """`shadowplane dashboard` as a process of its own beside the demo's API, on the same
    database; its output goes to a log file, so it never interleaves with the demo's."""

    def __init__(self, database_url: str, log_path: Path) -> None:
        self.port = _free_port(DASHBOARD_PORT)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.ready = False
        self._log: IO[bytes] = log_path.open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "dashboard", "--port", str(self.port)],
            env={**os.environ, "SHADOWPLANE_DATABASE_URL": database_url},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = DASHBOARD_START_SECONDS) -> bool:
        """Whether it answers its health check within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/_stcore/health", timeout=1).text == "ok":
                    self.ready = True
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


def run_demo(
    port: int,
    rate: float,
    duration: float,
    once: bool,
    scenario_after: float,
    scenario: str = "long_tickets",
) -> None:
    settings = get_settings()
    upgrade(settings.database_url)
    # Started first: it imports Streamlit while the API starts; stopped however the demo ends
    # (Ctrl-C, an error, or a SIGTERM, which would otherwise end this process at once and
    # leave the dashboard running without it).
    dashboard = Dashboard(settings.database_url, Path("dashboard.log").resolve())
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main else None
    try:
        _demo(settings, dashboard, port, rate, duration, once, scenario_after, scenario)
    finally:
        dashboard.stop()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _demo(
    settings: Settings,
    dashboard: Dashboard,
    port: int,
    rate: float,
    duration: float,
    once: bool,
    scenario_after: float,
    scenario: str,
) -> None:
    engine = get_engine(settings.database_url)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with session_scope(engine) as session:
        applied = []
        for path in sorted(EXAMPLE_TASKS.glob("*.yaml")):
            # Ten-second windows, so they fill and close while you watch.
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            applied.append(apply_config(session, demo_config(raw, scenario), actor="demo"))
        _, admin_key = create_key(
            session, name=f"demo-admin-{stamp}", scopes=["admin"], actor="demo"
        )
        _, review_key = create_key(
            session, name=f"demo-reviewer-{stamp}", scopes=["review"], actor="demo"
        )
        _, router_key = create_key(
            session, name=f"demo-router-{stamp}", scopes=["ingest", "flags:read"], actor="demo"
        )
    tasks = [a.task for a in applied]

    port = _free_port(port)
    # Request log lines would bury the summary; the demo's API logs warnings only. The
    # in-process scheduler computes and closes windows every second (no Redis, no Celery).
    app = create_app(
        settings.model_copy(update={"log_level": "WARNING", "tick_seconds": DEMO_TICK_SECONDS})
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise typer.Exit(1)
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    typer.echo(f"API on {base} (database: {settings.database_url})")
    keys = (
        f"  reviewer key (Review, Eval sets; blind): {review_key}\n"
        f"  admin key (every page; acts):            {admin_key}"
    )
    if dashboard.wait_ready():
        typer.echo(
            f"Dashboard on {dashboard.url}: Overview and Task show the rollback as it happens. "
            f"Sign in with a key:\n{keys}"
        )
    else:
        typer.echo(f"The dashboard did not start; its log: {dashboard.log_path}")
    reader = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"})
    started = datetime.now(UTC)
    last_print = [0.0]
    stop = threading.Event()
    seen: set[int] = set()
    noticed = _Notices(engine)

    def show(elapsed: float, _totals: dict[str, Totals]) -> None:
        if elapsed - last_print[0] >= 5:
            last_print[0] = elapsed
            _print_progress(reader, tasks, started, elapsed)
        noticed.print_new(elapsed)
        for decision in reader.get("/v1/decisions").json()["decisions"][::-1]:
            if decision["id"] in seen:
                continue
            seen.add(decision["id"])
            if decision["actor"] == "policy":
                _print_decision(decision, elapsed)
                if once and decision["action"] == "rollback":
                    stop.set()

    seen.update(d["id"] for d in reader.get("/v1/decisions").json()["decisions"])

    # Shadow first: every task's traffic, the edge only recorded, until each can be graded.
    shadow_seconds = max(
        SHADOW_SECONDS,
        SHADOW_REPEAT_PAIRS / (rate * DEMO_GRADING["repeat_rate"]),
    )
    typer.echo(
        f"Shadow traffic first: {rate:g} results/s per task for {shadow_seconds:.0f} s, every "
        f"task in shadow, the cloud asked a second time on {DEMO_GRADING['repeat_rate']:.0%} "
        "of requests (its own noise floor). The demo grades from these seconds: its config "
        f"lowers grading's minimums to {DEMO_GRADING['min_results']} results, "
        f"{DEMO_GRADING['min_repeat_pairs']} repeat pairs and {DEMO_GRADING['min_days']} days "
        "(production: 1,000, 100 and 1)."
    )
    items = ", ".join(f"{k} {v:g}" for k, v in FIXED_COSTS.items())
    typer.echo(
        f"Every task has the cost rule net_savings >= 0 over the last {SPAN_SECONDS} s (six "
        f"windows, so it judges within the demo; production: a day), with fixed costs of "
        f"{sum(FIXED_COSTS.values()):g} a day ({items}). In shadow the cloud serves every "
        "request and the edge only runs beside it, so offloading costs and saves nothing yet "
        f"(and what is paid includes the cloud's second answers on "
        f"{DEMO_GRADING['repeat_rate']:.0%} of requests): once a task's stage holds a whole "
        "span, the rule says so in a notice (in the outbox, for webhooks), never a rollback "
        "in shadow. The tasks left in shadow show it about a minute in.\n"
    )
    shadow_started = time.monotonic()
    # When the cost notices of the tasks in shadow are due at the latest: a whole span after
    # the first whole window, then its lateness and a few passes of the scheduler.
    notices_due = (
        SPAN_SECONDS + DEMO_WINDOW["window_seconds"] + DEMO_WINDOW["allowed_lateness_seconds"] + 5
    )
    shadow_totals = stream(
        base,
        router_key,
        tasks,
        rate=rate,
        duration=shadow_seconds,
        seed=int(time.time()),
        stop=stop,
        every_second=show,
    )
    _wait_for_windows(reader, tasks, started, shadow_totals)
    with session_scope(engine) as session:
        # Graded now and kept as today's grade, as `shadowplane grade` does.
        grades = {
            task: grade_task(session, task, veto=settings.error_cost_veto, now=datetime.now(UTC))
            for task in tasks
        }
    _print_grades(grades, shadow_seconds)
    canary_grade = grades[CANARY]

    # A person promotes the ticket classifier to canary anyway: forced past the gate and the
    # grade, audited.
    says = f"the grade says {canary_grade['tier']}: {_first_reason(canary_grade)}"
    promoted = reader.post(
        f"/v1/tasks/{CANARY}/promote",
        json={"reason": f"demo: canary anyway ({says})"[:500], "force": True},
    )
    promoted.raise_for_status()
    canary = reader.get(f"/v1/flags/{CANARY}").json()
    beside = (
        "every request"
        if canary["shadow_rate"] >= 1
        else f"{canary['shadow_rate']:.0%} of requests (shadow_rate)"
    )
    typer.echo(
        f"\n{CANARY} promoted to canary by hand, forced past the gate and its grade ({says}); "
        f"audited. Its flag v{canary['version']} serves the edge to sessions in sticky buckets "
        f"under {canary['edge_percent']}% and runs the other side beside {beside}."
    )
    typer.echo(_canary_cost_note(scenario, canary["shadow_rate"]))
    typer.echo(
        f"Simulating {rate:g} results/s per task, routed by the flags, in 10-second windows "
        f"closed 5 s after they end. After {scenario_after:g} s {_scenario_words(scenario)}:\n"
    )
    last_print[0] = 0.0
    canary_started = time.monotonic() - shadow_started
    totals = stream(
        base,
        router_key,
        tasks,
        rate=rate,
        duration=duration,
        plan=Plan(scenario, {CANARY}, scenario_after),
        seed=int(time.time()) + 1,
        stop=stop,
        every_second=lambda elapsed, t: show(elapsed + canary_started, t),
    )
    # Wait (real time) until every window that got traffic has closed: the last one ends,
    # its lateness runs out, the next pass closes it. Looked at five times a second.
    deadline = (
        time.monotonic()
        + DEMO_WINDOW["window_seconds"]
        + DEMO_WINDOW["allowed_lateness_seconds"]
        + 6
    )
    while time.monotonic() < deadline and _open_windows(reader, tasks, started):
        time.sleep(0.2)
    # The tasks left in shadow have their cost notice once their stage holds a whole span
    # and it closes: printed as it comes, or waited for here (a few seconds at most).
    shadow = set(tasks) - {CANARY}
    deadline = time.monotonic() + max(0.0, notices_due - (time.monotonic() - shadow_started))
    while not noticed.tasks >= shadow and time.monotonic() < deadline:
        time.sleep(0.2)
        noticed.print_new(time.monotonic() - shadow_started)
    noticed.print_new(time.monotonic() - shadow_started)

    typer.echo("\nPosted over HTTP (shadow and canary phases):")
    for task in tasks:
        t = _sum_totals(shadow_totals[task], totals[task])
        typer.echo(
            f"  {task:<18} generated {t.generated}, accepted {t.accepted}, duplicates {t.duplicates}, "
            f"rejected {t.rejected}, not delivered {t.dropped}"
        )
        for error in t.errors[:3]:
            typer.echo(f"    ! {error}")
    _print_buckets(reader, CANARY, started)
    if reader.get(f"/v1/tasks/{CANARY}").json()["needs_regrade"]:
        _refused_until_regraded(reader)
    stage = reader.get(f"/v1/tasks/{CANARY}").json()["stage"]
    flag = reader.get(f"/v1/flags/{CANARY}").json()
    if stage != "shadow":
        _print_stage(stage, flag, duration)
    with session_scope(engine) as session:
        runtimes = task_runtimes(session, set(tasks))
        conflicts = {task: conflict_ids(session, runtimes[task].id, limit=1) for task in tasks}
    examples = "\n".join(
        f'  curl -H "Authorization: Bearer $KEY" {base}/v1/results/{task}/{ids[0]}   (a conflict)'
        for task, ids in conflicts.items()
        if ids
    )
    where = (
        f"  database file: {Path(settings.database_url.removeprefix('sqlite:///')).resolve()}"
        if settings.is_sqlite
        else ""
    )
    board = (
        f"  {dashboard.url:<47} the dashboard: sign in with a key below\n"
        if dashboard.ready
        else ""
    )
    typer.echo(f"""
Where to look (keys below, shown once):
{board}  {base}/docs                      the API, interactive
  curl -H "Authorization: Bearer $KEY" {base}/v1/tasks/ticket_classify/windows
  curl -H "Authorization: Bearer $KEY" -H "Accept: text/csv" {base}/v1/tasks/ticket_classify/windows
  curl -H "Authorization: Bearer $KEY" {base}/v1/decisions?task={CANARY}   (with evidence)
  curl -H "Authorization: Bearer $KEY" {base}/v1/flags
  curl -H "Authorization: Bearer $KEY" {base}/v1/alerts
  curl -H "Authorization: Bearer $KEY" {base}/metrics
{examples}
{where}
{keys}
KEY={admin_key}""")
    reader.close()
    if once:
        server.should_exit = True
        thread.join(timeout=10)
        return
    typer.echo(
        "\nServing until Ctrl-C (no more simulated traffic; `shadowplane simulate` sends more)."
    )
    try:
        while thread.is_alive():
            thread.join(timeout=0.5)
    except KeyboardInterrupt:
        server.should_exit = True
        thread.join(timeout=10)


def _print_stage(stage: str, flag: dict[str, Any], duration: float) -> None:
    typer.echo(
        f"\n{CANARY} is now in {stage}; its flag v{flag['version']} serves the cloud "
        f"(edge_percent {flag['edge_percent']}) and keeps the edge in shadow. Only a person "
        f"re-arms it (POST /v1/tasks/{CANARY}/rearm), and the edge model it rolled back stays "
        f"blocked from auto-promotion until lifted (POST /v1/tasks/{CANARY}/unblock)."
        if stage == "rolled_back"
        else f"\n{CANARY} is still in {stage}: no rollback within {duration:g} s "
        "(run longer with --duration)."
    )


def _scenario_words(scenario: str) -> str:
    """What the scenario does to the canary, for the line before its traffic."""
    if scenario == "costly_edge":
        return (
            f"the edge's reported cost on {CANARY} rises from nothing to {EDGE_COST_TOP:g}x "
            f"the cloud's price for the same tokens over {COSTLY_EDGE_RAMP_SECONDS:g} s, and up "
            f"to {COSTLY_EDGE_DEGRADES:.1%} more of its answers degrade (the edge and then the "
            "cloud are paid), until offloading costs more than it saves"
        )
    if scenario == "longer_inputs":
        return (
            f"{CANARY}'s inputs grow {LONGER_INPUTS}x longer and stay so: the traffic is no "
            "longer the traffic it was graded and promoted on"
        )
    return f"the edge starts failing on {CANARY}'s long tickets (2048+ tokens) only"


def _canary_cost_note(scenario: str, shadow_rate: float) -> str:
    """Why the canary's cost rule acts as it does in this run."""
    if scenario == "costly_edge":
        return (
            f"Its net_savings rule rolls back: in this run the canary serves "
            f"{COSTLY_EDGE_CANARY_PERCENT}% of sessions from the edge and the cloud checks only "
            f"{shadow_rate:.0%} of its answers, so serving from the edge saves more than the "
            "cloud's second answers cost, until the edge's cost rises."
        )
    return (
        f"Its net_savings rule only notifies in this run: with shadow_rate {shadow_rate:.1f} the "
        "cloud also answers every request the edge serves, so the canary pays for both and "
        "costs more than it saves by design; rolling back on that would end the canary before "
        "the story below (scripts/demo --scenario costly_edge: one answer in ten checked, the "
        "rule rolling back)."
    )


class _Notices:
    """The notices the policy leaves (read from the outbox, as webhooks receive them), each
    printed once, and the tasks that have a net_savings notice."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.last = 0
        self.tasks: set[str] = set()

    def print_new(self, elapsed: float) -> None:
        with session_scope(self.engine) as session:
            rows = session.execute(
                select(OutboxEvent.id, OutboxEvent.document)
                .where(OutboxEvent.kind == "notice", OutboxEvent.id > self.last)
                .order_by(OutboxEvent.id)
            ).all()
        for event_id, document in rows:
            self.last = event_id
            _print_notice(document, elapsed)
            if str(document.get("rule", "")).startswith("net_savings"):
                self.tasks.add(str(document.get("task")))


def _print_notice(document: dict[str, Any], elapsed: float) -> None:
    typer.echo(f"\n[{elapsed:4.0f} s] NOTICE on {document['task']}: {document['explanation']}")
    found = document.get("evidence") or {}
    if str(document.get("rule", "")).startswith("net_savings") and found.get("span_seconds"):
        # The span's money at a day's pace: a few seconds of cents read as a day's money.
        day = 86400 / found["span_seconds"]
        items = found.get("fixed_costs") or {}
        itemised = (
            " ("
            + ", ".join(
                f"{k} {v * day:,.2f}" for k, v in sorted(items.items(), key=lambda kv: -kv[1])
            )
            + ")"
            if items
            else ""
        )
        typer.echo(
            f"    a day at this pace: net savings {found['net_savings'] * day:,.2f} = savings "
            f"{found['savings'] * day:,.2f} − fixed costs {found['fixed_cost'] * day:,.2f}"
            f"{itemised}"
        )


def _print_span(found: dict[str, Any], how: str) -> None:
    """The components a span rule's rollback rests on, as its evidence lists them."""
    if how == "net_savings":
        items = found.get("fixed_costs") or {}
        itemised = " (" + ", ".join(f"{k} {v:.4f}" for k, v in items.items()) + ")" if items else ""
        per_1k = found["per_1k"]
        typer.echo(
            f"    over {found['span_seconds']} s ({found['windows']} windows, "
            f"{found['results']:,} results): cloud baseline {found['baseline_cost']:.4f} − paid "
            f"{found['paid']:.4f} (edge {found['edge_cost']:.4f}, cloud "
            f"{found['cloud_cost']:.4f}) = savings {found['savings']:.4f}\n"
            f"    − fixed costs {found['fixed_cost']:.4f}{itemised} = net savings "
            f"{found['net_savings']:.4f}; {found['interval']:.0%} interval "
            f"{found['low']:.4f} to {found['high']:.4f}\n"
            f"    per 1k results: cloud baseline {per_1k['baseline_cost']:.4f}, edge "
            f"{per_1k['edge_cost']:.4f}, cloud {per_1k['cloud_cost']:.4f}, net savings "
            f"{per_1k['net_savings']:.4f}"
        )
        return
    quarters = ", ".join(
        f"{q['psi']:.2f} ({q['results']})"
        for q in found.get("quarters", [])
        if q["psi"] is not None
    )
    held = [
        f"{label}: {now} vs {then}"
        for label, now, then in zip(found["bins"], found["now"], found["baseline"], strict=True)
        if now or then
    ]
    typer.echo(
        f"    over {found['span_seconds']} s ({found['results']:,} results) against "
        f"{found['baseline_source']} ({found['baseline_n']:,} results): index "
        f"{found['psi']:.2f}; quarters (results): {quarters}\n"
        f"    input tokens per bin, now vs baseline: {'; '.join(held)}"
    )


def _refused_until_regraded(reader: httpx.Client) -> None:
    """An input-shift rollback marked the task needs_regrade: re-arm it (a person would)
    and show that promoting it is refused, forced or not, until a re-grade."""
    task = reader.get(f"/v1/tasks/{CANARY}").json()
    typer.echo(
        f"\n{CANARY} needs a re-grade (marked at {task['shifted_at'][11:19]}): its inputs are "
        "no longer what it was graded and promoted on. The demo re-arms it to shadow, as a "
        "person would, and asks to promote it again, forced:"
    )
    reader.post(
        f"/v1/tasks/{CANARY}/rearm", json={"reason": "demo: re-armed after the input shift"}
    ).raise_for_status()
    refused = reader.post(
        f"/v1/tasks/{CANARY}/promote",
        json={"reason": "demo: promote again after the input shift", "force": True},
    )
    detail = refused.json().get("detail")
    typer.echo(
        f"  POST /v1/tasks/{CANARY}/promote (force) -> {refused.status_code} "
        + (
            f"needs_regrade: {detail['needs_regrade']}"
            if isinstance(detail, dict) and "needs_regrade" in detail
            else str(detail)
        )
        + f"\n  {CANARY} stays in shadow, marked, until that grade."
    )


def _print_decision(decision: dict[str, Any], elapsed: float) -> None:
    typer.echo(f"\n[{elapsed:4.0f} s] DECISION by the policy: {decision['reason']}")
    evidence = decision["evidence"]
    if decision["action"] == "needs_regrade":
        return
    if evidence.get("how") in ("net_savings", "input_shift"):
        _print_span(evidence["span"], evidence["how"])
    for s in evidence.get("steps", []):
        rate = "no data" if s["estimate"] is None else f"{s['estimate']:.1%}"
        typer.echo(
            f"    {s['window_start'][11:19]}-{s['window_end'][11:19]}: "
            f"{s['num']}/{s['den']} = {rate}: evidence {s['contribution']:+.2f}, "
            f"counted {s['counted']:+.2f}, sum {s['sum']:.2f}"
        )
    for w in evidence.get("windows", []):
        pooled = f" ({w['windows']} windows pooled)" if w["windows"] > 1 else ""
        typer.echo(
            f"    {w['window_start'][11:19]}-{w['window_end'][11:19]}{pooled}: "
            f"{w['num']}/{w['den']} = {w['estimate']:.1%}, bound {w['bound']:.1%} "
            f"vs {w['threshold']:g} -> {w['verdict']}"
        )
    typer.echo(
        f"    flag v{decision['flag_version_before']} -> v{decision['flag_version_after']}; "
        f"edge models blocked: {', '.join(decision['evidence'].get('models', [])) or 'none'}\n"
    )


def _windows(
    reader: httpx.Client, task: str, since: datetime, bucket: str | None = "all"
) -> list[dict[str, Any]]:
    params = {"since": (since - timedelta(seconds=20)).isoformat()}
    if bucket:
        params["bucket"] = bucket
    response = reader.get(f"/v1/tasks/{task}/windows", params=params)
    response.raise_for_status()
    return list(response.json()["windows"])


def _open_windows(reader: httpx.Client, tasks: list[str], since: datetime) -> bool:
    return any(
        not w["closed"] and w["n_results"] for t in tasks for w in _windows(reader, t, since)
    )


def _pct(value: float | None) -> str:
    return "  -  " if value is None else f"{value:6.1%}"


def _line(w: dict[str, Any]) -> str:
    start = w["window_start"][11:19]
    state = "closed" if w["closed"] else "open  "
    latency = w["edge_latency_ms_p95"]
    cost = w["cost_per_1k"]
    return (
        f"{start} {state} n {w['n_results']:>4}  agreement {_pct(w['agreement'])}  "
        f"conflicts {_pct(w['conflict_rate'])}  edge p95 "
        f"{'-' if latency is None else f'{latency:.0f} ms'}  cost/1k "
        f"{'-' if cost is None else f'${cost:.3f}'}"
    )


def _print_progress(
    reader: httpx.Client, tasks: list[str], since: datetime, elapsed: float
) -> None:
    typer.echo(f"[{elapsed:4.0f} s]")
    for task in tasks:
        rows = _windows(reader, task, since)[-3:]
        for i, w in enumerate(rows):
            typer.echo(f"  {task if i == 0 else '':<18} {_line(w)}")
        if not rows:
            typer.echo(f"  {task:<18} (no window computed yet)")


def _print_buckets(reader: httpx.Client, task: str, since: datetime) -> None:
    rows = [w for w in _windows(reader, task, since, bucket=None) if w["closed"]]
    if not rows:
        return
    last = rows[-1]["window_start"]
    typer.echo(f"\n{task}, last closed window {last[11:19]}, per input-length bucket:")
    for w in rows:
        if w["window_start"] == last:
            low, high = w["agreement_low"], w["agreement_high"]
            interval = "" if low is None else f" [{low:.0%}-{high:.0%}]"
            typer.echo(
                f"  {w['bucket']:>9}  n {w['n_results']:>4}  agreement {_pct(w['agreement'])}{interval}"
                f"  savings {_money(w['savings'])}"
            )
    typer.echo(
        "  (shadow traffic runs both models, so savings stay negative until the edge serves)"
    )


def _money(value: float) -> str:
    return f"-${-value:.4f}" if value < 0 else f"${value:.4f}"


def _sum_totals(first: Totals, second: Totals) -> Totals:
    return Totals(
        generated=first.generated + second.generated,
        accepted=first.accepted + second.accepted,
        duplicates=first.duplicates + second.duplicates,
        rejected=first.rejected + second.rejected,
        dropped=first.dropped + second.dropped,
        errors=first.errors + second.errors,
    )


def _wait_for_windows(
    reader: httpx.Client, tasks: list[str], since: datetime, posted: dict[str, Totals]
) -> None:
    """Wait (real time, at most 15 s) until the windows hold every result the API accepted:
    the in-process scheduler computes them within a second of their arrival."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        counted = {
            task: sum(w["n_results"] for w in _windows(reader, task, since)) for task in tasks
        }
        if all(counted[task] >= posted[task].accepted for task in tasks):
            return
        time.sleep(0.2)


def _first_reason(grade: dict[str, Any]) -> str:
    """The grade's first reason: its first danger signal, else what is missing, else the
    tier's own word."""
    for reason in (*grade.get("reasons", []), *grade.get("missing", [])):
        return str(reason)
    return "no dimension signals danger"


def _print_grades(grades: dict[str, dict[str, Any]], seconds: float) -> None:
    """Each task's tier, score and first reason, and the fields or checks its cloud changes
    between two answers to the same input (noisy)."""
    typer.echo(
        f"\nGrades from {seconds:.0f} s of shadow traffic, graded now and kept as "
        "`shadowplane grade` does (GET /v1/grades answers them): tier, score, first reason"
    )
    for task, grade in grades.items():
        score = "-" if grade.get("score") is None else f"{grade['score']:.2f}"
        first = _first_reason(grade)
        typer.echo(f"  {task:<18} {grade['tier']:<12} score {score:<5} {first}")
        noisy = grade.get("noisy") or []
        if noisy and not all(n["name"] in first for n in noisy):
            names = ", ".join(f"{n['name']} on {n['rate']:.0%}" for n in noisy)
            typer.echo(
                f"  {'':<18} noisy: the cloud itself changes {names} of its repeats, so edge "
                "differences there say little"
            )

"""`shadowplane demo`: the whole system on the embedded default, for a first look.

Migrates the SQLite file, registers the example tasks with ten-second windows, starts the
API in this process (its in-process scheduler computes and closes windows, then runs the
rollout rules) and the dashboard beside it (`shadowplane dashboard`, its own process on
the same database, stopped when the demo ends), streams shadow traffic long enough to
grade every task from it (with the cloud asked a second time on a share of requests) and
prints the three grades and why, promotes the ticket classifier to canary by hand past
its grade, streams simulated traffic routed by the flags, switches the scenario on (by
default the long-ticket regression; `costly_edge`, `longer_inputs`), and prints the windows
filling up, the notices of the cost rule, and the rollback when the policy makes it.

After the long-ticket rollback the loop closes, step by step: the router ships the next
edge model (`small-int4@4`), simulated reviewers label the rollback's regression sample
through the review API, the regression eval set fills from their labels, a run of the new
model is scored on it, the blocked model is unblocked without force, the task is re-armed
and, once the gate passes on the new model's shadow traffic, promoted to canary again —
then where to look and keys to look with. The clock is real: nothing is faked.

Then (unless `--once`) the traffic goes on at a steady, modest rate until Ctrl-C, as the
scenario left it, so the windows keep closing with figures and the dashboard stays live.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
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
from controlplane.catalog import examples as example_tasks
from controlplane.catalog.schemas import DEFAULT_RULES, SPAN_METRICS
from controlplane.catalog.service import task_runtimes
from controlplane.client.tls import default_tls
from controlplane.db import get_engine, session_scope
from controlplane.grading.service import grade_task
from controlplane.ingest.repository import conflict_ids
from controlplane.keys.service import create_key
from controlplane.migrate import upgrade
from controlplane.models import OutboxEvent
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings, get_settings
from controlplane.sim.profiles import (
    COSTLY_EDGE_DEGRADES,
    COSTLY_EDGE_RAMP_SECONDS,
    EDGE_COST_TOP,
    EDGE_MODEL,
    EDGE_MODEL_FIX,
    LONGER_INPUTS,
)
from controlplane.sim.reviewer import SimulatedReviewer, review_over_http, ticket_answers
from controlplane.sim.runner import FLUSH_SECONDS, Plan, Totals, stream


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
# Under the default detector (capped CUSUM) min_samples holds no rollback back: each window
# adds evidence in proportion to its pairs. It decides which single windows the dashboard
# marks as breaching: here those of 20 pairs or more, as the demo's ten-second windows hold
# (production keeps the default 200).
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
# After the long-ticket rollback: the rollback queues this many of its breaching windows'
# results for the regression set (production: 100), so the simulated reviewers label them
# within seconds.
DEMO_REGRESSION_ITEMS = 40
# The re-armed canary's gate reads two ten-second windows of the new model's shadow traffic
# (production: 12 windows, 400 pairs per bucket, a lower bound of 95%), and its edge
# failures against 5% (the examples: 2%), which two windows can show: an upper bound under
# 2% needs about 600 edge runs per bucket.
DEMO_PROMOTION = {"min_windows": 2, "min_samples_per_bucket": 100, "agreement_lower_bound": 0.9}
DEMO_FAIL_LIMIT = 0.05
# Meanwhile the ticket classifier's traffic runs at this rate, so its 2048+ bucket (about a
# tenth of its tickets) has some 200 pairs in those two windows.
FIX_RATE = 100.0
# How long the loop waits at most for the gate's windows, and for its traffic to flush.
LOOP_WAIT_SECONDS = 60.0
FLUSH_WAIT_SECONDS = FLUSH_SECONDS + 5
# How long the demo's own requests wait for an answer: its API shares one SQLite file with
# the scheduler's passes and the simulated traffic, so on a busy machine a request can wait
# seconds for the write lock (httpx's default, 5 s, ended a run in the review step).
HTTP_TIMEOUT = 30.0
# The dashboard's port (a free one if taken), and how long it may take to start answering.
DASHBOARD_PORT = 8501
DASHBOARD_START_SECONDS = 30.0
# After the scenario the demo keeps sending traffic until Ctrl-C, at most this many results a
# second per task (half the default rate: every ten-second window closes with about a
# hundred results, few enough to run for hours), with a line every STEADY_PRINT_SECONDS.
STEADY_RATE = 10.0
STEADY_PRINT_SECONDS = 60.0


def demo_config(
    raw: dict[str, Any], scenario: str, window: Mapping[str, int] = DEMO_WINDOW
) -> dict[str, Any]:
    """An example task's config as the demo applies it: ten-second windows, grading from
    the first seconds, every task's fixed costs itemised and the two span rules over
    SPAN_SECONDS; the canary task judges on fewer samples, queues DEMO_REGRESSION_ITEMS for
    its regression set and promotes on DEMO_PROMOTION's gate. Its net_savings rule notifies
    instead of rolling back unless the scenario is `costly_edge`: with shadow_rate 1.0 the
    cloud answers beside every edge answer in canary too, so the canary pays for both and
    cannot save; `costly_edge` checks one answer in ten instead, on a canary of half the
    sessions."""
    config = {**raw, **window, "fixed_costs": FIXED_COSTS}
    config["grading"] = {**raw.get("grading", {}), **DEMO_GRADING}
    rollback = dict(raw.get("rollback", {}))
    written = rollback.get("rules") or [
        rule.model_dump(mode="json", by_alias=True, exclude_defaults=True) for rule in DEFAULT_RULES
    ]
    cost_rule = NET_SAVINGS
    if raw["task"] == CANARY:
        rollback.update(DEMO_ROLLBACK)
        config["review"] = {**raw.get("review", {}), "regression_items": DEMO_REGRESSION_ITEMS}
        config["promotion"] = {**raw.get("promotion", {}), **DEMO_PROMOTION}
        written = [
            {**r, "threshold": DEMO_FAIL_LIMIT} if r["metric"] == "offload_fail_rate" else r
            for r in written
        ]
        if scenario == "costly_edge":
            config["shadow_rate"] = COSTLY_EDGE_SHADOW_RATE
            config["promotion"]["canary_steps"] = [COSTLY_EDGE_CANARY_PERCENT]
        else:
            cost_rule = {**NET_SAVINGS, "mode": "notify"}
    rules = [r for r in written if r["metric"] not in SPAN_METRICS]
    rollback["rules"] = [*rules, cost_rule, INPUT_SHIFT]
    config["rollback"] = rollback
    return config


def register(
    engine: Engine, scenario: str, window: Mapping[str, int] = DEMO_WINDOW
) -> tuple[list[str], dict[str, str]]:
    """The example tasks applied as the demo runs them (`demo_config`, windows of `window`)
    and three new keys; the tasks' names, and the keys by role: `admin`, `review` and
    `router` (ingest and flags:read)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    scopes = {"admin": ["admin"], "review": ["review"], "router": ["ingest", "flags:read"]}
    names = {"admin": "admin", "review": "reviewer", "router": "router"}
    with session_scope(engine) as session:
        applied = []
        for path in example_tasks.paths():
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            config = demo_config(raw, scenario, window)
            applied.append(apply_config(session, config, actor="demo"))
        keys = {
            role: create_key(
                session, name=f"demo-{names[role]}-{stamp}", scopes=scopes[role], actor="demo"
            )[1]
            for role in scopes
        }
    return [a.task for a in applied], keys


class EmbeddedApi:
    """The API in this process (uvicorn in a thread) with its in-process scheduler, which
    computes and closes windows every DEMO_TICK_SECONDS (no Redis, no Celery)."""

    def __init__(self, settings: Settings, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        # Request log lines would bury the summary; the demo's API logs warnings only.
        app = create_app(
            settings.model_copy(update={"log_level": "WARNING", "tick_seconds": DEMO_TICK_SECONDS})
        )
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> bool:
        """Whether it serves (False: it ended while starting, e.g. on a port taken since)."""
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=10)


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
                if (
                    httpx.get(f"{self.url}/_stcore/health", timeout=1, verify=default_tls()).text
                    == "ok"
                ):
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
    *,
    steady_only: bool = False,
    shadow_seconds: float = SHADOW_SECONDS,
    migrated: bool = False,
) -> None:
    """The demo; after its scenario (unless `once`) traffic at a steady rate until Ctrl-C,
    which ends it with exit code 0 (its usual end, as a server's); a Ctrl-C during the
    scenario ends it with 130. `steady_only` skips the scenario (for a test of the steady
    phase; no option names it); `shadow_seconds` is the shadow phase's least length (a test
    shortens it with the hidden option of the same name); `migrated`: the caller has migrated
    the database (the command does, to say in one line why it could not)."""
    settings = get_settings()
    if not migrated:
        upgrade(settings.database_url)
    # Started first: it imports Streamlit while the API starts; stopped however the demo ends
    # (Ctrl-C, an error, or a SIGTERM, which would otherwise end this process at once and
    # leave the dashboard running without it).
    dashboard = Dashboard(settings.database_url, Path("dashboard.log").resolve())
    api = EmbeddedApi(settings, _free_port(port))
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main else None
    try:
        _demo(
            settings,
            dashboard,
            api,
            rate,
            duration,
            once,
            scenario_after,
            scenario,
            steady_only,
            shadow_seconds,
        )
    except KeyboardInterrupt:
        typer.echo("\nCtrl-C before the scenario finished: the API and the dashboard stop.")
        raise typer.Exit(130) from None
    finally:
        api.stop()
        dashboard.stop()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _demo(
    settings: Settings,
    dashboard: Dashboard,
    api: EmbeddedApi,
    rate: float,
    duration: float,
    once: bool,
    scenario_after: float,
    scenario: str,
    steady_only: bool,
    shadow_least: float,
) -> None:
    engine = get_engine(settings.database_url)
    tasks, demo_keys = register(engine, scenario)
    admin_key, review_key, router_key = (demo_keys[k] for k in ("admin", "review", "router"))
    if not api.start():
        raise typer.Exit(1)
    base = api.base
    typer.echo(f"API on {base} (database: {settings.database_url})")
    keys = (
        f"  reviewer key (Review, Eval sets; blind): {review_key}\n"
        f"  admin key (every page; acts):            {admin_key}"
    )
    if dashboard.wait_ready():
        typer.echo(
            f"Dashboard on {dashboard.url}: Overview and Task show the rollback, the re-arm and "
            "the promotion as they happen, Eval sets the regression set, Audit the run scored "
            f"on it and the unblock. Sign in with a key:\n{keys}"
        )
    else:
        typer.echo(f"The dashboard did not start; its log: {dashboard.log_path}")
    if steady_only:
        _keep_going(api, router_key, tasks, rate, Plan(), dashboard, time.monotonic())
        return
    reader = httpx.Client(
        base_url=base,
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=HTTP_TIMEOUT,
        verify=default_tls(),
    )
    started = datetime.now(UTC)
    last_print = [0.0]
    stop = threading.Event()
    seen: set[int] = set()
    noticed = _Notices(engine)
    # The simulated reviewers know the truth of every result the routers report.
    reviewer = SimulatedReviewer()

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
        shadow_least,
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
        on_result=reviewer.learn,
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
        on_result=reviewer.learn,
    )
    # After the long-ticket rollback the loop closes (below), and its wait for the gate's
    # windows closes these too; otherwise wait (real time) until every window that got
    # traffic has closed: the last one ends, its lateness runs out, the next pass closes
    # it. Looked at five times a second.
    closes_loop = (
        scenario == "long_tickets"
        and reader.get(f"/v1/tasks/{CANARY}").json()["stage"] == "rolled_back"
    )
    deadline = time.monotonic() + (
        0
        if closes_loop
        else DEMO_WINDOW["window_seconds"] + DEMO_WINDOW["allowed_lateness_seconds"] + 6
    )
    while time.monotonic() < deadline and _open_windows(reader, tasks, started):
        time.sleep(0.2)

    def since_shadow() -> float:
        return time.monotonic() - shadow_started

    def await_notices() -> None:
        """The tasks left in shadow have their cost notice once their stage holds a whole
        span and it closes: printed as it comes, or waited for here (a few seconds at
        most)."""
        shadow = set(tasks) - {CANARY}
        deadline = time.monotonic() + max(0.0, notices_due - since_shadow())
        while not noticed.tasks >= shadow and time.monotonic() < deadline:
            time.sleep(0.2)
            noticed.print_new(since_shadow())
        noticed.print_new(since_shadow())

    # A rollback before the notices are due leaves them to come while the loop runs (its
    # waits print them): nobody waits for them idle before it.
    if not closes_loop:
        await_notices()

    typer.echo("\nPosted over HTTP (shadow and canary phases):")
    for task in tasks:
        _print_totals(task, _sum_totals(shadow_totals[task], totals[task]))
    _print_buckets(reader, CANARY, started)
    if reader.get(f"/v1/tasks/{CANARY}").json()["needs_regrade"]:
        _refused_until_regraded(reader)
    stage = reader.get(f"/v1/tasks/{CANARY}").json()["stage"]
    flag = reader.get(f"/v1/flags/{CANARY}").json()
    if stage != "shadow":
        _print_stage(stage, flag, duration)
    # What the traffic does after the scenario: what it did last.
    plan_after = Plan(scenario if duration >= scenario_after else "none", {CANARY})
    if closes_loop:
        loop = _Loop(
            base,
            router_key,
            review_key,
            reader,
            reviewer,
            lambda: noticed.print_new(since_shadow()),
        )
        shipped = loop.run(tasks, rate, since_shadow)
        await_notices()
        plan_after = _fixed_plan()
        if shipped:
            # The windows hold all that was posted; the last ones stay open (the demo ends).
            posted = {
                task: _sum_totals(_sum_totals(shadow_totals[task], totals[task]), shipped[task])
                for task in tasks
            }
            _wait_for_windows(reader, tasks, started, posted)
            typer.echo(f"\nPosted over HTTP while {EDGE_MODEL_FIX} ran:")
            for task in tasks:
                _print_totals(task, shipped[task])
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
  curl -H "Authorization: Bearer $KEY" {base}/v1/tasks/{CANARY}/regression   (the regression gate)
  curl -H "Authorization: Bearer $KEY" {base}/v1/evalsets/{CANARY}/runs
  curl -H "Authorization: Bearer $KEY" {base}/v1/flags
  curl -H "Authorization: Bearer $KEY" {base}/v1/alerts
  curl -H "Authorization: Bearer $KEY" {base}/metrics
{examples}
{where}
{keys}
KEY={admin_key}""")
    reader.close()
    if once:
        return
    _keep_going(api, router_key, tasks, rate, plan_after, dashboard, shadow_started)


def _fixed_plan() -> Plan:
    """The long-ticket scenario with the next edge model, which reads long tickets well."""
    return Plan("long_tickets", {CANARY}, 0.0, edge_model=EDGE_MODEL_FIX)


def keep_going(
    base: str,
    router_key: str,
    tasks: list[str],
    *,
    rate: float,
    plan: Plan,
    stop: threading.Event,
    where: str,
    clock: Callable[[], float],
    say: Callable[[str], None] = typer.echo,
    every: float = STEADY_PRINT_SECONDS,
) -> dict[str, Totals]:
    """Simulated traffic at `rate` results a second per task on `plan`, routed by the flags,
    until `stop` is set: what the demo sends once its scenario is over, so windows keep
    closing with figures. Every `every` seconds a line says how many results were sent and
    `where` to look; a line too whenever a task's flag changes. What it posted."""
    printed = [0.0]
    flags: dict[str, str] = {}

    def now_and_then(elapsed: float, totals: dict[str, Totals]) -> None:
        for task, t in totals.items():
            if task in flags and flags[task] != t.flag:
                say(f"[{clock():4.0f} s] {task}: the routers' flag is now {t.flag}")
            flags[task] = t.flag
        if elapsed - printed[0] >= every:
            printed[0] = elapsed
            sent = sum(t.generated for t in totals.values())
            accepted = sum(t.accepted for t in totals.values())
            say(
                f"[{clock():4.0f} s] still sending: {sent:,} results since the scenario "
                f"({accepted:,} accepted); {where}"
            )

    return stream(
        base,
        router_key,
        tasks,
        rate=rate,
        duration=math.inf,
        plan=plan,
        seed=int(time.time()) + 3,
        stop=stop,
        every_second=now_and_then,
    )


def _keep_going(
    api: EmbeddedApi,
    router_key: str,
    tasks: list[str],
    rate: float,
    plan: Plan,
    dashboard: Dashboard,
    since: float,
) -> None:
    """After the scenario: steady traffic (`keep_going`, at most STEADY_RATE) until Ctrl-C,
    then the traffic and the API stopped (the dashboard next, by run_demo)."""
    rate = min(rate, STEADY_RATE)
    where = f"dashboard {dashboard.url}" if dashboard.ready else f"API {api.base}"
    typer.echo(
        f"\nThe demo keeps going until Ctrl-C: {rate:g} results/s per task, routed by the "
        f"flags{_plan_words(plan)}, so windows keep closing with figures on the dashboard; "
        f"a line every {STEADY_PRINT_SECONDS:g} s, and one whenever a task's flag changes."
    )
    stop = threading.Event()
    # Ctrl-C is waited for on an event, not in Thread.join: Ctrl-C inside join marks a
    # thread still running as stopped on Python 3.11, so the join after it returned at once
    # and the API stopped under the traffic's last flush.
    delivered = threading.Event()
    sent: dict[str, Totals] = {}

    def traffic() -> None:
        try:
            sent.update(
                keep_going(
                    api.base,
                    router_key,
                    tasks,
                    rate=rate,
                    plan=plan,
                    stop=stop,
                    where=where,
                    clock=lambda: time.monotonic() - since,
                )
            )
        finally:
            delivered.set()

    sender = threading.Thread(target=traffic, name="demo-steady-traffic", daemon=True)
    sender.start()
    try:
        while not delivered.wait(timeout=0.5):
            pass
    except KeyboardInterrupt:
        typer.echo("\nCtrl-C: the traffic, the API and the dashboard stop.")
    finally:
        stop.set()
        sender.join(timeout=FLUSH_WAIT_SECONDS)
        api.stop()
    total = sum(t.accepted for t in sent.values())
    typer.echo(f"Stopped; {total:,} results of steady traffic stored.")


class _Loop:
    """After the long-ticket rollback, the loop closed step by step, each printed as it
    happens: the routers ship the next edge model, the simulated reviewers label the
    rollback's regression sample through the review API, the regression eval set fills
    from their labels, a run of the new model is scored on it, the blocked model is
    unblocked without force, the task is re-armed and promoted again once the gate passes
    on the new model's shadow traffic. `while_waiting` runs at each look while it waits
    (the demo prints the notices that came meanwhile)."""

    def __init__(
        self,
        base: str,
        router_key: str,
        review_key: str,
        reader: httpx.Client,
        reviewer: SimulatedReviewer,
        while_waiting: Callable[[], None] = lambda: None,
    ) -> None:
        self.base, self.router_key, self.review_key = base, router_key, review_key
        self.reader, self.reviewer = reader, reviewer
        self.while_waiting = while_waiting
        self.stop = threading.Event()
        self.shipped: dict[str, Totals] = {}

    def run(self, tasks: list[str], rate: float, clock: Callable[[], float]) -> dict[str, Totals]:
        """The steps, with the routers' traffic running beside them; what it posted."""
        traffic = threading.Thread(target=self._ship, args=(tasks, rate), daemon=True)
        traffic.start()
        try:
            self._steps(clock)
        finally:
            self.stop.set()
            traffic.join(timeout=FLUSH_WAIT_SECONDS)
        return self.shipped

    def _ship(self, tasks: list[str], rate: float) -> None:
        """The routers' traffic with the next edge model; the ticket classifier's faster."""
        self.shipped = stream(
            self.base,
            self.router_key,
            tasks,
            rate=rate,
            rates={CANARY: FIX_RATE},
            duration=float("inf"),
            plan=_fixed_plan(),
            seed=int(time.time()) + 2,
            stop=self.stop,
            on_result=self.reviewer.learn,
        )

    def _steps(self, clock: Callable[[], float]) -> None:
        _step(
            clock(),
            f"SHIP: the routers now run the next edge model, {EDGE_MODEL_FIX}; on {CANARY} in "
            f"shadow (rolled back: the cloud serves), its traffic now {FIX_RATE:g} results/s so "
            "the gate's windows fill within seconds.",
        )
        if not self._review(clock):
            return
        progress = self._regression(clock)
        if progress is None:
            return
        if not self._run(clock, progress) or not self._unblock(clock):
            return
        self._rearm(clock)
        if self._gate(clock):
            self._promote(clock)

    def _review(self, clock: Callable[[], float]) -> bool:
        """The simulated reviewers label until every regression item is labelled."""
        with httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {self.review_key}"},
            timeout=HTTP_TIMEOUT,
            verify=default_tls(),
        ) as client:

            def counts() -> dict[str, Any]:
                answer = client.get("/v1/review/queue", params={"task": CANARY})
                answer.raise_for_status()
                return dict(answer.json()["tasks"][0])

            def unlabelled() -> int:
                found = counts().get("regression") or {"labelled": 0, "needed": 0}
                return max(0, int(found["needed"]) - int(found["labelled"]))

            done = review_over_http(client, self.reviewer, CANARY, remaining=unlabelled)
            row = counts()
        regression = row.get("regression") or {"labelled": 0, "needed": 0}
        _step(
            clock(),
            f"REVIEW: {regression['labelled']} of {regression['needed']} regression items "
            f"labelled, blind, by the simulated reviewers through the review API (GET "
            f"/v1/review/next, POST /v1/review/{{id}}/label with a review key): {done.labelled} "
            f"items handed out, the rollback's regression sample first; {row['queued']} other "
            f"items of {CANARY} wait.",
        )
        return bool(regression["needed"]) and regression["labelled"] >= regression["needed"]

    def _regression(self, clock: Callable[[], float]) -> dict[str, Any] | None:
        """The blocked model's regression progress, once the set holds every labelled item
        and the routers' new model is seen (a few seconds at most)."""
        deadline = time.monotonic() + LOOP_WAIT_SECONDS / 4
        while True:
            answer = self.reader.get(f"/v1/tasks/{CANARY}/regression")
            answer.raise_for_status()
            blocks = {b["model"]: b for b in answer.json()["blocks"]}
            block = blocks.get(EDGE_MODEL)
            if block is None:
                _step(clock(), f"{EDGE_MODEL} is not blocked on {CANARY}: nothing to close.")
                return None
            ready = block["in_set"] >= block["needed"] and block["next_model"] == EDGE_MODEL_FIX
            if ready or time.monotonic() > deadline:
                break
            self.while_waiting()
            time.sleep(0.5)
        _step(
            clock(),
            f"REGRESSION SET: {block['in_set']} of {block['needed']} regression items in "
            f"{CANARY}'s regression eval set, from the labels alone (no backfill). To unblock "
            f"{EDGE_MODEL} it still needs {block['unblock']}.",
        )
        return dict(block) if ready else None

    def _run(self, clock: Callable[[], float], progress: dict[str, Any]) -> bool:
        """Score a run of the next model on the regression set: its answers on each item's
        input, as the simulator knows them."""
        model = progress["next_model"]
        # One page holds the whole set: the API pages up to 1,000 items, the demo queues 40.
        answer = self.reader.get(f"/v1/evalsets/{CANARY}/regression", params={"limit": 1000})
        answer.raise_for_status()
        lines = answer.json()["items"]
        outputs = ticket_answers(
            model,
            [(line["id"], self.reviewer.known(CANARY, line["input"])) for line in lines],
            "long_tickets",
        )
        stored = self.reader.post(
            f"/v1/evalsets/{CANARY}/runs",
            json={
                "model": model,
                "layer": "regression",
                "lines": [{"id": k, "output": v} for k, v in outputs.items()],
                "note": "demo: the simulator's answers of the next edge model",
            },
        )
        if stored.status_code != 200:
            _step(clock(), f"RUN {model} refused ({stored.status_code}): {stored.text}")
            return False
        run = stored.json()
        threshold = self.reader.get(f"/v1/tasks/{CANARY}/regression").json()["min_accuracy"]
        passed = run["accuracy"] is not None and run["accuracy"] >= threshold
        _step(
            clock(),
            f"RUN {model} on the regression set: {run['correct']}/{run['n']} = "
            f"{run['accuracy'] or 0:.1%} {'≥' if passed else '<'} {threshold:.0%} "
            f"(promotion.regression_min_accuracy); stored as run {run['id']} on set "
            f"{run['set_sha256'][:12]}.",
        )
        return passed

    def _unblock(self, clock: Callable[[], float]) -> bool:
        answer = self.reader.post(
            f"/v1/tasks/{CANARY}/unblock",
            json={
                "model": EDGE_MODEL,
                "reason": f"demo: {EDGE_MODEL_FIX} passed the regression set",
            },
        )
        if answer.status_code != 200:
            _step(
                clock(),
                f"UNBLOCK {EDGE_MODEL} refused ({answer.status_code}): "
                f"{answer.json().get('detail')}",
            )
            return False
        blocked = answer.json()["blocked"]
        _step(
            clock(),
            f"UNBLOCK {EDGE_MODEL} on {CANARY}: passed without force (the run of "
            f"{EDGE_MODEL_FIX} on the current regression set); audited. Blocked now: "
            f"{', '.join(blocked) or 'none'}.",
        )
        return True

    def _rearm(self, clock: Callable[[], float]) -> None:
        answer = self.reader.post(
            f"/v1/tasks/{CANARY}/rearm",
            json={"reason": f"demo: {EDGE_MODEL_FIX} fixes the long tickets"},
        )
        answer.raise_for_status()
        decision = answer.json()
        _step(
            clock(),
            f"REARM {CANARY} to shadow (flag v{decision['flag_version_after']}): its evidence "
            f"starts over; the gate reads the next {DEMO_PROMOTION['min_windows']} windows of "
            f"{EDGE_MODEL_FIX}'s shadow traffic (this demo's gate: at least "
            f"{DEMO_PROMOTION['min_samples_per_bucket']} pairs per bucket, agreement's lower "
            f"bound ≥ {DEMO_PROMOTION['agreement_lower_bound']:.0%}, edge failures ≤ "
            f"{DEMO_FAIL_LIMIT:.0%}).",
        )

    def _gate(self, clock: Callable[[], float]) -> bool:
        """Wait for the gate over the new model's shadow windows; print each change of it."""
        deadline = time.monotonic() + LOOP_WAIT_SECONDS
        shown: tuple[Any, ...] = ()
        while True:
            answer = self.reader.get(f"/v1/tasks/{CANARY}/gate")
            answer.raise_for_status()
            gate = answer.json()
            # Each change is printed: a window more, or (once the gate reads its last
            # `min_windows`) a newer window that changed the verdict.
            seen = (gate["windows"], gate["passed"], tuple(gate["reasons"]))
            if gate["windows"] and seen != shown:
                shown = seen
                verdict = "passed" if gate["passed"] else "not yet: " + "; ".join(gate["reasons"])
                _step(
                    clock(),
                    f"GATE on {gate['windows']} of the {DEMO_PROMOTION['min_windows']} shadow "
                    f"windows it reads: {verdict}",
                )
            if gate["passed"] or time.monotonic() > deadline:
                break
            self.while_waiting()
            time.sleep(0.5)
        for bucket, view in gate["buckets"].items():
            if view["agreement"] is not None:
                typer.echo(
                    f"    {bucket:>9}  pairs {view['pairs']:>5}  agreement "
                    f"{view['agreement']:.1%}, lower bound {view['agreement_low']:.1%}  "
                    f"edge failures {view['edge_fail_rate'] or 0:.1%}"
                    f"  -> {view['verdict']}"
                )
        return bool(gate["passed"])

    def _promote(self, clock: Callable[[], float]) -> None:
        """Promote as a person would: the gate passed; past a grade that still says
        `shadow` (the traffic's long tail, not the model) only by hand, as the first time."""
        reason = f"demo: the gate passed on {EDGE_MODEL_FIX}'s shadow traffic"
        body = {"reason": reason, "expected_stage": "shadow"}
        answer = self.reader.post(f"/v1/tasks/{CANARY}/promote", json=body)
        past = ""
        detail = answer.json().get("detail") if answer.status_code == 409 else None
        if isinstance(detail, dict) and set(detail) == {"grade"}:
            grade = detail["grade"]
            past = (
                f"; the grade still says {grade['tier']} ({grade['reason']}), past which a "
                "person promotes it by hand, as the first time: forced past the grade only, "
                "audited"
            )
            answer = self.reader.post(
                f"/v1/tasks/{CANARY}/promote",
                json={**body, "reason": f"{reason}; past the grade", "force": True},
            )
        if answer.status_code != 200:
            _step(clock(), f"PROMOTE refused ({answer.status_code}): {answer.text}")
            return
        flag = self.reader.get(f"/v1/flags/{CANARY}").json()
        _step(
            clock(),
            f"PROMOTE {CANARY} to canary {flag['edge_percent']}% (flag v{flag['version']}, "
            f"edge model {EDGE_MODEL_FIX}): the gate passed on its shadow traffic{past}.",
        )


def _plan_words(plan: Plan) -> str:
    """What the steady traffic keeps of the scenario, for the line that starts it."""
    if plan.edge_model == EDGE_MODEL_FIX:
        return f" (the edge model now {EDGE_MODEL_FIX}, which reads long tickets as well as short)"
    if plan.scenario != "none":
        return f" ({plan.scenario} still on {CANARY}, as the scenario left it)"
    return ""


def _step(elapsed: float, text: str) -> None:
    typer.echo(f"\n[{elapsed:4.0f} s] {text}")


def _print_totals(task: str, t: Totals) -> None:
    typer.echo(
        f"  {task:<18} generated {t.generated}, accepted {t.accepted}, duplicates {t.duplicates}, "
        f"rejected {t.rejected}, not delivered {t.dropped}"
    )
    for error in t.errors[:3]:
        typer.echo(f"    ! {error}")


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
        score = "-" if grade.get("score") is None else f"{grade['score']:.3f}"
        first = _first_reason(grade)
        typer.echo(f"  {task:<18} {grade['tier']:<12} score {score:<5} {first}")
        noisy = grade.get("noisy") or []
        if noisy and not all(n["name"] in first for n in noisy):
            names = ", ".join(f"{n['name']} on {n['rate']:.0%}" for n in noisy)
            typer.echo(
                f"  {'':<18} noisy: the cloud itself changes {names} of its repeats, so edge "
                "differences there say little"
            )

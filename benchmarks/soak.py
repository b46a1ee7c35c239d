"""Soak: the production shape on one machine at a steady rate, watched for drift.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--rate 100] [--report-minutes 5]
                                        [--phase-minutes M] [--window-seconds 60]

Starts its own PostgreSQL (durable settings) and Redis via scripts/services, a fresh
database with the example tasks (`--window-seconds` windows, 10 s lateness; the ticket
classifier promoted to canary by hand, its rules judging windows of 20 pairs or more),
then `shadowplane api --workers 2`, `shadowplane beat` and two `shadowplane worker`
processes, each under its own node name. The simulator (controlplane.sim.runner, in this
process) plays the routers: `--rate` results/s spread over the example tasks, routed by the
flags and posted by the SDK's ResultReporter, with scenarios switched on and off in turn,
one phase each (`--phase-minutes`, default the run split into nine): none, long_tickets on
the canary (re-armed and promoted again first if a rollback sent it back), none,
edge_outage, none, traffic_jump (five times one task's volume), none, silence, none.

Every `--report-minutes` it prints one line: the p50/p99 latency of the simulator's posts
in that interval (request sent to answer received, each post a batch of a few results),
how late the windows closed in that interval were closed (closed_at minus window end plus
lateness) and how many are past due and still open, the RSS of every process (the API's
master and its workers, beat, each Celery worker and its pool children, Redis, and this
process, which is the simulator), the PostgreSQL size of results, payloads, windows,
window_metrics, outbox_events and webhook_deliveries, the load average, and the errors seen
(failed posts, rejected or undelivered results, a process that died, ERROR/CRITICAL lines
or tracebacks in the processes' logs).

At the end, after every window that got traffic has closed: results sent vs accepted vs
stored vs counted in the windows' `all` rows (nothing lost, nothing counted twice), the
decisions made, and a verdict on the goals computed from what was measured: memory and
latency flat (the last interval against the second one), no error, nothing lost.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import (  # noqa: E402
    fresh_database,
    percentile,
    rss_mib,
    start_api,
    start_services,
    stop_services,
)
from controlplane.catalog.examples import FOLDER as EXAMPLE_TASKS  # noqa: E402
from controlplane.db import forget_engines, get_engine, session_scope  # noqa: E402
from controlplane.keys.service import create_key  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402
from controlplane.sim import runner  # noqa: E402
from controlplane.sim.profiles import GENERATORS  # noqa: E402

CANARY = "ticket_classify"
LATENESS = 10
TABLES = [
    "results",
    "payloads",
    "windows",
    "window_metrics",
    "outbox_events",
    "webhook_deliveries",
]
# (scenario, the task it applies to) per phase, in turn.
PHASES: list[tuple[str, str | None]] = [
    ("none", None),
    ("long_tickets", CANARY),
    ("none", None),
    ("edge_outage", "invoice_extract"),
    ("none", None),
    ("traffic_jump", "reply_rewrite"),
    ("none", None),
    ("silence", "invoice_extract"),
    ("none", None),
]
ERROR_LINE = re.compile(rb"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)")
# The verdict's tolerances: memory is flat if each process group's RSS in the last
# interval is within 10% (and 10 MB) of the second's; latency if the last p99 is within
# 1.5x (and 5 ms) of the second's.
RSS_TOLERANCE = (1.10, 10.0)
P99_TOLERANCE = (1.5, 5.0)


# -- the simulator, timed ---------------------------------------------------------------


@dataclass
class Posts:
    """Every post the simulator's reporters made: (monotonic end, ms, HTTP status)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rows: list[tuple[float, float, int]] = field(default_factory=list)

    def add(self, ms: float, status: int) -> None:
        with self.lock:
            self.rows.append((time.monotonic(), ms, status))

    def between(self, since: float, until: float) -> list[tuple[float, float, int]]:
        with self.lock:
            return [r for r in self.rows if since <= r[0] < until]


POSTS = Posts()


class TimedReporter(runner.ResultReporter):
    """The SDK's reporter, each POST timed from its request to its answer's headers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._t0 = 0.0

        def sent(_request: httpx.Request) -> None:
            self._t0 = time.perf_counter()

        def answered(response: httpx.Response) -> None:
            POSTS.add((time.perf_counter() - self._t0) * 1000, response.status_code)

        self._http.event_hooks = {"request": [sent], "response": [answered]}


class Phases(runner.Plan):
    """The scenarios switched on and off in turn, `phase` seconds each."""

    def __init__(self, phase: float) -> None:
        super().__init__()
        self.phase = phase

    def index(self, elapsed: float) -> int:
        return min(int(elapsed // self.phase), len(PHASES) - 1) if self.phase > 0 else 0

    def active(self, task: str, elapsed: float) -> str:
        scenario, target = PHASES[self.index(elapsed)]
        return scenario if target in (None, task) else "none"


# -- processes --------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    read: int = 0  # bytes of the log already scanned for errors

    def rss(self) -> list[float]:
        """The process's RSS, then each descendant's (MB)."""
        return [rss_mib(self.popen.pid)] + [rss_mib(c) for c in sorted(children(self.popen.pid))]

    def new_errors(self) -> list[str]:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.read)
                chunk = f.read()
        except OSError:
            return []
        self.read += len(chunk)
        return [
            f"{self.name}: {line.decode('utf-8', 'replace').strip()[:160]}"
            for line in chunk.splitlines()
            if ERROR_LINE.search(line)
        ]


def start(name: str, args: list[str], env: dict[str, str], tmp: Path) -> Proc:
    log = tmp / f"{name}.log"
    popen = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "shadowplane"), *args],
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        cwd=tmp,
    )
    return Proc(name, popen, log)


def redis_pid(tmp: Path) -> int | None:
    try:
        return int((tmp / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return None


# -- what the database says -------------------------------------------------------------


def table_sizes(engine: Engine) -> dict[str, float]:
    """MB per table, indexes and TOAST included; a partitioned one's partitions summed."""
    out = {}
    with engine.connect() as conn:
        for table in TABLES:
            out[table] = (
                conn.scalar(
                    text(
                        "SELECT CASE WHEN c.relkind = 'p' THEN (SELECT sum("
                        "pg_total_relation_size(relid)) FROM pg_partition_tree(c.oid)) "
                        "ELSE pg_total_relation_size(c.oid) END "
                        "FROM pg_class c WHERE c.oid = CAST(:t AS regclass)"
                    ),
                    {"t": table},
                )
                or 0
            ) / 2**20
    return out


def close_lags(engine: Engine, since: datetime, until: datetime) -> tuple[list[float], int, float]:
    """Seconds after its due time each window closed in [since, until) was closed; how
    many windows are past due and still open now, and the oldest one's seconds past due."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT EXTRACT(EPOCH FROM closed_at - window_end) FROM windows "
                "WHERE closed_at >= :since AND closed_at < :until"
            ),
            {"since": since, "until": until},
        ).all()
        overdue = conn.execute(
            text(
                "SELECT count(*), max(EXTRACT(EPOCH FROM :now - window_end)) FROM windows "
                "WHERE closed_at IS NULL AND window_end + make_interval(secs => :late) < :now"
            ),
            {"late": LATENESS, "now": until},
        ).one()
    return (
        [float(r[0]) - LATENESS for r in rows],
        int(overdue[0]),
        float(overdue[1] or 0) - (LATENESS if overdue[0] else 0),
    )


# -- the run ----------------------------------------------------------------------------


@dataclass
class Interval:
    minute: float
    posts: int
    p50: float | None
    p99: float | None
    rss: dict[str, float]
    errors: int


class Monitor:
    def __init__(self, procs: list[Proc], engine: Engine, tmp: Path, report_seconds: float) -> None:
        self.procs = procs
        self.engine = engine
        self.tmp = tmp
        self.report_seconds = report_seconds
        self.intervals: list[Interval] = []
        self.errors: list[str] = []
        self.started = time.monotonic()
        self.started_wall = datetime.now(UTC)
        self.last = self.started
        self.last_wall = self.started_wall
        self.totals: dict[str, runner.Totals] = {}
        self.seen_reporter_errors: dict[str, int] = {}

    def sample(self) -> None:
        now, now_wall = time.monotonic(), datetime.now(UTC)
        posts = POSTS.between(self.last, now)
        ms = [p[1] for p in posts]
        errors = [f"POST answered {s}" for _, _, s in posts if s != 200]
        for p in self.procs:
            errors += p.new_errors()
            if p.popen.poll() is not None:
                errors.append(f"{p.name} exited with {p.popen.returncode}")
        for task, t in list(self.totals.items()):
            seen = self.seen_reporter_errors.get(task, 0)
            errors += [f"{task}: {e}" for e in t.errors[seen:]]
            self.seen_reporter_errors[task] = len(t.errors)
        lags, overdue, oldest = close_lags(self.engine, self.last_wall, now_wall)
        sizes = table_sizes(self.engine)
        rss: dict[str, float] = {}
        parts = []
        for p in self.procs:
            each = p.rss()
            rss[p.name] = sum(each)
            parts.append(f"{p.name} {'+'.join(f'{x:.0f}' for x in each)}")
        rp = redis_pid(self.tmp)
        if rp:
            rss["redis"] = rss_mib(rp)
            parts.append(f"redis {rss['redis']:.0f}")
        rss["simulator"] = rss_mib(os.getpid())
        parts.append(f"simulator {rss['simulator']:.0f}")
        minute = (now - self.started) / 60
        lag = (
            f"close lag p50 {percentile(lags, 50):.1f} s max {max(lags):.1f} s "
            f"({len(lags)} windows)"
            if lags
            else "close lag: no window closed"
        )
        sent = sum(t.generated for t in self.totals.values())
        print(
            f"[{minute:5.1f} min] sent {sent:,}; {len(posts)} posts, latency "
            + (f"p50 {percentile(ms, 50):.1f} ms p99 {percentile(ms, 99):.1f} ms" if ms else "-")
            + f"; {lag}; {overdue} past due still open"
            + (f" (oldest {oldest:.0f} s)" if overdue else "")
            + f"; RSS MB: {', '.join(parts)}"
            + "; PG MB: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sizes.items())
            + f"; load {os.getloadavg()[0]:.2f}; errors {len(errors)}",
            flush=True,
        )
        for e in errors[:5]:
            print(f"    ! {e}", flush=True)
        self.errors += errors
        self.intervals.append(
            Interval(
                minute,
                len(posts),
                percentile(ms, 50) if ms else None,
                percentile(ms, 99) if ms else None,
                rss,
                len(errors),
            )
        )
        self.last, self.last_wall = now, now_wall

    def run(self, stop: threading.Event) -> None:
        due = self.started + self.report_seconds
        while not stop.wait(max(0.0, due - time.monotonic())):
            self.sample()
            due += self.report_seconds


def setup(url: str, window_seconds: int) -> tuple[str, str, list[str]]:
    """The example tasks with short windows; a router key and an admin key."""
    with session_scope(get_engine(url)) as session:
        tasks = []
        for path in sorted(EXAMPLE_TASKS.glob("*.yaml")):
            config = {
                **yaml.safe_load(path.read_text(encoding="utf-8")),
                "window_seconds": window_seconds,
                "allowed_lateness_seconds": LATENESS,
            }
            if config["task"] == CANARY:
                config["rollback"] = {**config.get("rollback", {}), "min_samples": 20}
            tasks.append(apply_config(session, config, actor="soak").task)
        _, router = create_key(
            session, name="soak-router", scopes=["ingest", "flags:read"], actor="soak"
        )
        _, admin = create_key(session, name="soak-admin", scopes=["admin"], actor="soak")
    return router, admin, [t for t in tasks if t in GENERATORS]


def to_canary(admin: httpx.Client) -> str:
    """Promote the canary task to its first canary stage (forced), re-arming it first if a
    rollback sent it back; what happened."""
    said = []
    for _ in range(4):
        stage = admin.get(f"/v1/tasks/{CANARY}").json().get("stage")
        if stage == "canary" or str(stage).startswith("canary"):
            break
        if stage == "rolled_back":
            r = admin.post(f"/v1/tasks/{CANARY}/rearm", json={"reason": "soak: next phase"})
        else:
            r = admin.post(f"/v1/tasks/{CANARY}/promote", json={"reason": "soak", "force": True})
        said.append(f"{stage} -> {r.status_code}")
        if r.status_code != 200:
            break
    return ", ".join(said) or "already canary"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=100.0, help="results/s, all tasks")
    parser.add_argument("--report-minutes", type=float, default=5.0)
    parser.add_argument(
        "--phase-minutes", type=float, help="minutes per scenario phase (default: run / 9)"
    )
    parser.add_argument("--window-seconds", type=int, default=60)
    parser.add_argument("--tick-seconds", type=float, default=10.0, help="beat's period")
    parser.add_argument("--worker-concurrency", type=int, default=2)
    args = parser.parse_args()
    phase = (args.phase_minutes or args.minutes / len(PHASES)) * 60

    tmp = Path(tempfile.mkdtemp(prefix="shadowplane-soak."))
    os.chmod(tmp, 0o755)
    admin_url = start_services(tmp)
    env_file = (tmp / "env").read_text()
    redis_url = re.search(r"SHADOWPLANE_TEST_REDIS_URL=(\S+)", env_file)
    assert redis_url is not None
    procs: list[Proc] = []
    try:
        url = fresh_database(admin_url, "sp_soak")
        router_key, admin_key, tasks = setup(url, args.window_seconds)
        settings = {
            "SHADOWPLANE_DATABASE_URL": url,
            "SHADOWPLANE_REDIS_URL": redis_url.group(1),
            "SHADOWPLANE_TICK_SECONDS": str(args.tick_seconds),
            "SHADOWPLANE_LOG_LEVEL": "WARNING",
        }
        env = {**os.environ, **settings}
        api = start_api(settings, tmp / "api.log")
        procs.append(Proc("api", api.proc, api.log))
        base = api.base
        procs.append(
            start("beat", ["beat", "--schedule-file", str(tmp / "beat-schedule")], env, tmp)
        )
        for i in (1, 2):
            procs.append(
                start(
                    f"worker{i}",
                    [
                        "worker",
                        "--hostname",
                        f"soak-{i}@%h",
                        "--concurrency",
                        str(args.worker_concurrency),
                        "--loglevel",
                        "WARNING",
                    ],
                    env,
                    tmp,
                )
            )
        admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"})
        print(f"{CANARY} to canary: {to_canary(admin)}")
        pg = create_engine(url, poolclass=NullPool)
        with pg.connect() as conn:
            version = conn.scalar(text("SHOW server_version"))
        per_task = args.rate / len(tasks)
        print(
            f"PostgreSQL {version} (durable), Redis, API 2 workers, beat, 2 Celery workers "
            f"(concurrency {args.worker_concurrency}), simulator in this process; "
            f"{os.cpu_count()} cores shared with other work (load {os.getloadavg()[0]:.2f} "
            f"at start).\n{args.minutes:g} min at {args.rate:g} results/s ({per_task:.1f}/s on "
            f"each of {', '.join(tasks)}); {args.window_seconds} s windows, {LATENESS} s "
            f"lateness, beat every {args.tick_seconds:g} s; phases of {phase / 60:.1f} min: "
            + ", ".join(f"{s}{f' ({t})' if t else ''}" for s, t in PHASES)
            + f"; a line every {args.report_minutes:g} min. Logs: {tmp}\n",
            flush=True,
        )
        monitor = Monitor(procs, pg, tmp, args.report_minutes * 60)
        stop = threading.Event()
        plan = Phases(phase)
        shown = [-1]

        def every_second(elapsed: float, totals: dict[str, runner.Totals]) -> None:
            monitor.totals = totals
            i = plan.index(elapsed)
            if i != shown[0]:
                shown[0] = i
                scenario, target = PHASES[i]
                note = ""
                if scenario == "long_tickets":
                    note = f"; {CANARY} to canary: {to_canary(admin)}"
                print(
                    f"  [{elapsed / 60:5.1f} min] phase {scenario}"
                    + (f" on {target}" if target else "")
                    + note,
                    flush=True,
                )

        watcher = threading.Thread(target=monitor.run, args=(stop,), daemon=True)
        watcher.start()
        # The simulator's reporters, timed (the runner builds them from this name).
        runner.ResultReporter = TimedReporter  # type: ignore[misc]
        totals = runner.stream(
            base,
            router_key,
            tasks,
            rate=per_task,
            duration=args.minutes * 60,
            plan=plan,
            seed=1,
            every_second=every_second,
        )
        monitor.totals = totals
        stop.set()
        watcher.join()
        monitor.sample()  # the rest of the last interval
        finish(args, monitor, pg, totals)
    finally:
        for p in reversed(procs):
            if p.popen.poll() is None:
                p.popen.terminate()
        for p in procs:
            try:
                p.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.popen.kill()
        forget_engines()
        stop_services(tmp)


def finish(
    args: argparse.Namespace,
    monitor: Monitor,
    pg: Engine,
    totals: dict[str, runner.Totals],
) -> None:
    # Every window with traffic closes by its end + lateness + one beat period (+ the job).
    deadline = time.monotonic() + args.window_seconds + LATENESS + args.tick_seconds + 60
    while time.monotonic() < deadline:
        with pg.connect() as conn:
            open_ = conn.scalar(
                text(
                    "SELECT count(*) FROM windows WHERE closed_at IS NULL "
                    "AND window_start <= (SELECT max(ts) FROM results)"
                )
            )
        if not open_:
            break
        time.sleep(2)
    with pg.connect() as conn:
        stored = {
            name: (n, distinct)
            for name, n, distinct in conn.execute(
                text(
                    "SELECT t.name, count(*), count(DISTINCT r.request_id) FROM results r "
                    "JOIN tasks t ON t.id = r.task_id GROUP BY t.name"
                )
            )
        }
        counted: dict[str, int] = {
            name: int(n or 0)
            for name, n in conn.execute(
                text(
                    "SELECT t.name, sum(m.n_results) FROM window_metrics m "
                    "JOIN tasks t ON t.id = m.task_id WHERE m.bucket = 'all' GROUP BY t.name"
                )
            )
        }
        still_open = conn.scalar(
            text(
                "SELECT count(*) FROM windows WHERE closed_at IS NULL "
                "AND window_start <= (SELECT max(ts) FROM results)"
            )
        )
        decisions = conn.execute(
            text(
                "SELECT t.name, d.action, d.actor, count(*) FROM decisions d "
                "LEFT JOIN tasks t ON t.id = d.task_id GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
            )
        ).all()
    print(
        f"\nTotals ({still_open} windows with results still open):\n"
        f"  {'task':<16}{'sent':>9}{'accepted':>10}{'dupl.':>7}{'rejected':>9}"
        f"{'undeliv.':>9}{'stored':>9}{'distinct':>9}{'in windows':>11}"
    )
    lost = False
    for task, t in totals.items():
        n, distinct = stored.get(task, (0, 0))
        in_windows = counted.get(task, 0)
        print(
            f"  {task:<16}{t.generated:>9,}{t.accepted:>10,}{t.duplicates:>7,}{t.rejected:>9,}"
            f"{t.dropped:>9,}{n:>9,}{distinct:>9,}{in_windows:>11,}"
        )
        lost |= not (t.generated == t.accepted + t.duplicates == n == distinct == in_windows)
        lost |= bool(t.rejected or t.dropped)
    print("Decisions:")
    for name, action, actor, n in decisions:
        print(f"  {name or '-'}: {action} by {actor} x{n}")

    ivs = [iv for iv in monitor.intervals if iv.posts]
    print("\nVerdict:")
    if len(ivs) < 2:
        print("  too few intervals to compare (run longer or report more often)")
    else:
        first = ivs[1] if len(ivs) > 2 else ivs[0]
        last = ivs[-1]
        # The final sample covers only the few seconds after the last full interval: skip
        # it when a full one precedes it.
        if len(ivs) > 3 and last.posts < first.posts / 3:
            last = ivs[-2]
        growth = []
        flat = True
        for name, before in first.rss.items():
            after = last.rss.get(name, 0.0)
            ok = after <= max(before * RSS_TOLERANCE[0], before + RSS_TOLERANCE[1])
            flat &= ok
            growth.append(f"{name} {before:.0f}->{after:.0f}{'' if ok else ' (GREW)'}")
        print(
            f"  memory (minute {first.minute:.1f} vs {last.minute:.1f}, MB): "
            f"{'flat' if flat else 'NOT flat'}: {', '.join(growth)}"
        )
        assert first.p99 is not None and last.p99 is not None
        lat_ok = last.p99 <= max(first.p99 * P99_TOLERANCE[0], first.p99 + P99_TOLERANCE[1])
        print(
            f"  latency p50 {first.p50:.1f} -> {last.p50:.1f} ms, p99 {first.p99:.1f} -> "
            f"{last.p99:.1f} ms: {'flat' if lat_ok else 'NOT flat'}"
        )
    print(
        f"  errors: {len(monitor.errors)}"
        + (f" (first: {monitor.errors[0]})" if monitor.errors else "")
    )
    print(f"  nothing lost, nothing counted twice: {'yes' if not lost else 'NO'}")


if __name__ == "__main__":
    main()

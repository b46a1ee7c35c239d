"""The dashboard on a month of history: page render times through Streamlit's AppTest beside
the time of the services' own queries, and the routing what-if over 1M results beside one
SQL pass over the columns it reads, on PostgreSQL.

    .venv/bin/python benchmarks/dashboard.py [--tasks 50] [--days 30] [--results 1000000]
        [--reps 5] [--profile]

Starts its own PostgreSQL via scripts/services on free ports (unless
SHADOWPLANE_BENCH_DATABASE_URL points at a server), registers `--tasks` tasks (three
length boundaries: four buckets and `all`), and fills, straight into the tables with
INSERT … SELECT over generate_series (a fixture, not the ingest path), `--days` days of
closed 5-minute windows ending now for every task (50 × 30 days: 432k windows, 2.16M
window rows over the five buckets), with plausible counts, percentiles and costs; and
`--results` results of one task in its last day (all four buckets, a fifth decided for
the cloud, confidences, errors, invalid outputs, conflicts).

The first five tasks are promoted to canary by hand an hour before the end, their long
inputs breach over that hour, and the rollout policy rolls them back: real decisions with
their evidence, trouble on top of the overview, a decision timeline on the task page.

1. Pages. The app signed in with an admin key, through AppTest, on the overview and on
   the filled task's page (first in the list), each run with the data caches cleared
   first (what a page costs when its loaders run; a second look within the cache's TTL
   costs less). Ceiling, measured in the same run: the services the page calls. The
   functions the page script and the dashboard modules it imports (shadowplane_dashboard/task/ for
   the task page) import from `controlplane` that take a session or an engine are
   wrapped (the script's import, run on every render, picks the wrapper up; a module's
   name is replaced):
   each call is timed inside the render, and replayed outside it with the same
   arguments, each in a session of its own as the loaders open them; the lower of the
   two medians is the ceiling. Goals: each page within 2× its queries' time and under
   3 s. `--profile` adds where one render of each page spends its time (its stacks
   sampled: the page's lines and the functions, by share of the render).
2. What-if. `controlplane.metrics.whatif.whatif` over the filled task's `--results`
   results, beside one SQL pass over the same rows reading the same columns (a sum or a
   count over each). Goal: within 2× of the pass.

Medians of `--reps` runs. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import inspect
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import fresh_database, start_services, stop_services  # noqa: E402
from controlplane.catalog.service import task_runtimes  # noqa: E402
from controlplane.db import forget_engines, get_engine, session_scope  # noqa: E402
from controlplane.ingest.buckets import bucket_labels  # noqa: E402
from controlplane.keys.service import create_key  # noqa: E402
from controlplane.metrics.fields import ALL  # noqa: E402
from controlplane.metrics.whatif import whatif  # noqa: E402
from controlplane.rollout.actions import promote  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402
from controlplane.rollout.evaluation import evaluate_rollout  # noqa: E402
from controlplane.settings import Settings  # noqa: E402

APP = str(ROOT / "shadowplane_dashboard" / "streamlit_app.py")
WINDOW_SECONDS = 300
BOUNDARIES = [128, 512, 2048]
PAGE_TASK = "bench_00"
# Tasks put in canary an hour before the end whose long inputs then breach: the policy rolls
# them back (real decisions with their evidence), so the overview has trouble on top and the
# task page a decision timeline with example results.
TROUBLED = 5


def task_config(i: int) -> dict[str, Any]:
    return {
        "task": f"bench_{i:02d}",
        "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
        "length_buckets": BOUNDARIES,
        "window_seconds": WINDOW_SECONDS,
        "rollback": {
            "rules": [
                {"metric": "offload_fail_rate", "op": "<=", "threshold": 0.02},
                {"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"},
            ]
        },
    }


# Every task's windows over the period, closed a minute after they end.
WINDOWS = """
INSERT INTO windows (task_id, window_start, window_end, length_buckets, config_version,
                     computed_at, closed_at, alerts_evaluated, review_sampled)
SELECT t.id, ws, ws + interval '5 minutes', CAST(:buckets AS jsonb), t.config_version,
       ws + interval '6 minutes', ws + interval '6 minutes', true, true
FROM tasks t
CROSS JOIN generate_series(CAST(:start AS timestamptz), CAST(:last AS timestamptz),
                           interval '5 minutes') AS ws
WHERE t.name LIKE 'bench\\_%'
"""

# One row per window and length bucket: counts that hang together (pairs within results,
# agreements within pairs), agreement mostly 90-99%, percentiles and costs.
BUCKET_ROWS = """
INSERT INTO window_metrics (
    window_id, task_id, window_start, bucket, n_results, n_pairs, n_agree, n_conflict,
    n_invalid, n_edge_runs, n_edge_errors, n_edge_fails, n_edge_attempts, n_offload_fails,
    n_degraded, n_served_edge, n_late,
    edge_latency_ms_p50, edge_latency_ms_p95, edge_latency_ms_p99,
    edge_ttfb_ms_p50, edge_ttfb_ms_p95, edge_ttfb_ms_p99,
    cloud_latency_ms_p50, cloud_latency_ms_p95, cloud_latency_ms_p99,
    cloud_ttfb_ms_p50, cloud_ttfb_ms_p95, cloud_ttfb_ms_p99,
    input_tokens_p50, input_tokens_p95, edge_cost, cloud_cost, baseline_cost)
SELECT id, task_id, window_start, bucket, n, pairs, agree, pairs - agree,
       n / 50, n, n / 40, n / 30, n, n / 30, n / 60, n / 4, 0,
       40 + 60 * r, 90 + 80 * r, 150 + 100 * r,
       10 + 10 * r, 25 + 20 * r, 40 + 30 * r,
       300 + 100 * r, 600 + 200 * r, 900 + 300 * r,
       100 + 50 * r, 250 + 80 * r, 400 + 100 * r,
       lo + 0.4 * (hi - lo), lo + 0.95 * (hi - lo),
       n * 0.00002, n * 0.0004, n * 0.0005
FROM (
    SELECT w.id, w.task_id, w.window_start, b.bucket, b.lo, b.hi, n,
           (n * 0.95)::int AS pairs, ((n * 0.95)::int * (0.9 + 0.09 * random()))::int AS agree,
           random() AS r
    FROM windows w
    CROSS JOIN (VALUES (:b0, 1, 127), (:b1, 128, 511), (:b2, 512, 2047), (:b3, 2048, 4000))
        AS b(bucket, lo, hi)
    CROSS JOIN LATERAL (SELECT 20 + (random() * 60)::int AS n) AS counts
    WHERE w.task_id = :task_id
) AS drawn
"""

# `all`: the sum of the buckets' counts and costs; percentiles of the middle buckets.
ALL_ROWS = """
INSERT INTO window_metrics (
    window_id, task_id, window_start, bucket, n_results, n_pairs, n_agree, n_conflict,
    n_invalid, n_edge_runs, n_edge_errors, n_edge_fails, n_edge_attempts, n_offload_fails,
    n_degraded, n_served_edge, n_late,
    edge_latency_ms_p50, edge_latency_ms_p95, edge_latency_ms_p99,
    edge_ttfb_ms_p50, edge_ttfb_ms_p95, edge_ttfb_ms_p99,
    cloud_latency_ms_p50, cloud_latency_ms_p95, cloud_latency_ms_p99,
    cloud_ttfb_ms_p50, cloud_ttfb_ms_p95, cloud_ttfb_ms_p99,
    input_tokens_p50, input_tokens_p95, edge_cost, cloud_cost, baseline_cost)
SELECT window_id, task_id, window_start, :all, sum(n_results), sum(n_pairs), sum(n_agree),
       sum(n_conflict), sum(n_invalid), sum(n_edge_runs), sum(n_edge_errors),
       sum(n_edge_fails), sum(n_edge_attempts), sum(n_offload_fails), sum(n_degraded),
       sum(n_served_edge), 0,
       avg(edge_latency_ms_p50), max(edge_latency_ms_p95), max(edge_latency_ms_p99),
       avg(edge_ttfb_ms_p50), max(edge_ttfb_ms_p95), max(edge_ttfb_ms_p99),
       avg(cloud_latency_ms_p50), max(cloud_latency_ms_p95), max(cloud_latency_ms_p99),
       avg(cloud_ttfb_ms_p50), max(cloud_ttfb_ms_p95), max(cloud_ttfb_ms_p99),
       avg(input_tokens_p50), max(input_tokens_p95),
       sum(edge_cost), sum(cloud_cost), sum(baseline_cost)
FROM window_metrics WHERE task_id = :task_id
GROUP BY window_id, task_id, window_start
"""

# The page task's results over its last day; input tokens log-uniform over 1..4000.
RESULTS = """
INSERT INTO results (
    task_id, request_id, ts, received_at, input_tokens, decision, served, degraded,
    config_version, bucket, comparator, comparator_version, outcome,
    edge_ran, edge_error, edge_latency_ms, edge_ttfb_ms, edge_confidence, edge_valid,
    edge_input_tokens, edge_output_tokens, edge_cost,
    cloud_ran, cloud_latency_ms, cloud_ttfb_ms, cloud_input_tokens, cloud_output_tokens,
    cloud_cost)
SELECT :task_id, :tag || g, ts, ts, tokens,
       CASE WHEN r1 < 0.8 THEN 'edge' ELSE 'cloud' END,
       CASE WHEN r1 < 0.3 THEN 'edge' ELSE 'cloud' END, r1 >= 0.3 AND r1 < 0.32,
       1, CASE WHEN tokens < 128 THEN :b0 WHEN tokens < 512 THEN :b1
               WHEN tokens < 2048 THEN :b2 ELSE :b3 END,
       'label', 1,
       CASE WHEN r2 < 0.02 THEN NULL WHEN r2 < 0.9 THEN 'agree' WHEN r2 < 0.98 THEN 'conflict'
            ELSE 'invalid' END,
       true, CASE WHEN r2 < 0.02 THEN 'timeout' END,
       CASE WHEN r3 < 0.9 THEN 20 + r3 * 200 END, CASE WHEN r3 < 0.6 THEN 5 + r3 * 50 END,
       CASE WHEN r3 < 0.95 THEN r3 END, r2 >= 0.01, tokens, 2,
       CASE WHEN r3 < 0.5 THEN tokens * 0.0000002 END,
       true, 200 + r1 * 600, CASE WHEN r1 < 0.7 THEN 100 + r1 * 300 END, tokens, 2,
       CASE WHEN r3 < 0.5 THEN tokens * 0.000003 END
FROM (
    SELECT g, random() AS r1, random() AS r2, random() AS r3,
           CAST(:start AS timestamptz) + (random() * :span) * interval '1 second' AS ts,
           1 + floor(exp(random() * ln(4000)))::int AS tokens
    FROM generate_series(1, :n) AS g
) AS generated
"""

# One pass over the rows and columns the what-if reads.
WHATIF_PASS = """
SELECT count(*), sum(input_tokens), count(decision), count(served), count(edge_ran),
       sum(edge_confidence), count(edge_error), count(edge_valid), count(outcome),
       sum(edge_cost), sum(edge_input_tokens), sum(edge_output_tokens),
       sum(cloud_output_tokens)
FROM results WHERE task_id = :task_id AND ts >= :since AND ts < :until
"""


# The same, per length bucket (the what-if groups by it).
WHATIF_GROUPED = f"""
SELECT CASE WHEN input_tokens < 128 THEN 0 WHEN input_tokens < 512 THEN 1
            WHEN input_tokens < 2048 THEN 2 ELSE 3 END AS bucket,
       {WHATIF_PASS.split("SELECT", 1)[1].split("FROM", 1)[0]}
FROM results WHERE task_id = :task_id AND ts >= :since AND ts < :until
GROUP BY 1
"""


def fill(url: str, tasks: int, days: int, results: int, now: datetime) -> dict[str, Any]:
    """Register the tasks and fill their windows and the page task's results; what the
    measurements need (ids, the period)."""
    engine = get_engine(url)
    with session_scope(engine) as session:
        for i in range(tasks):
            apply_config(session, task_config(i), actor="bench")
        _, admin_key = create_key(session, name="bench-admin", scopes=["admin"], actor="bench")
        ids = {
            name: runtime.id
            for name, runtime in task_runtimes(
                session, {f"bench_{i:02d}" for i in range(tasks)}
            ).items()
        }
    labels = bucket_labels(BOUNDARIES)
    named = {f"b{i}": label for i, label in enumerate(labels)}
    end = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % 5)
    start = end - timedelta(days=days)
    raw = create_engine(url, poolclass=NullPool)
    began = time.perf_counter()
    with raw.begin() as conn:
        # A fixture consistent by construction: foreign keys are not checked row by row.
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text(WINDOWS),
            {
                "buckets": str(BOUNDARIES),
                "start": start,
                "last": end - timedelta(seconds=WINDOW_SECONDS),
            },
        )
    windows_took = time.perf_counter() - began
    began = time.perf_counter()
    # One task at a time: each statement stays small.
    for task_id in ids.values():
        with raw.begin() as conn:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            conn.execute(text(BUCKET_ROWS), {"task_id": task_id, **named})
            conn.execute(text(ALL_ROWS), {"task_id": task_id, "all": ALL})
    metrics_took = time.perf_counter() - began
    began = time.perf_counter()
    results_start = end - timedelta(days=1)
    chunk = 500_000
    with raw.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        for offset in range(0, results, chunk):
            conn.execute(
                text(RESULTS),
                {
                    "task_id": ids[PAGE_TASK],
                    "tag": f"r{offset}-",
                    "start": results_start,
                    "span": 86400,
                    "n": min(chunk, results - offset),
                    **named,
                },
            )
    results_took = time.perf_counter() - began
    troubled = [f"bench_{i:02d}" for i in range(min(TROUBLED, tasks))]
    rolled_back = roll_back(url, raw, troubled, ids, end, now)
    with raw.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        conn.execute(text("CHECKPOINT"))
        counts = {
            table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in ("windows", "window_metrics", "results")
        }
    raw.dispose()
    print(
        f"filled {counts['windows']:,} windows in {windows_took:.0f} s, "
        f"{counts['window_metrics']:,} window rows in {metrics_took:.0f} s, "
        f"{counts['results']:,} results in {results_took:.0f} s; "
        f"{len(rolled_back)} tasks rolled back by the policy"
    )
    return {
        "admin_key": admin_key,
        "ids": ids,
        "start": start,
        "end": end,
        "results_since": results_start,
        "results_until": end + timedelta(seconds=1),
    }


# The troubled tasks' long inputs agree on 60% of pairs in their last hour of windows.
BREACH = """
UPDATE window_metrics SET n_agree = (n_pairs * 0.6)::int, n_conflict = n_pairs - (n_pairs * 0.6)::int
WHERE task_id = :task_id AND window_start >= :since AND bucket IN (:long, :all)
"""


def roll_back(
    url: str, raw: Any, names: list[str], ids: dict[str, int], end: datetime, now: datetime
) -> list[str]:
    """Promote each task to canary by hand, move its stage start an hour back, let its
    long inputs breach over that hour, and run the rollout policy: the tasks it rolled back."""
    engine = get_engine(url)
    since = end - timedelta(hours=1)
    veto = Settings().error_cost_veto
    for name in names:
        promote(engine, name, actor="bench", reason="bench: canary", veto=veto, force=True)
    with raw.begin() as conn:
        for name in names:
            conn.execute(
                text("UPDATE tasks SET stage_changed_at = :since WHERE id = :id"),
                {"since": since, "id": ids[name]},
            )
            conn.execute(
                text(BREACH),
                {
                    "task_id": ids[name],
                    "since": since,
                    "long": bucket_labels(BOUNDARIES)[-1],
                    "all": ALL,
                },
            )
    done = []
    for name in names:
        with session_scope(engine) as session:
            outcome = evaluate_rollout(session, ids[name], now, veto=veto)
        if outcome.decisions:
            done.append(name)
    return done


def timed(run: Callable[[], Any]) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


def report(label: str, figures: list[float], ceiling: float | None = None) -> float:
    med = statistics.median(figures)
    runs = ", ".join(f"{f:.2f}" for f in figures)
    line = f"  {label:<46} median {med:6.3f} s   runs: {runs}"
    if ceiling:
        line += f"   {med / ceiling:.2f}x the ceiling"
    print(line)
    return med


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--results", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also sample one render per page: where its time goes",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="shadowplane-bench."))
    os.chmod(tmp, 0o755)
    admin_url = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    try:
        url = fresh_database(admin_url, "sp_bench_dashboard")
        with create_engine(url, poolclass=NullPool).connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
        print(f"PostgreSQL {version}, {os.cpu_count()} cores, medians of {args.reps} runs\n")
        filled = fill(url, args.tasks, args.days, args.results, datetime.now(UTC))
        os.environ["SHADOWPLANE_DATABASE_URL"] = url
        measure_pages(url, filled, args.reps, args.profile)
        measure_whatif(url, filled, args.reps)
    finally:
        forget_engines()
        if not os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL"):
            stop_services(tmp)


def sampled_profile(run: Callable[[], Any], page: Path, every: float = 0.002) -> str:
    """Where a render spends its time: the script runs in a thread of AppTest's, so the
    stacks of threads running `page` are sampled every `every` seconds during `run()`.
    The page's lines and the functions (ours and the libraries') by share of samples."""
    lines: dict[int, int] = {}
    functions: dict[str, int] = {}
    taken = [0]
    stop = threading.Event()
    here = threading.get_ident()

    def sample() -> None:
        me = threading.get_ident()
        while not stop.is_set():
            for thread, frame in sys._current_frames().items():
                if thread in (here, me):
                    continue
                stack = []
                f: Any = frame
                while f is not None:
                    stack.append(f)
                    f = f.f_back
                if not any(f.f_code.co_filename == str(page) for f in stack):
                    continue
                taken[0] += 1
                seen = set()
                for f in stack:
                    code = f.f_code
                    if code.co_filename == str(page):
                        lines[f.f_lineno] = lines.get(f.f_lineno, 0) + 1
                    name = f"{short_path(code.co_filename)}:{code.co_name}"
                    if name not in seen:
                        seen.add(name)
                        functions[name] = functions.get(name, 0) + 1
            time.sleep(every)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        elapsed = timed(run)
    finally:
        stop.set()
        sampler.join()
    n = max(taken[0], 1)
    source = page.read_text().splitlines()
    out = [f"  a render sampled: {elapsed:.2f} s, {taken[0]} samples"]
    out.append("  the page's lines by share of the render (a line's calls included):")
    for lineno, count in sorted(lines.items(), key=lambda x: -x[1])[:12]:
        out.append(f"    {count / n:6.1%}  {page.name}:{lineno}  {source[lineno - 1].strip()[:80]}")
    out.append("  functions by share of the render (with what they call):")
    # The database's share as one line; the layers between (SQLAlchemy, psycopg, the
    # wrapper of this script, Streamlit's script runner) left out.
    waiting = functions.pop("psycopg/connection.py:wait", 0)
    out.append(f"    {waiting / n:6.1%}  waiting on PostgreSQL (psycopg)")
    shown = [
        (name, count)
        for name, count in sorted(functions.items(), key=lambda x: -x[1])
        if not name.startswith(
            (
                "streamlit/testing",
                "streamlit/runtime",
                "threading",
                "<",
                "sqlalchemy/",
                "psycopg/",
                "benchmarks/",
            )
        )
        and not name.endswith(("<module>", "exec_func_with_error_handling", "run"))
    ]
    for name, count in shown[:20]:
        out.append(f"    {count / n:6.1%}  {name}")
    return "\n".join(out)


def short_path(filename: str) -> str:
    """A file's path from its package (site-packages/altair/... -> altair/...)."""
    for marker in ("site-packages/", str(ROOT) + "/", "python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def reads(function: Callable[..., Any]) -> bool:
    """Whether `function` is a service that reads the database: its first parameter is the
    session (or the engine), and it is not the session's own context manager."""
    first = next(iter(inspect.signature(function).parameters), None)
    return first in ("session", "engine") and function.__name__ != "session_scope"


def is_module(name: str) -> bool:
    """Whether `name` is a module (`from shadowplane_dashboard.task import loaders`), not a name in one
    (`from shadowplane_dashboard.formats import moment`)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


class Recorder:
    """Wraps the controlplane functions a page script imports (`from controlplane.X import
    f`: the script's import, run on every render, picks up the wrapper), and those the
    dashboard modules it imports (the Task page's loaders live in shadowplane_dashboard/task/: their
    names are replaced in the module), and records each call: its name, its arguments and
    its time."""

    def __init__(self, page: Path) -> None:
        self.calls: list[tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any], float]]
        self.calls = []
        self._saved: list[tuple[Any, str, Any]] = []
        self._wrappers: dict[Any, Callable[..., Any]] = {}
        self._depth = 0
        self._read(page, None, set())

    def _read(self, source: Path, holder: Any, seen: set[str]) -> None:
        """Wrap the services `source` imports from controlplane (in `holder` too, the module
        `source` is, once imported), and read the dashboard modules it imports."""
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.module.startswith("controlplane"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    found = getattr(module, alias.name)
                    if inspect.isfunction(found) and reads(found):
                        wrapper = self._wrap(module, alias.name, found)
                        if holder is not None:
                            self._replace(holder, alias.asname or alias.name, wrapper)
            elif node.module.split(".")[0] == "dashboard":
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    if not is_module(name):
                        name = node.module
                    if name not in seen:
                        seen.add(name)
                        module = importlib.import_module(name)
                        self._read(Path(module.__file__ or ""), module, seen)

    def _replace(self, module: Any, name: str, value: Any) -> None:
        self._saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def _wrap(self, module: Any, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        if original in self._wrappers:
            return self._wrappers[original]

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if self._depth:  # a service calling another: counted in the outer call
                return original(*args, **kwargs)
            self._depth += 1
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - began
                self._depth -= 1
                self.calls.append((name, original, args, kwargs, elapsed))

        self._wrappers[original] = timed_call
        self._replace(module, name, timed_call)
        return timed_call

    def restore(self) -> None:
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)

    def replay(self, engine: Any) -> float:
        """The recorded calls again, outside Streamlit, each in a session of its own (as the
        page's loaders open them; an engine argument stays the engine): their total time."""
        total = 0.0
        for _, function, args, kwargs, _ in self.calls:
            began = time.perf_counter()
            with session_scope(engine) as session:
                function(*[session if isinstance(a, Session) else a for a in args], **kwargs)
            total += time.perf_counter() - began
        return total


def render_page(url: str, key: str, page: str, reps: int, profile: bool = False) -> None:
    """One page, `reps` times with the data caches cleared first, beside the services it
    called (timed inside the render) and the same calls replayed outside (the ceiling)."""
    import streamlit as st
    from streamlit import logger
    from streamlit.testing.v1 import AppTest

    from controlplane.keys import sessions
    from shadowplane_dashboard.common import SESSION_TOKEN

    logger.set_log_level("ERROR")  # AppTest runs without a server, and says so on each run

    recorder = Recorder(ROOT / "shadowplane_dashboard" / page)
    profiled = ""
    try:
        at = AppTest.from_file(APP, default_timeout=600)
        # Signed in as the sign-in page does it: a session, its token where a cookie would be.
        token, _ = sessions.start(
            get_engine(url), key, now=datetime.now(UTC), lasts=timedelta(hours=1)
        )
        at.session_state[SESSION_TOKEN] = token
        at.run()
        at.switch_page(page)
        at.run()  # the first render imports what the page needs
        shown = [e.value for e in at.exception]
        assert not shown, f"{page} failed: {shown}"
        pages, inside, ceiling = [], [], []
        engine = get_engine(url)
        for _ in range(reps):
            st.cache_data.clear()
            recorder.calls.clear()
            pages.append(timed(at.run))
            assert not at.exception, [e.value for e in at.exception]
            inside.append(sum(call[-1] for call in recorder.calls))
            ceiling.append(recorder.replay(engine))
        last = list(recorder.calls)
        if profile:
            st.cache_data.clear()
            profiled = sampled_profile(at.run, ROOT / "shadowplane_dashboard" / page)
    finally:
        recorder.restore()
    names = ", ".join(sorted({call[0] for call in last}))
    print(f"\n{page} ({len(last)} service calls: {names}):")
    # The ceiling: the services' time, the lower of the two ways it was measured.
    floor = min(statistics.median(ceiling), statistics.median(inside))
    report("services replayed outside the page", ceiling)
    report("services inside the render", inside)
    report("render through AppTest, caches cleared", pages, floor)
    if profile:
        print(profiled)
    slowest: dict[str, float] = {}
    for name, *_, elapsed in last:
        slowest[name] = slowest.get(name, 0.0) + elapsed
    print(
        "  inside the last render, by service: "
        + ", ".join(f"{n} {t:.3f} s" for n, t in sorted(slowest.items(), key=lambda x: -x[1]))
    )


def harness_floor(reps: int) -> float:
    """What AppTest itself costs a run (a thread, its polling, the element tree): a page
    that writes one title."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string("import streamlit as st\nst.title('floor')", default_timeout=60)
    at.run()
    figures = [timed(at.run) for _ in range(reps)]
    return report("AppTest's own run (a page with one title)", figures)


def measure_pages(url: str, filled: dict[str, Any], reps: int, profile: bool) -> None:
    print()
    harness_floor(reps)
    for page in ("app_pages/overview.py", "app_pages/task.py"):
        render_page(url, filled["admin_key"], page, reps, profile)


def measure_whatif(url: str, filled: dict[str, Any], reps: int) -> None:
    engine = get_engine(url)
    task_id = filled["ids"][PAGE_TASK]
    period = {"since": filled["results_since"], "until": filled["results_until"]}
    with session_scope(engine) as session:
        runtime = task_runtimes(session, {PAGE_TASK})[PAGE_TASK]

    def run_whatif() -> None:
        with session_scope(engine) as session:
            found = whatif(session, runtime, **period, max_input_tokens=2047, min_confidence=0.3)
        assert found["buckets"][-1]["n_results"] > 0

    def run_pass() -> None:
        with session_scope(engine) as session:
            session.execute(text(WHATIF_PASS), {"task_id": task_id, **period}).one()

    def run_grouped() -> None:
        with session_scope(engine) as session:
            session.execute(text(WHATIF_GROUPED), {"task_id": task_id, **period}).all()

    run_whatif(), run_pass(), run_grouped()  # warm the buffers and the connection pool
    ours, ceiling, grouped = [], [], []
    for _ in range(reps):
        ceiling.append(timed(run_pass))
        grouped.append(timed(run_grouped))
        ours.append(timed(run_whatif))
    print(f"\nWhat-if over the last day of {PAGE_TASK} (all its results):")
    floor = report("one SQL pass over its columns (ceiling)", ceiling)
    report("the same pass grouped by length bucket", grouped, floor)
    report("whatif (max_input_tokens 2047, conf 0.3)", ours, floor)


if __name__ == "__main__":
    main()

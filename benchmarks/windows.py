"""Computing one window on PostgreSQL: time and peak memory, with and without history.

    .venv/bin/python benchmarks/windows.py [--window-rows 1000000] [--history 5000000] [--reps 5]
    .venv/bin/python benchmarks/windows.py --history-days 30 [--per-day 1000000]
        [--window-rows 41667]
    .venv/bin/python benchmarks/windows.py --goal [--per-day 300000] [--reps 5]

Starts its own PostgreSQL via scripts/services (unless SHADOWPLANE_BENCH_DATABASE_URL
points at a server), registers a task, and fills `results` on the server with
generate_series: first `--window-rows` results inside one window spread over the four
length buckets (with missing latencies, errors, invalid outputs, costs and tokens), then
measures; then adds `--history` results in the five days before the window and measures
again. With `--history-days D`, the history is instead D whole days of `--per-day` results
each (loaded a day at a time) before the window, and the last line puts the window's time
with that history next to its time with none (the goal: within 1.2x): measured in turns
with a twin task that has the same window and no history, and, less fairly on a shared
machine, before and after the half hour of loading. With `--goal`, the four cases of the
goal (one window within 5x its ceiling) in one run: windows of 300,000 and 1,000,000
results, of a task with no history and of a twin with `--history-days` (default 30) days
of `--per-day` results before them, measured in turns, each beside its own ceilings.
`results` is partitioned by day, as `migrate` makes it; the window and every day of
history get their day's partition. Each measurement is the median of `--reps` runs of:

- `compute_window`: the production function (one hashed SQL pass grouping the window's
  results for the counts and sums and packing the percentile columns' values, numpy
  percentiles, upsert of every bucket row, commit), each run on a fresh connection, timed
  from the open connection to the commit;
- ceiling: one SQL pass over the same rows that reads the same columns (a sum over
  each), measured in the same run, twice: through the (task_id, ts) index as
  `compute_window` always reads, and with the planner free to scan the whole table in
  parallel (which it prefers when the window is a large share of the table); the ratio
  is taken to the faster one.

Memory: the peak RSS of this Python process during the runs (tracemalloc peak of what
`compute_window` allocates, in one more run: tracing slows Python down, so no timed run is
traced), and the PostgreSQL backend's peak resident set (VmHWM, which
also counts the shared buffers it touched; the ceiling query's is shown for comparison).
Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import fresh_database, start_services, stop_services  # noqa: E402
from controlplane.catalog.service import runtimes  # noqa: E402
from controlplane.db import forget_engines, get_engine, session_scope  # noqa: E402
from controlplane.metrics.service import compute_window  # noqa: E402
from controlplane.models import Task  # noqa: E402
from controlplane.models.partitions import ensure_partitions, partition_days  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402

WINDOW_SECONDS = 3600
START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
TASK = {
    "task": "ticket_classify",
    "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
    "window_seconds": WINDOW_SECONDS,
}

# One row per generated result; input tokens log-uniform over 1..4000 (all four buckets).
FILL = """
INSERT INTO results (
    task_id, request_id, ts, received_at, input_tokens, decision, served, degraded,
    config_version, bucket, comparator, comparator_version, outcome,
    edge_ran, edge_error, edge_latency_ms, edge_ttfb_ms, edge_valid, edge_input_tokens,
    edge_output_tokens, cloud_ran, cloud_latency_ms, cloud_ttfb_ms, cloud_input_tokens,
    cloud_output_tokens, cloud_cost)
SELECT :task_id, :tag || g, ts, ts, tokens, 'edge',
       CASE WHEN r1 < 0.3 THEN 'edge' ELSE 'cloud' END, r1 >= 0.3 AND r1 < 0.33,
       1, '-', 'label', 1,
       CASE WHEN r2 < 0.03 THEN NULL WHEN r2 < 0.9 THEN 'agree' WHEN r2 < 0.98 THEN 'conflict'
            ELSE 'invalid' END,
       true, CASE WHEN r2 < 0.03 THEN 'timeout' END,
       CASE WHEN r3 < 0.9 THEN 20 + r3 * 200 END, CASE WHEN r3 < 0.6 THEN 5 + r3 * 50 END,
       r2 >= 0.01, tokens, 2,
       true, 200 + r1 * 600, CASE WHEN r1 < 0.7 THEN 100 + r1 * 300 END, tokens, 2,
       CASE WHEN r3 < 0.5 THEN tokens * 0.000003 END
FROM (
    SELECT g, random() AS r1, random() AS r2, random() AS r3,
           :start + (random() * :span) * interval '1 second' AS ts,
           1 + floor(exp(random() * ln(4000)))::int AS tokens
    FROM generate_series(1, :n) AS g
) AS generated
"""

CEILING = """
SELECT count(*), sum(input_tokens), sum(edge_latency_ms), sum(edge_ttfb_ms),
       sum(cloud_latency_ms), sum(cloud_ttfb_ms), sum(edge_cost), sum(cloud_cost),
       sum(edge_input_tokens), sum(edge_output_tokens), sum(cloud_input_tokens),
       sum(cloud_output_tokens), count(outcome), count(edge_error), count(edge_valid),
       count(served), count(degraded), count(edge_ran), count(cloud_ran)
FROM results WHERE task_id = :task_id AND ts >= :start AND ts < :end
"""


def fill(
    url: str, task_id: int, n: int, start: datetime, span: float, tag: str, vacuum: bool = True
) -> float:
    engine = create_engine(url, poolclass=NullPool)
    began = time.perf_counter()
    chunk = 1_000_000
    with engine.begin() as conn:
        for offset in range(0, n, chunk):
            conn.execute(
                text(FILL),
                {
                    "task_id": task_id,
                    "tag": f"{tag}-{offset}-",
                    "start": start,
                    "span": span,
                    "n": min(chunk, n - offset),
                },
            )
    if vacuum:
        _vacuum(engine)
    engine.dispose()
    return time.perf_counter() - began


def _vacuum(engine: Any) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE results"))
        conn.execute(text("CHECKPOINT"))


def backend_peak_mb(conn: Any) -> float:
    pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return kb / 1024


def run_compute(
    url: str, task_id: int, start: datetime = START, traced: bool = False
) -> tuple[float, float, float, int]:
    """One `compute_window` on a fresh connection, timed from the open connection to the
    commit (as the ceiling is timed from its open connection, and as the window job's
    pooled connection is open already). With `traced`, the peak of what Python allocates
    (tracemalloc slows Python down: a traced run is never a timed one)."""
    engine = create_engine(url, poolclass=NullPool)
    now = start + timedelta(seconds=10)  # the window stays open: every run recomputes it
    with session_scope(engine) as session:
        session.connection()
        if traced:
            tracemalloc.start()
        began = time.perf_counter()
        computed = compute_window(session, task_id=task_id, window_start=start, now=now)
        peak_backend = backend_peak_mb(session.connection())
        session.commit()
        elapsed = time.perf_counter() - began
    peak_python = 0
    if traced:
        _, peak_python = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    engine.dispose()
    return elapsed, peak_python / 2**20, peak_backend, computed.n_results


def run_ceiling(
    url: str, task_id: int, index_only: bool, start: datetime = START
) -> tuple[float, float, int]:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        if index_only:
            conn.execute(text("SET LOCAL enable_seqscan = off"))
        began = time.perf_counter()
        row = conn.execute(
            text(CEILING),
            {"task_id": task_id, "start": start, "end": start + timedelta(seconds=WINDOW_SECONDS)},
        ).one()
        elapsed = time.perf_counter() - began
        peak = backend_peak_mb(conn)
    engine.dispose()
    return elapsed, peak, row[0]


def measure(label: str, url: str, task_id: int, reps: int) -> float:
    """Print one measurement; the median `compute_window` time."""
    run_compute(url, task_id)  # warm the cache once; not counted
    run_ceiling(url, task_id, True)
    computes, ceilings, planned = [], [], []
    for _ in range(reps):
        computes.append(run_compute(url, task_id))
        ceilings.append(run_ceiling(url, task_id, True))
        planned.append(run_ceiling(url, task_id, False))
    t = statistics.median(c[0] for c in computes)
    # The goal is judged against the faster of the two ceilings.
    c = min(statistics.median(x[0] for x in ceilings), statistics.median(x[0] for x in planned))
    n = computes[0][3]
    assert n == ceilings[0][2], (n, ceilings[0][2])
    traced = run_compute(url, task_id, traced=True)
    print(
        f"{label}: compute_window {t:.2f} s (runs: {', '.join(f'{x[0]:.2f}' for x in computes)})\n"
        f"    ceiling through the index {statistics.median(x[0] for x in ceilings):.2f} s "
        f"(runs: {', '.join(f'{x[0]:.2f}' for x in ceilings)}); "
        f"as planned {statistics.median(x[0] for x in planned):.2f} s "
        f"(runs: {', '.join(f'{x[0]:.2f}' for x in planned)})\n"
        f"    ratio to the faster ceiling {t / c:.1f}x; {n:,} results in the window\n"
        f"    memory: Python peak {traced[1]:.1f} MiB allocated, "
        f"process max RSS {_max_rss_mb():.0f} MiB; PostgreSQL backend peak RSS "
        f"{max(x[2] for x in computes):.0f} MiB (ceiling query's: {max(x[1] for x in ceilings):.0f} MiB)"
    )
    return t


def interleaved(url: str, task_id: int, twin_id: int, reps: int) -> tuple[float, float]:
    """`compute_window` of the task with history and of its twin without any, run in turns
    (so both meet the same load on a shared machine); the two medians."""
    run_compute(url, task_id)  # warm the cache once; not counted
    run_compute(url, twin_id)
    with_history, without = [], []
    for _ in range(reps):
        with_history.append(run_compute(url, task_id)[0])
        without.append(run_compute(url, twin_id)[0])
    a, b = statistics.median(with_history), statistics.median(without)
    print(
        f"in turns: the task with history {a:.3f} s (runs: "
        f"{', '.join(f'{x:.2f}' for x in with_history)}), its twin with none {b:.3f} s "
        f"(runs: {', '.join(f'{x:.2f}' for x in without)})"
    )
    return a, b


def history_days(url: str, task_id: int, args: argparse.Namespace) -> float:
    """Load `--history-days` days of `--per-day` results before the window (newest day first,
    as a live table grows backwards from the window being read), then measure again."""
    total = 0.0
    for day in range(1, args.history_days + 1):
        start = START - timedelta(days=day)
        total += fill(url, task_id, args.per_day, start, 86400, f"d{day}", vacuum=False)
        print(f"loaded day -{day}: {args.per_day:,} results ({total:.0f} s so far)", flush=True)
    began = time.perf_counter()
    engine = create_engine(url, poolclass=NullPool)
    _vacuum(engine)
    engine.dispose()
    total += time.perf_counter() - began
    print(f"\nloaded {args.history_days * args.per_day:,} results of history in {total:.0f} s")
    return measure(f"with {args.history_days} days of history", url, task_id, args.reps)


def goal(url: str, args: argparse.Namespace) -> None:
    """The four cases of the goal in one run: windows of 300k and 1M results (two hours
    of the same day), of a task with no history and of a twin with days of it, each run in
    turns with its two ceilings; medians of `--reps`."""
    days = args.history_days or 30
    sizes = {"300k": 300_000, "1M": 1_000_000}
    starts = {name: START + timedelta(seconds=WINDOW_SECONDS * i) for i, name in enumerate(sizes)}
    tasks = {}
    with session_scope(get_engine(url)) as session:
        for twin in ("plain", "aged"):
            apply_config(session, {**TASK, "task": f"ticket_{twin}"}, actor="bench")
            tasks[twin] = session.query(Task.id).filter(Task.name == f"ticket_{twin}").scalar()
    for twin, task_id in tasks.items():
        for name, n in sizes.items():
            took = fill(url, task_id, n, starts[name], WINDOW_SECONDS, f"{twin}{name}", False)
            print(f"loaded a window of {n:,} results of ticket_{twin} in {took:.0f} s", flush=True)
    total = 0.0
    for day in range(1, days + 1):
        start = START - timedelta(days=day)
        total += fill(url, tasks["aged"], args.per_day, start, 86400, f"d{day}", vacuum=False)
    began = time.perf_counter()
    engine = create_engine(url, poolclass=NullPool)
    _vacuum(engine)
    engine.dispose()
    total += time.perf_counter() - began
    print(
        f"loaded {days} days of {args.per_day:,} results before the windows for ticket_aged "
        f"({days * args.per_day:,} rows) in {total:.0f} s\n"
    )
    cases = [
        (f"{name}, {label}", tasks[twin], starts[name])
        for name in sizes
        for twin, label in (("plain", "no history"), ("aged", f"{days} days of history"))
    ]
    for _, task_id, start in cases:  # warm the cache, and give each window its last count
        run_compute(url, task_id, start)
        run_ceiling(url, task_id, True, start)
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _, _ in cases}
    for _ in range(args.reps):
        for label, task_id, start in cases:
            computed = run_compute(url, task_id, start)
            index = run_ceiling(url, task_id, True, start)
            planned = run_ceiling(url, task_id, False, start)
            assert computed[3] == index[2] == planned[2], (computed[3], index[2], planned[2])
            runs[label].append((computed[0], index[0], planned[0]))
    print(
        f"one window against one SQL pass over the same columns, medians of {args.reps} runs "
        "in turns (goal: within 5x)\n"
        f"{'case':<28} {'compute_window':>14} {'ceiling, index':>15} {'as planned':>11} {'ratio':>6}"
    )
    for label, found in runs.items():
        t, a, b = (statistics.median(x[i] for x in found) for i in range(3))
        print(f"{label:<28} {t:>12.3f} s {a:>13.3f} s {b:>9.3f} s {t / min(a, b):>5.1f}x")


def _max_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--window-rows", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--history-days",
        type=int,
        default=0,
        help="Instead of --history: this many whole days of --per-day results before the window.",
    )
    parser.add_argument("--per-day", type=int, default=None)
    parser.add_argument(
        "--goal",
        action="store_true",
        help="The four cases of the goal: 300k and 1M results, with no history and with "
        "--history-days (default 30) days of --per-day (default 300,000) results.",
    )
    args = parser.parse_args()
    if args.per_day is None:
        args.per_day = 300_000 if args.goal else 1_000_000

    tmp = Path(tempfile.mkdtemp(prefix="shadowplane-bench."))
    os.chmod(tmp, 0o755)
    admin_url = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    try:
        url = fresh_database(admin_url, "sp_bench_windows")
        with session_scope(get_engine(url)) as session:
            apply_config(session, TASK, actor="bench")
            task_id = session.query(Task.id).filter(Task.name == "ticket_classify").scalar()
            runtimes(session)
        with create_engine(url, poolclass=NullPool).begin() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
            # The day partitions of the window's day and of every day of history (production
            # keeps only the days a result may still arrive for; these are older).
            behind = (args.history_days or 30) if args.goal else args.history_days
            ensure_partitions(conn, START.date(), behind=behind + 5, ahead=1)
            days = len(partition_days(conn))
        print(
            f"PostgreSQL {version}, {os.cpu_count()} cores, medians of {args.reps} runs; "
            f"results partitioned by day ({days} day partitions)\n"
        )
        if args.goal:
            goal(url, args)
            return
        took = fill(url, task_id, args.window_rows, START, WINDOW_SECONDS, "w")
        print(f"loaded {args.window_rows:,} results into one window in {took:.0f} s")
        bare = measure("no history", url, task_id, args.reps)
        if args.history_days > 0:
            # A twin task with the same window and never any history: measured in turns
            # with the task once its history is loaded, the fair comparison on a machine
            # whose load changes over the half hour the history takes to load.
            with session_scope(get_engine(url)) as session:
                apply_config(session, {**TASK, "task": "ticket_twin"}, actor="bench")
                twin_id = session.query(Task.id).filter(Task.name == "ticket_twin").scalar()
            fill(url, twin_id, args.window_rows, START, WINDOW_SECONDS, "twin")
            with_history = history_days(url, task_id, args)
            a, b = interleaved(url, task_id, twin_id, args.reps)
            print(
                f"\none window ({args.window_rows:,} results) with {args.history_days} days of "
                f"{args.per_day:,} results a day ({args.history_days * args.per_day:,} rows) "
                f"against none: in turns with its twin {a:.3f} s / {b:.3f} s = {a / b:.2f}x; "
                f"before and after loading {with_history:.3f} s / {bare:.3f} s = "
                f"{with_history / bare:.2f}x (goal: within 1.2x)"
            )
            return
        history_start = START - timedelta(days=5)
        took = fill(url, task_id, args.history, history_start, 5 * 86400, "h")
        print(f"\nloaded {args.history:,} results of older history in {took:.0f} s")
        measure(f"with {args.history:,} older results", url, task_id, args.reps)
    finally:
        forget_engines()
        if not os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL"):
            stop_services(tmp)


if __name__ == "__main__":
    main()

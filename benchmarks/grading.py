"""Grading every task from its windows on PostgreSQL, against one SQL pass over the same
window columns, measured in the same run; and ingest with repeat pairs against ingest
without them.

    .venv/bin/python benchmarks/grading.py [--tasks 100] [--days 30] [--window-seconds 300] [--reps 5]

Starts its own PostgreSQL via scripts/services (unless SHADOWPLANE_BENCH_DATABASE_URL
points at a server), registers `--tasks` tasks whose grading span is `--days` days, and
fills `windows` and `window_metrics` with generate_series: one window every
`--window-seconds` over `--days` days per task, each with its `all` row and one row per
length bucket (default 100 tasks × 30 days of 5-minute windows: 864,000 windows, 4.3
million metric rows). Then, alternating, the median of `--reps` runs of:

- `grade_all`: the production function (one grouped pass over the spans' `all` rows for
  the sums, the days with traffic and the results-weighted input-length medians; the
  per-field repeat differences; `grade()` per task; one kept row per task and day;
  commit), each run on a fresh connection;
- ceiling: one SQL pass over the same `all` rows of the same spans summing the same
  columns (grouped by task), on a fresh connection.

The goal is grade_all ≤ 3× the ceiling. Then (unless `--no-ingest`) the issue's second
figure: `benchmarks/ingest.py --only repeats` — ingest end to end with `cloud_repeat` on 1%
of results against none, in turns, on its own PostgreSQL (`--ingest-rows`, `--reps`; goal
within 5%). Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import fresh_database, start_services, stop_services  # noqa: E402
from controlplane.db import forget_engines, session_scope  # noqa: E402
from controlplane.grading.service import grade_all  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402
from controlplane.settings import Settings  # noqa: E402

BUCKETS = ("0-127", "128-511", "512-2047", "2048+")

WINDOWS = """
INSERT INTO windows (task_id, window_start, window_end, length_buckets, config_version,
                     computed_at, closed_at, alerts_evaluated, review_sampled)
SELECT t.id, s, s + make_interval(secs => :seconds), '[128, 512, 2048]', t.config_version,
       s, s, true, true
FROM tasks AS t,
     generate_series(CAST(:since AS timestamptz), CAST(:until AS timestamptz) - make_interval(secs => :seconds),
                     make_interval(secs => :seconds)) AS s
WHERE t.id = :task_id
"""

# Every bucket's row and `all`; counts vary per window, repeats on about 1 in 100 results.
METRICS = """
INSERT INTO window_metrics (
    window_id, task_id, window_start, bucket, n_results, n_pairs, n_agree, n_conflict,
    n_invalid, n_edge_runs, n_edge_errors, n_edge_fails, n_edge_attempts, n_offload_fails,
    n_degraded, n_served_edge, n_late, n_repeat_pairs, n_repeat_agree, n_repeat_invalid,
    repeat_diffs, input_tokens_sum, input_tokens_p50, input_tokens_p95,
    edge_cost, cloud_cost, baseline_cost)
SELECT w.id, w.task_id, w.window_start, b.bucket, n, n, n - n / 10, n / 10, 0, n, 0, 0, 0, 0,
       0, 0, 0, n / 100, n / 100 - (CASE WHEN random() < 0.1 THEN 1 ELSE 0 END), 0,
       CASE WHEN random() < 0.05 THEN '{"note": 1}'::jsonb END,
       n * (150 + random() * 100), 150 + random() * 100, 400 + random() * 300,
       n * 0.00001, n * 0.001, n * 0.0012
FROM windows AS w
CROSS JOIN (SELECT unnest(CAST(:buckets AS text[])) AS bucket) AS b
CROSS JOIN LATERAL (SELECT (200 + floor(random() * 200))::int AS n) AS counts
WHERE w.task_id = :task_id
"""

CEILING = """
SELECT w.task_id, sum(m.n_results), sum(m.n_repeat_pairs), sum(m.n_repeat_agree),
       sum(m.n_repeat_invalid), sum(m.input_tokens_sum), sum(m.input_tokens_p50),
       sum(m.input_tokens_p95), count(m.repeat_diffs)
FROM windows AS w JOIN window_metrics AS m ON m.window_id = w.id
WHERE m.bucket = 'all' AND w.window_start >= :since AND w.window_start < :until
GROUP BY w.task_id
"""


def setup(url: str, tasks: int, days: int, seconds: int, until: datetime) -> None:
    engine = create_engine(url, poolclass=NullPool)
    since = until - timedelta(days=days)
    with session_scope(engine) as session:
        ids = []
        for i in range(tasks):
            config = {
                "task": f"task_{i:03d}",
                "comparator": {"kind": "label"},
                "window_seconds": seconds,
                "grading": {"span": f"{days}d"},
            }
            ids.append(apply_config(session, config, actor="bench").task_id)
        # The config versions must predate the span: the grade reads the current version's
        # windows since it was made.
        session.execute(
            text("UPDATE task_config_versions SET created_at = :t"), {"t": since - timedelta(1)}
        )
    began = time.perf_counter()
    with engine.begin() as conn:
        for task_id in ids:
            params = {"task_id": task_id, "since": since, "until": until, "seconds": seconds}
            conn.execute(text(WINDOWS), params)
            conn.execute(text(METRICS), {"task_id": task_id, "buckets": [*BUCKETS, "all"]})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE windows"))
        conn.execute(text("VACUUM ANALYZE window_metrics"))
        rows = conn.execute(text("SELECT count(*) FROM window_metrics")).scalar_one()
    engine.dispose()
    print(
        f"filled {tasks} tasks × {days} days of {seconds}-s windows: {rows:,} metric rows "
        f"in {time.perf_counter() - began:.0f} s"
    )


def run_grade(url: str, now: datetime, veto: float) -> tuple[float, int]:
    engine = create_engine(url, poolclass=NullPool)
    began = time.perf_counter()
    with session_scope(engine) as session:
        grades = grade_all(session, veto=veto, now=now)
    elapsed = time.perf_counter() - began
    engine.dispose()
    return elapsed, sum(g["span"]["results"] for g in grades)


def run_ceiling(url: str, now: datetime, days: int) -> tuple[float, int]:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        began = time.perf_counter()
        rows = conn.execute(
            text(CEILING), {"since": now - timedelta(days=days), "until": now}
        ).all()
        elapsed = time.perf_counter() - began
    engine.dispose()
    return elapsed, sum(int(r[1]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--window-seconds", type=int, default=300)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ingest-rows", type=int, default=20_000)
    parser.add_argument("--no-ingest", action="store_true", help="grading only")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sp-bench-grading-"))
    admin = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    try:
        url = fresh_database(admin, "sp_bench_grading")
        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        setup(url, args.tasks, args.days, args.window_seconds, now)
        veto = Settings().error_cost_veto
        run_grade(url, now, veto)  # warm the cache once; not counted
        run_ceiling(url, now, args.days)
        grades, ceilings = [], []
        for _ in range(args.reps):
            grades.append(run_grade(url, now, veto))
            ceilings.append(run_ceiling(url, now, args.days))
        assert grades[0][1] == ceilings[0][1], (grades[0][1], ceilings[0][1])
        g = statistics.median(x[0] for x in grades)
        c = statistics.median(x[0] for x in ceilings)
        print(
            f"grade_all, {args.tasks} tasks: {g * 1000:.0f} ms "
            f"(runs: {', '.join(f'{x[0] * 1000:.0f}' for x in grades)})\n"
            f"ceiling, one SQL pass summing the same columns: {c * 1000:.0f} ms "
            f"(runs: {', '.join(f'{x[0] * 1000:.0f}' for x in ceilings)})\n"
            f"ratio {g / c:.2f}x (goal ≤ 3x); {grades[0][1]:,} results graded"
        )
    finally:
        forget_engines()
        if not os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL"):
            stop_services(tmp)
    if not args.no_ingest:
        print("\nIngest with repeat pairs (benchmarks/ingest.py --only repeats):", flush=True)
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "ingest.py"),
                "--only",
                "repeats",
                "--rows",
                str(args.ingest_rows),
                "--reps",
                str(args.reps),
            ],
            check=True,
        )


if __name__ == "__main__":
    main()

"""The window job with the cost and input-shift rules on, against the job as it was before
them, in the same run (the goal: within 10%).

    .venv/bin/python benchmarks/window_job.py [--per-window 500] [--hours 25] [--reps 15]

Starts its own PostgreSQL via scripts/services (unless SHADOWPLANE_BENCH_DATABASE_URL
points at a server), registers two twin tasks in canary with the same traffic — `--hours`
of 5-minute windows of `--per-window` results each, filled on the server with
generate_series — and closes every window but the last. Then, in turns, it times the
window job on the last window of each twin (what `compute_window_job` runs: compute and
close the window, then `after_window`: alerts, review sampling, route accuracy, rollout
rules), reopening it between runs:

- before: the rules the tasks had before this step (route accuracy, offload failures,
  degrades, agreement per bucket), and the window computed without its input-length
  histogram (the histogram is stubbed for this twin only);
- both rules on: the same rules plus `net_savings` over 24h and `input_shift` over 2h
  with a baseline, so both judge their whole span at every close (thresholds set so that
  neither fires and every run does the same work).

Prints the median of `--reps` runs of each and their ratio; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text, update

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import fresh_database, start_services, stop_services  # noqa: E402
from benchmarks.windows import fill  # noqa: E402
from controlplane.db import forget_engines, get_engine, in_transaction, session_scope  # noqa: E402
from controlplane.metrics import lengths  # noqa: E402
from controlplane.metrics.service import compute_window  # noqa: E402
from controlplane.models import Task, Window  # noqa: E402
from controlplane.models.partitions import ensure_partitions  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402
from controlplane.scheduler import after_window  # noqa: E402

WINDOW = 300
VETO = 0.7
# Lenient, so no rule fires and every run does the same work.
RULES_BEFORE = [
    {"metric": "route_acc", "op": ">=", "threshold": 0.5},
    {"metric": "offload_fail_rate", "op": "<=", "threshold": 0.5},
    {"metric": "degrade_rate", "op": "<=", "threshold": 0.5},
    {"metric": "agreement", "op": ">=", "threshold": 0.5, "scope": "per_bucket"},
]
RULES_BOTH = [
    *RULES_BEFORE,
    {"metric": "net_savings", "op": ">=", "threshold": -1e9, "span": "24h"},
    {"metric": "input_shift", "op": "<=", "threshold": 10, "span": "2h"},
]


def config(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
        "window_seconds": WINDOW,
        "rollback": {"rules": rules},
    }


def run_job(engine: Any, task_id: int, start: datetime, clock: datetime) -> float:
    """One window job on a reopened window: its seconds."""
    with session_scope(engine) as session:
        session.execute(
            update(Window)
            .where(Window.task_id == task_id, Window.window_start == start)
            .values(closed_at=None, alerts_evaluated=False)
        )
    began = time.perf_counter()
    in_transaction(
        engine, lambda s: compute_window(s, task_id=task_id, window_start=start, now=clock)
    )
    done = after_window(engine, task_id, clock, veto=VETO)
    took = time.perf_counter() - began
    if done.errors or done.decisions:
        raise SystemExit(f"the job did something else than judge: {done}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-window", type=int, default=500)
    parser.add_argument("--hours", type=int, default=25)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="sp-bench-job-"))
    admin = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    try:
        url = fresh_database(admin, "bench_window_job")
        engine = get_engine(url)
        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        first = now - timedelta(hours=args.hours)
        windows = args.hours * 3600 // WINDOW
        last = first + timedelta(seconds=(windows - 1) * WINDOW)
        with session_scope(engine) as session:
            ensure_partitions(session.connection(), now.date(), behind=3)
            ids = {}
            for name, rules in (("before", RULES_BEFORE), ("both", RULES_BOTH)):
                applied = apply_config(session, config(name, rules), actor="bench")
                ids[name] = applied.task_id
        for name, task_id in ids.items():
            fill(url, task_id, args.per_window * windows, first, windows * WINDOW, name)
        with session_scope(engine) as session:
            session.execute(
                update(Task).values(stage="canary", stage_changed_at=first - timedelta(hours=1))
            )
        # Every window but the last, closed (untimed) by passes before the timed ones (a clock
        # at the last window's end: each earlier window's lateness has run out); the
        # baseline: the traffic's own shape.
        history_clock = last + timedelta(seconds=WINDOW)
        for task_id in ids.values():
            for k in range(windows):
                start = first + timedelta(seconds=k * WINDOW)
                in_transaction(
                    engine,
                    lambda s, t=task_id, w=start: compute_window(  # type: ignore[misc]
                        s, task_id=t, window_start=w, now=history_clock
                    ),
                )
        with session_scope(engine) as session:
            counts = session.execute(
                text("SELECT input_hist FROM window_metrics WHERE task_id = :t AND bucket = 'all'"),
                {"t": ids["both"]},
            ).scalars()
            baseline = lengths.add(counts)
            session.execute(
                update(Task)
                .where(Task.id == ids["both"])
                .values(input_baseline={"counts": baseline, "source": "the bench's own traffic"})
            )
        clock = last + timedelta(seconds=WINDOW + 180)
        # The history's own evaluations (alerts, review sampling of 300 windows), untimed:
        # each timed run then judges one new window, as in production.
        for task_id in ids.values():
            for _ in range(10):
                after_window(engine, task_id, clock, veto=VETO)
        real_histogram = lengths.histogram
        times: dict[str, list[float]] = {"before": [], "both": []}
        for rep in range(args.reps + 1):
            for name in ("before", "both") if rep % 2 else ("both", "before"):
                lengths.histogram = (  # type: ignore[assignment]
                    (lambda tokens: [0] * lengths.BINS) if name == "before" else real_histogram
                )
                took = run_job(engine, ids[name], last, clock)
                if rep:  # the first turn warms caches
                    times[name].append(took)
        lengths.histogram = real_histogram  # type: ignore[assignment]
        before, both = statistics.median(times["before"]), statistics.median(times["both"])
        print(
            f"window job, {args.per_window} results per 5-minute window, {windows} windows of "
            f"history, median of {args.reps} runs each, in turns:"
        )
        print(f"  before the rules (ceiling):   {before * 1000:7.1f} ms")
        print(f"  net_savings + input_shift on: {both * 1000:7.1f} ms")
        print(f"  ratio {both / before:.3f} (goal: within 1.10)")
    finally:
        forget_engines()
        if "SHADOWPLANE_BENCH_DATABASE_URL" not in os.environ:
            stop_services(tmp)


if __name__ == "__main__":
    main()

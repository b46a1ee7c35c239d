"""The figures of docs/scaling.md no other benchmark prints: bytes stored and WAL written
per result (label and text, through HTTP), and the CPU of one window pass per result, split
between the worker and PostgreSQL.

    .venv/bin/python benchmarks/capacity.py [--rows 50000] [--text-rows 10000]
        [--window-rows 300000] [--reps 3]

Starts its own PostgreSQL (durable: fsync and full_page_writes on) and Redis via
scripts/services, unless SHADOWPLANE_BENCH_DATABASE_URL points at a server whose WAL
nothing else writes; serves the API as `shadowplane api --workers 2` does; then posts, in
batches of 500 by 4 senders, `--rows` results of the `label` task (ticket_classify,
payloads `full`) and `--text-rows` of the `text_conservation` task (reply_rewrite, ~3,000-
character rewrites, payloads `redacted`), each kind after a CHECKPOINT, and prints per
result:

- stored bytes: the growth of `results`, `result_keys` and `payloads` (every day
  partition, with their indexes and TOAST: `pg_total_relation_size`) ÷ results posted;
- WAL bytes: `pg_wal_lsn_diff` of `pg_current_wal_lsn()` after and before the run ÷
  results posted (the first change of each page after the CHECKPOINT is logged whole, as
  production's `full_page_writes` does after each of its checkpoints).

Then the window pass: a window of `--window-rows` results and one of 3,000 (filled on the
server as benchmarks/windows.py fills them) are each computed `--reps` times by
`compute_window` (the production function, the window kept open so every run recomputes
it), and the CPU each run cost this process (the worker's share: the pass's reading, numpy's
percentiles, the upserts) and PostgreSQL (the whole server this benchmark started, parallel
workers included; against SHADOWPLANE_BENCH_DATABASE_URL, the backend alone, which must run
on this machine) is printed per pass and per result; the small window gives the fixed cost
of a pass. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import yaml
from sqlalchemy import select, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import free_port, fresh_database, start_services, stop_services  # noqa: E402
from benchmarks.ingest import (  # noqa: E402
    TASK,
    TEXT_TASK,
    end_to_end,
    pg_conninfo,
    postmaster_pid,
    results,
    serve,
    text_pool,
    text_results,
    tree_cpu_seconds,
)
from benchmarks.windows import START, WINDOW_SECONDS, fill  # noqa: E402
from benchmarks.windows import TASK as WINDOW_TASK  # noqa: E402
from controlplane.db import forget_engines, get_engine, session_scope  # noqa: E402
from controlplane.keys.service import create_key  # noqa: E402
from controlplane.metrics.service import compute_window  # noqa: E402
from controlplane.models import Task  # noqa: E402
from controlplane.models.partitions import ensure_partitions  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402

TABLES = ("results", "result_keys", "payloads")
SENDERS = 4


def sizes(conn: psycopg.Connection) -> dict[str, int]:
    """Bytes of each table, over all its partitions, indexes and TOAST included."""
    return {
        table: int(
            conn.execute(
                # A plain table has no partition tree: then its own size.
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree(%s::regclass)), pg_total_relation_size(%s::regclass))",
                (table, table),
            ).fetchone()[0]  # type: ignore[index]
        )
        for table in TABLES
    }


def lsn(conn: psycopg.Connection) -> str:
    return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]


def measure(label: str, conn: psycopg.Connection, run: object, n: int) -> None:
    conn.execute("CHECKPOINT")
    kept_before = conn.execute("SELECT count(*) FROM payloads").fetchone()[0]  # type: ignore[index]
    before, start = sizes(conn), lsn(conn)
    run()  # type: ignore[operator]
    end, after = lsn(conn), sizes(conn)
    wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()[0]  # type: ignore[index]
    kept = conn.execute("SELECT count(*) FROM payloads").fetchone()[0] - kept_before  # type: ignore[index]
    grown = {t: after[t] - before[t] for t in TABLES}
    parts = ", ".join(f"{t} {grown[t] / n:,.0f}" for t in TABLES)
    print(
        f"{label:<6} {n:>7,} results: stored {sum(grown.values()) / n:>6,.0f} B/result ({parts});"
        f" WAL {float(wal) / n:>6,.0f} B/result; payloads kept for {kept / n:.0%}"
    )


def server_cpu_seconds(pid: int, postmaster: int | None) -> float:
    """CPU seconds (user + system) of the whole PostgreSQL server this benchmark started
    (the backend and any parallel workers it ran), else of backend `pid` alone; NaN when
    it is not a process of this machine."""
    if postmaster is not None:
        return tree_cpu_seconds(postmaster)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def window_pass(url: str, task_id: int, postmaster: int | None) -> tuple[float, float, int]:
    """CPU seconds of one `compute_window` in this process and in PostgreSQL; results read."""
    now = START + timedelta(seconds=10)  # the window stays open: every run recomputes it
    with session_scope(get_engine(url)) as session:
        pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        worker, server = time.process_time(), server_cpu_seconds(pid, postmaster)
        computed = compute_window(session, task_id=task_id, window_start=START, now=now)
        session.commit()
        return (
            time.process_time() - worker,
            server_cpu_seconds(pid, postmaster) - server,
            computed.n_results,
        )


def measure_windows(url: str, rows: int, reps: int, postmaster: int | None) -> None:
    print(f"\nOne window pass (compute_window), CPU, median of {reps} runs:")
    with get_engine(url).begin() as conn:
        ensure_partitions(conn, START.date(), behind=1, ahead=1)
    for n in (rows, 3_000):
        name = f"window_{n}"
        with session_scope(get_engine(url)) as session:
            apply_config(session, {**WINDOW_TASK, "task": name}, actor="bench")
        with session_scope(get_engine(url)) as session:
            task_id = session.execute(select(Task.id).where(Task.name == name)).scalar_one()
        fill(url, task_id, n, START, WINDOW_SECONDS, name)
        window_pass(url, task_id, postmaster)  # warm the cache once; not counted
        runs = [window_pass(url, task_id, postmaster) for _ in range(reps)]
        worker = statistics.median(r[0] for r in runs)
        backend = statistics.median(r[1] for r in runs)
        print(
            f"  {runs[0][2]:>9,} results: worker {worker * 1e3:>7.1f} ms + PostgreSQL "
            f"{backend * 1e3:>7.1f} ms a pass = {(worker + backend) / runs[0][2] * 1e6:.2f} "
            f"µs per result (worker {worker / runs[0][2] * 1e6:.2f}, PostgreSQL "
            f"{backend / runs[0][2] * 1e6:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=50_000, help="label results")
    parser.add_argument("--text-rows", type=int, default=10_000, help="text results")
    parser.add_argument("--window-rows", type=int, default=300_000, help="the large window")
    parser.add_argument("--reps", type=int, default=3, help="window passes of each window")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="shadowplane-bench."))
    os.chmod(tmp, 0o755)
    admin_url = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    api = None
    try:
        url = fresh_database(admin_url, "sp_bench_storage")
        with session_scope(get_engine(url)) as session:
            apply_config(session, TASK, actor="bench")
            apply_config(session, yaml.safe_load(TEXT_TASK.read_text()), actor="bench")
            _, key = create_key(session, name="bench", scopes=["ingest"], actor="bench")
        port = free_port()
        api = serve(url, port, tmp / "api.log", "native")
        base = f"http://127.0.0.1:{port}"
        label_items = results(args.rows, "storage")
        text_items = text_results(args.text_rows, "storage-text", text_pool())
        with psycopg.connect(pg_conninfo(url), autocommit=True) as conn:
            print(f"PostgreSQL {conn.info.server_version}, full_page_writes on, batches of 500\n")
            measure("label", conn, lambda: end_to_end(base, key, label_items, SENDERS), args.rows)
            measure(
                "text", conn, lambda: end_to_end(base, key, text_items, SENDERS), args.text_rows
            )
        api.stop()
        api = None
        measure_windows(url, args.window_rows, args.reps, postmaster_pid(tmp))
    finally:
        if api is not None:
            api.stop()
        forget_engines()
        if not os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL"):
            stop_services(tmp)


if __name__ == "__main__":
    main()

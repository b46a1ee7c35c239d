"""The review sampler on a closed window of 1M results, and claim/label round trips of
concurrent reviewers, on PostgreSQL.

    .venv/bin/python benchmarks/review.py [--window-rows 1000000] [--reps 5]
        [--reviewers 20] [--seconds 10] [--workers 2]

Starts its own PostgreSQL via scripts/services on free ports (unless
SHADOWPLANE_BENCH_DATABASE_URL points at a server) and registers a task.

1. Sampler. Fills one window with `--window-rows` results (generate_series; all four
   length buckets; 2% edge errors, 1% invalid, 7% conflicts, the rest agreeing, a fifth
   of them under the low-confidence bar, a fifth decided for the cloud) and their kept
   payloads as ingest keeps them (every notable result, 5% of the agreeing ones). Times
   `sample_window` — the production function: the one-statement draw over the window,
   reading the drawn rows, inserting the items — in a transaction rolled back after each
   run, beside ceilings measured in the same run: one SQL pass over the same rows (the
   window's results joined to their payloads, reading the columns the strata read; as
   planned, with parallel workers, and in one process, as the draw's statement runs)
   and one over the window's results alone. Then again with every payload kept (the
   worst case: 1M candidates). Goal: within 2x of the first ceiling.
2. Queue. Queues `--items` items, starts the API (`controlplane.api:create_app` under
   uvicorn, `--workers` processes), and runs `--reviewers` concurrent reviewers (each its
   own key and connection: wrk with a Lua script, or an asyncio httpx client when wrk is
   not installed) for `--seconds`: GET /v1/review/next then POST
   /v1/review/{id}/label, over and over. Prints requests and round trips per second and
   the p50/p99 of a request (wrk), beside ceilings measured in the same run by the same
   clients: GET /healthz (no database) and GET /readyz (a request that goes to a worker
   thread and asks the database once). Goal: 200 round trips/s, p99 under 50 ms.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import (  # noqa: E402
    fresh_database,
    percentile,
    start_api,
    start_services,
    stop_services,
)
from controlplane.catalog.service import task_runtimes  # noqa: E402
from controlplane.db import forget_engines, get_engine, session_scope  # noqa: E402
from controlplane.keys.service import create_key  # noqa: E402
from controlplane.models import Task, Window  # noqa: E402
from controlplane.review.sampler import draw, sample_window  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402

WINDOW_SECONDS = 3600
START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
TASK = {
    "task": "ticket_classify",
    "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
    "window_seconds": WINDOW_SECONDS,
    "keep_agreeing_rate": 0.05,
    "review": {"quota_per_window": 20},
}

FILL = """
INSERT INTO results (
    task_id, request_id, ts, received_at, input_tokens, decision, served, degraded,
    config_version, bucket, comparator, comparator_version, outcome,
    edge_ran, edge_error, edge_confidence, edge_valid, edge_model,
    cloud_ran, cloud_error, cloud_model)
SELECT :task_id, :tag || g, ts, ts, tokens,
       CASE WHEN r1 < 0.2 THEN 'cloud' ELSE 'edge' END, 'cloud', false,
       1, '-', 'label', 1,
       CASE WHEN r2 < 0.02 THEN NULL WHEN r2 < 0.03 THEN 'invalid'
            WHEN r2 < 0.10 THEN 'conflict' ELSE 'agree' END,
       true, CASE WHEN r2 < 0.02 THEN 'timeout' END, 0.52 + r3 * 0.48,
       NOT (r2 >= 0.02 AND r2 < 0.03), 'small@3',
       true, NULL, 'large@7'
FROM (
    SELECT g, random() AS r1, random() AS r2, random() AS r3,
           :start + (random() * :span) * interval '1 second' AS ts,
           1 + floor(exp(random() * ln(4000)))::int AS tokens
    FROM generate_series(1, :n) AS g
) AS generated
"""

# What ingest keeps: every notable result (keep probability 1), agreeing ones at 5%.
NOTABLE = "(outcome IS DISTINCT FROM 'agree' OR edge_confidence < 0.6)"
PAYLOADS = f"""
INSERT INTO payloads (result_id, result_ts, policy, keep_probability, input, edge_output,
                      cloud_output, diff)
SELECT id, ts, 'full', CASE WHEN {NOTABLE} THEN 1.0 ELSE 0.05 END,
       jsonb_build_object('text', 'please help with order ' || request_id),
       to_jsonb('refund'::text), to_jsonb(CASE WHEN outcome = 'conflict' THEN 'exchange'
                                                ELSE 'refund' END),
       CASE WHEN outcome = 'conflict'
            THEN '{{"label": {{"edge": "refund", "cloud": "exchange"}}}}'::jsonb END
FROM results
WHERE task_id = :task_id AND ({NOTABLE} OR :all_kept OR random() < 0.05)
      AND NOT EXISTS (SELECT 1 FROM payloads p WHERE p.result_id = results.id
                                                 AND p.result_ts = results.ts)
"""

CEILING_JOINED = """
SELECT count(*), sum(r.input_tokens), count(r.outcome), count(r.edge_error),
       count(r.edge_valid), sum(r.edge_confidence), count(r.decision), count(r.cloud_error),
       count(r.request_id), sum(p.keep_probability)
FROM results r JOIN payloads p ON p.result_id = r.id AND p.result_ts = r.ts
WHERE r.task_id = :task_id AND r.ts >= :start AND r.ts < :end
"""
CEILING_RESULTS = """
SELECT count(*), sum(input_tokens), count(outcome), count(edge_error), count(edge_valid),
       sum(edge_confidence), count(decision), count(cloud_error), count(request_id)
FROM results WHERE task_id = :task_id AND ts >= :start AND ts < :end
"""

ITEMS = """
INSERT INTO review_items (
    task_id, request_id, result_ts, window_start, bucket, input_tokens, decision, served,
    config_version, comparator, comparator_version, outcome, kind, reason, layer,
    inclusion_probability, a_is_edge, policy, input, edge_output, cloud_output, diff,
    reviews_needed, state, created_at)
SELECT :task_id, 'item-' || g, :start, :start, '128-511', 300, 'edge', 'cloud', 1, 'label',
       1, 'conflict', 'pair', 'conflict', 'boundary', 0.1, g % 2 = 0, 'full',
       jsonb_build_object('text', 'please help with order ' || g), to_jsonb('refund'::text),
       to_jsonb('exchange'::text), '{"label": {"edge": "refund", "cloud": "exchange"}}'::jsonb,
       1, 'queued', now()
FROM generate_series(1, :n) AS g
"""


def maintain(url: str) -> None:
    with (
        create_engine(url, poolclass=NullPool)
        .connect()
        .execution_options(isolation_level="AUTOCOMMIT") as conn
    ):
        conn.execute(text("VACUUM ANALYZE results"))
        conn.execute(text("VACUUM ANALYZE payloads"))
        conn.execute(text("CHECKPOINT"))


# --- 1. the sampler ----------------------------------------------------------------------


def run_sampler(url: str, task_id: int, window_id: int) -> tuple[float, float, int]:
    """(whole sample_window, the draw alone, items queued); rolled back."""
    engine = create_engine(url, poolclass=NullPool)
    with Session(engine) as session:
        task = session.get(Task, task_id)
        window = session.get(Window, window_id)
        assert task is not None and window is not None
        config = task_runtimes(session, {task.name})[task.name].config
        began = time.perf_counter()
        draw(session, task, config, window.window_start, window.window_end, window.length_buckets)
        drawn = time.perf_counter() - began
        session.rollback()
        task = session.get(Task, task_id)
        window = session.get(Window, window_id)
        assert task is not None and window is not None
        began = time.perf_counter()
        queued = sample_window(session, task, config, window, START + timedelta(hours=2))
        whole = time.perf_counter() - began
        session.rollback()
    engine.dispose()
    return whole, drawn, queued


def run_ceiling(url: str, sql: str, task_id: int, serial: bool = False) -> tuple[float, int]:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        if serial:
            conn.execute(text("SET max_parallel_workers_per_gather = 0"))
        began = time.perf_counter()
        row = conn.execute(
            text(sql),
            {"task_id": task_id, "start": START, "end": START + timedelta(seconds=WINDOW_SECONDS)},
        ).one()
        elapsed = time.perf_counter() - began
    engine.dispose()
    return elapsed, int(row[0])


def measure_sampler(label: str, url: str, task_id: int, window_id: int, reps: int) -> None:
    run_sampler(url, task_id, window_id)  # warm the cache once; not counted
    run_ceiling(url, CEILING_JOINED, task_id)
    samples, joined, serial, alone = [], [], [], []
    for _ in range(reps):
        samples.append(run_sampler(url, task_id, window_id))
        joined.append(run_ceiling(url, CEILING_JOINED, task_id))
        serial.append(run_ceiling(url, CEILING_JOINED, task_id, serial=True))
        alone.append(run_ceiling(url, CEILING_RESULTS, task_id))
    t = statistics.median(s[0] for s in samples)
    d = statistics.median(s[1] for s in samples)
    cj = statistics.median(c[0] for c in joined)
    cr = statistics.median(c[0] for c in alone)
    cs = statistics.median(c[0] for c in serial)

    def runs(xs: list[tuple[Any, ...]]) -> str:
        return ", ".join(f"{x[0]:.2f}" for x in xs)

    print(
        f"{label}: {alone[0][1]:,} results in the window, {joined[0][1]:,} with a kept payload\n"
        f"    sample_window {t:.2f} s (runs: {runs(samples)}); the draw alone {d:.2f} s; "
        f"{samples[0][2]} items queued\n"
        f"    ceiling, results joined to payloads: {cj:.2f} s (runs: {runs(joined)}) -> "
        f"ratio {t / cj:.2f}x\n"
        f"    the same, in one process (no parallel workers, as the draw runs): {cs:.2f} s "
        f"(runs: {runs(serial)}) -> ratio {t / cs:.2f}x\n"
        f"    ceiling, results alone: {cr:.2f} s (runs: {runs(alone)}) -> ratio {t / cr:.2f}x"
    )


# --- 2. the queue ------------------------------------------------------------------------


async def reviewers(
    base: str, keys: list[str], seconds: float, ceiling: bool
) -> tuple[int, list[float], list[float], list[float], int]:
    """Round trips done, latencies of the first request, the second, the round trip; and
    how many claims found the queue empty."""
    first: list[float] = []
    second: list[float] = []
    trips: list[float] = []
    empty = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=len(keys), max_keepalive_connections=len(keys))

    async def one(client: httpx.AsyncClient, key: str) -> None:
        nonlocal empty
        headers = {"Authorization": f"Bearer {key}"}
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            if ceiling:
                a = await client.get("/readyz")
                t1 = time.perf_counter()
                b = await client.get("/readyz")
                assert a.status_code == b.status_code == 200
            else:
                a = await client.get("/v1/review/next?task=ticket_classify", headers=headers)
                t1 = time.perf_counter()
                if a.status_code == 204:
                    empty += 1
                    continue
                assert a.status_code == 200, a.text
                shown = a.json()["item"]
                # A verdict the comparator holds to: two agreeing answers are right together.
                verdict = "a_correct" if shown["diff"] else "both_correct"
                b = await client.post(
                    f"/v1/review/{shown['id']}/label", json={"verdict": verdict}, headers=headers
                )
                assert b.status_code == 200, b.text
            t2 = time.perf_counter()
            first.append(t1 - t0)
            second.append(t2 - t1)
            trips.append(t2 - t0)

    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        await asyncio.gather(*(one(client, key) for key in keys))
    return len(trips), first, second, trips, empty


def pct(values: list[float], q: float) -> str:
    """The q-th percentile of latencies in seconds, shown in milliseconds."""
    return f"{percentile(values, q) * 1000:.1f}"


WRK_SCRIPT = """
local keys = {%s}
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("key", keys[counter])
end
function init(args)
  item = nil
end
function request()
  if item then
    -- both_wrong stands on any pair (a verdict naming a right answer must fit the comparator)
    return wrk.format("POST", "/v1/review/" .. item .. "/label",
      {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"},
      '{"verdict": "both_wrong"}')
  end
  return wrk.format("GET", "/v1/review/next?task=ticket_classify",
    {["Authorization"] = "Bearer " .. key})
end
function response(status, headers, body)
  if item then
    item = nil
  elseif status == 200 then
    item = string.match(body, '"id":(%%d+)')
  end
end
"""


def _seconds(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[unit]


def wrk(base: str, path: str, seconds: float, threads: int, script: Path | None) -> dict[str, Any]:
    """`wrk` with one connection per thread: requests/s, p50/p99 (ms), non-2xx answers."""
    command = ["wrk", f"-t{threads}", f"-c{threads}", f"-d{seconds:g}s", "--latency"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, base + path], capture_output=True, text=True, check=True)
    text_ = out.stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text_).group(1))  # type: ignore[union-attr]
    # The latency-distribution lines ("     50%    1.23ms"), not the thread statistics'
    # "+/- Stdev" column (e.g. "87.50%"), which the bare "50%" would also match.
    p50 = _seconds(re.search(r"^\s+50%\s+(\S+)", text_, re.M).group(1))  # type: ignore[union-attr]
    p99 = _seconds(re.search(r"^\s+99%\s+(\S+)", text_, re.M).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text_)
    return {
        "rate": rate,
        "p50": p50 * 1000,
        "p99": p99 * 1000,
        "bad": int(bad.group(1)) if bad else 0,
    }


def measure_queue(url: str, task_id: int, args: argparse.Namespace, workdir: Path) -> None:
    engine = get_engine(url)
    with engine.begin() as conn:
        conn.execute(text(ITEMS), {"task_id": task_id, "start": START, "n": args.items})
    with session_scope(engine) as session:
        keys = [
            create_key(session, name=f"reviewer-{i}", scopes=["review"], actor="bench")[1]
            for i in range(args.reviewers)
        ]
    server = start_api(
        {
            "SHADOWPLANE_DATABASE_URL": url,
            "SHADOWPLANE_TICK_SECONDS": "0",
            "SHADOWPLANE_RATE_REVIEW_PER_SECOND": "1e9",
            "SHADOWPLANE_RATE_REVIEW_BURST": str(10**9),
        },
        workdir / "api.log",
        workers=args.workers,
    )
    try:
        if shutil.which("wrk"):
            # One wrk thread per reviewer, each on its own connection and key, alternating
            # GET /next and POST /label on the item it got: a round trip is two requests.
            script = workdir / "review.lua"
            script.write_text(WRK_SCRIPT % ", ".join(f'"{k}"' for k in keys))
            wrk(server.base, "/healthz", 2, args.reviewers, None)  # warm up
            for label, path, lua in (
                ("ceiling: GET /healthz", "/healthz", None),
                ("ceiling: GET /readyz", "/readyz", None),
                ("claim + label", "/", script),
            ):
                got = wrk(server.base, path, args.seconds, args.reviewers, lua)
                print(
                    f"    {label:<24} {got['rate']:>7.0f} requests/s "
                    f"({got['rate'] / 2:.0f} round trips/s); per request p50 "
                    f"{got['p50']:.1f} ms, p99 {got['p99']:.1f} ms"
                    + (f"; {got['bad']} answers not 2xx" if got["bad"] else "")
                )
        else:
            print("    (wrk is not installed: an asyncio httpx client measures instead; it is")
            print("    slower than the server, so the figures are the client's bound)")
            asyncio.run(reviewers(server.base, keys, 2, ceiling=True))  # warm up
            for label, ceiling in (("ceiling: GET /readyz pairs", True), ("claim + label", False)):
                began = time.perf_counter()
                n, first, second, trips, empty = asyncio.run(
                    reviewers(server.base, keys, args.seconds, ceiling)
                )
                elapsed = time.perf_counter() - began
                print(
                    f"    {label:<28} {n / elapsed:>7.0f} round trips/s; p50/p99 ms: "
                    f"first {pct(first, 50)}/{pct(first, 99)}, "
                    f"second {pct(second, 50)}/{pct(second, 99)}, "
                    f"round trip {pct(trips, 50)}/{pct(trips, 99)}"
                    + (f"; {empty} empty claims" if empty else "")
                )
    finally:
        server.stop()
    with session_scope(engine) as session:
        labelled = session.execute(text("SELECT count(*) FROM review_labels")).scalar_one()
        doubled = session.execute(
            text(
                "SELECT count(*) FROM (SELECT item_id FROM review_labels GROUP BY item_id "
                "HAVING count(*) > 1) AS d"
            )
        ).scalar_one()
    print(f"    {labelled:,} labels stored, {doubled} items labelled twice")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--window-rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--reviewers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--skip-sampler", action="store_true")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="shadowplane-bench."))
    os.chmod(tmp, 0o755)
    admin_url = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    try:
        url = fresh_database(admin_url, "sp_bench_review")
        with session_scope(get_engine(url)) as session:
            apply_config(session, TASK, actor="bench")
            task_id = session.scalar(select(Task.id).where(Task.name == "ticket_classify"))
            assert task_id is not None
            window = Window(
                task_id=task_id,
                window_start=START,
                window_end=START + timedelta(seconds=WINDOW_SECONDS),
                length_buckets=[128, 512, 2048],
                config_version=1,
                closed_at=START + timedelta(hours=2),
            )
            session.add(window)
            session.flush()
            window_id = window.id
        with create_engine(url, poolclass=NullPool).connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
        print(f"PostgreSQL {version}, {os.cpu_count()} cores, medians of {args.reps} runs\n")
        if not args.skip_sampler:
            began = time.perf_counter()
            engine = create_engine(url, poolclass=NullPool)
            with engine.begin() as conn:
                conn.execute(
                    text(FILL),
                    {
                        "task_id": task_id,
                        "tag": "w-",
                        "start": START,
                        "span": WINDOW_SECONDS,
                        "n": args.window_rows,
                    },
                )
                conn.execute(text(PAYLOADS), {"task_id": task_id, "all_kept": False})
            maintain(url)
            print(
                f"loaded {args.window_rows:,} results and their kept payloads in "
                f"{time.perf_counter() - began:.0f} s"
            )
            measure_sampler("payloads as ingest keeps them", url, task_id, window_id, args.reps)
            with engine.begin() as conn:
                conn.execute(text(PAYLOADS), {"task_id": task_id, "all_kept": True})
            maintain(url)
            measure_sampler("every payload kept", url, task_id, window_id, args.reps)
            engine.dispose()
        print(
            f"\nqueue: {args.reviewers} reviewers, {args.workers} API workers, "
            f"{args.seconds:g} s per run"
        )
        measure_queue(url, task_id, args, tmp)
    finally:
        forget_engines()
        if not os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL"):
            stop_services(tmp)


if __name__ == "__main__":
    main()

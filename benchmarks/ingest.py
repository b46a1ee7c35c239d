"""Ingest throughput and latency against PostgreSQL, with the ceilings measured in the same run.

    .venv/bin/python benchmarks/ingest.py [--rows 100000] [--senders 4] [--reps 5]
                                         [--text-rows 10000] [--only latency|throughput|repeats|text|floor]
                                         [--profile]

Starts its own PostgreSQL (default durability settings) and Redis via scripts/services,
unless SHADOWPLANE_BENCH_DATABASE_URL (and SHADOWPLANE_BENCH_REDIS_URL) point at servers;
serves the API as `shadowplane api --workers 2` does in production, with Redis (so the
periodic pass is Celery's, not the API's); then measures, each `--reps` times, and prints
medians:

- end to end: results/s posted in batches of 500 by `--senders` concurrent senders
  (HTTP, validation, scoring, payload sampling, idempotent write, commit);
- ceiling: a plain binary `COPY` of the same rows into `results` (not idempotent);
- idempotent ceilings (all rows in one transaction, one connection, binary COPY; each
  `(task, request_id)` claimed in `result_keys`, the key that spans the day partitions):
  `COPY` into a temporary table, then the keys claimed from it and the claimed rows moved
  into `results` in one statement; and the path the server uses (the keys claimed as
  three arrays with one `INSERT … ON CONFLICT DO NOTHING RETURNING`, ids from the sequence,
  one `COPY` of the claimed rows into `results`); the goal is judged against the faster of
  the two; the server's is also shown in batches of 500;
- single results: p50/p99 latency of one-result posts sent open-loop at 200 requests/s,
  measured from each request's scheduled send time, after a warm-up run that is not counted;
- repeats: end to end without repeat pairs and with `cloud_repeat` on 1% of results
  (the default `grading.repeat_rate`), in turns (goal: within 5%);
- text: end to end for a `text_conservation` task (reply_rewrite, payloads redacted) whose
  edge and cloud answers are rewrites of ~3,000 characters (half Chinese, half English),
  with the compiled text reader and then, the API restarted with
  SHADOWPLANE_TEXT_READER=python, with the Python one, beside the `label` task's results/s
  on as many results in the same run (goal: the compiled reader's within 2× of label's).

- floor (`--only floor`): the write alone, as in `--profile`, and what each part of it
  costs: without kept payloads, without the key claim too, and without free repeats too
  (what-ifs: the claim and the probe skipped, the input-hash index dropped from the
  benchmark's own database), each beside the slim keyed table's `COPY` in the same run.

With `--profile` (and `--kinds label,text`, `--cpu`), only the per-result cost table: for
label and text results (`--text-rows` each run), the median microseconds per result of each
stage of the server's own path run in this process (benchmarks/_stages.py samples it as it
runs, in wall time or with `--cpu` in CPU time: body decode and validation, per-item checks,
scoring, bucket and sticky hash, id hashing, payload shaping and masking, row building,
bookkeeping, free repeat pairs, the database write, the transaction; and the time in the
garbage collector), and through HTTP the wall time per result with the CPU the API's
processes and PostgreSQL spent per result; beside it, in the same run, binary `COPY` of the
same label rows into `results` and into a slim table (the same columns, only the
`(task_id, request_id)` unique key), and the floor: the server's write alone
(`service.store`) of label results scored beforehand, from as many processes as senders, a
transaction a batch: about what label through HTTP could reach with an API that cost
nothing.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import psycopg
import yaml
from psycopg.types.json import Jsonb
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._stages import ORDER, StageSampler  # noqa: E402
from benchmarks._support import (  # noqa: E402
    Api,
    free_port,
    fresh_database,
    percentile,
    start_api,
    start_services,
    stop_services,
)
from controlplane.catalog.examples import FOLDER as EXAMPLE_TASKS  # noqa: E402
from controlplane.catalog.service import task_runtimes  # noqa: E402
from controlplane.db import forget_engines, get_engine, in_transaction, session_scope  # noqa: E402
from controlplane.ingest import repository, service, validation  # noqa: E402
from controlplane.ingest.repository import (  # noqa: E402
    JSON_RESULT_COLUMNS,
    RESULT_COLUMNS,
    copy_types,
)
from controlplane.ingest.scoring import IngestContext, score  # noqa: E402
from controlplane.ingest.validation import parse_result  # noqa: E402
from controlplane.keys.service import create_key  # noqa: E402
from controlplane.models import Result  # noqa: E402
from controlplane.models.base import utcnow  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402
from controlplane.settings import Settings  # noqa: E402
from controlplane.sim.profiles import generate  # noqa: E402

BATCH = 500
TASK = {
    "task": "ticket_classify",
    "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
}


TEXT_TASK = EXAMPLE_TASKS / "reply_rewrite.yaml"
TEXT_CHARS = 3000


def results(
    n: int, tag: str, task: str = "ticket_classify", repeat_rate: float = 0.0
) -> list[dict[str, Any]]:
    rows = generate(
        task, n, seed=hash(tag) & 0xFFFF, now=datetime.now(UTC), repeat_rate=repeat_rate
    )
    for i, r in enumerate(rows):
        r["request_id"] = f"{tag}-{i}"
    return rows


def text_results(n: int, tag: str, pool: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """`n` reply_rewrite results whose answers are the ~3,000-character rewrites of `pool`."""
    rows = results(n, tag, "reply_rewrite")
    for i, row in enumerate(rows):
        edge, cloud = pool[i % len(pool)]
        if row["edge"]["output"] is not None:
            row["edge"]["output"] = edge
        row["cloud"]["output"] = cloud
        row["input_tokens"] = row["edge"]["input_tokens"] = row["cloud"]["input_tokens"] = 2048
    return rows


def db_rows(url: str, items: list[dict[str, Any]]) -> list[list[Any]]:
    """The rows the server would store for these results, as binary-COPY-ready value lists."""
    with session_scope(get_engine(url)) as session:
        runtime = task_runtimes(session, {"ticket_classify"})["ticket_classify"]
    now = datetime.now(UTC)
    out = []
    for item in items:
        row = score(parse_result(item), runtime, now).row
        values = [row[c] for c in RESULT_COLUMNS]
        for i, c in enumerate(RESULT_COLUMNS):
            if c in JSON_RESULT_COLUMNS and values[i] is not None:
                values[i] = Jsonb(values[i])
        out.append(values)
    return out


def pg_conninfo(url: str) -> str:
    u = make_url(url)
    return f"host={u.host} port={u.port} user={u.username} dbname={u.database}"


COLS = ", ".join(RESULT_COLUMNS)
TYPES = copy_types(Result.__table__, RESULT_COLUMNS)


def _copy(
    cur: psycopg.Cursor[Any], table: str, columns: str, types: list[str], rows: list[list[Any]]
) -> None:
    with cur.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def ceiling_copy(url: str, rows: list[list[Any]]) -> float:
    """Plain binary COPY of all rows in one transaction: not idempotent (a resend fails)."""
    with psycopg.connect(pg_conninfo(url)) as conn:
        started = time.perf_counter()
        with conn.cursor() as cur:
            _copy(cur, "results", COLS, TYPES, rows)
        conn.commit()
        return len(rows) / (time.perf_counter() - started)


_KEY = [RESULT_COLUMNS.index(c) for c in ("task_id", "request_id", "ts")]


def _staged(conn: psycopg.Connection[Any], rows: list[list[Any]]) -> None:
    """COPY into a temporary table, claim the keys from it, move the claimed rows."""
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS staging ON COMMIT DELETE ROWS AS "
            f"SELECT {COLS} FROM results WITH NO DATA"
        )
        _copy(cur, "staging", COLS, TYPES, rows)
        cur.execute(
            "WITH claimed AS (INSERT INTO result_keys (task_id, request_id, ts) "
            "SELECT task_id, request_id, ts FROM staging ORDER BY task_id, request_id "
            "ON CONFLICT DO NOTHING RETURNING task_id, request_id) "
            f"INSERT INTO results ({COLS}) SELECT {', '.join('s.' + c for c in RESULT_COLUMNS)} "
            "FROM staging s JOIN claimed c USING (task_id, request_id)"
        )
    conn.commit()


def _keyed(conn: psycopg.Connection[Any], rows: list[list[Any]]) -> None:
    """The server's path: claim the keys (three arrays, one INSERT … ON CONFLICT DO NOTHING
    RETURNING), then ids from the sequence and one binary COPY of the claimed rows."""
    t, r, ts = _KEY
    rows = sorted(rows, key=lambda row: (row[t], row[r]))
    with conn.cursor() as cur:
        claimed = set(
            cur.execute(
                "INSERT INTO result_keys (task_id, request_id, ts) SELECT * FROM "
                "unnest(%s::integer[], %s::text[], %s::timestamptz[]) "
                "ON CONFLICT DO NOTHING RETURNING task_id, request_id",
                ([row[t] for row in rows], [row[r] for row in rows], [row[ts] for row in rows]),
            ).fetchall()
        )
        new = [row for row in rows if (row[t], row[r]) in claimed]
        ids = [
            i[0]
            for i in cur.execute(
                "SELECT nextval('results_id_seq') FROM generate_series(1, %s)", (len(new),)
            )
        ]
        _copy(
            cur,
            "results",
            "id, " + COLS,
            ["int8", *TYPES],
            [[i, *row] for i, row in zip(ids, new, strict=True)],
        )
    conn.commit()


def ceiling_idempotent(
    url: str, rows: list[list[Any]], batch: int | None = None, method: Callable[..., None] = _staged
) -> float:
    with psycopg.connect(pg_conninfo(url)) as conn:
        started = time.perf_counter()
        step = batch or len(rows)
        for i in range(0, len(rows), step):
            method(conn, rows[i : i + step])
        return len(rows) / (time.perf_counter() - started)


def end_to_end(base: str, key: str, items: list[dict[str, Any]], senders: int) -> float:
    bodies = [orjson.dumps({"results": items[i : i + BATCH]}) for i in range(0, len(items), BATCH)]
    queue = list(reversed(bodies))
    lock = threading.Lock()
    failures: list[str] = []

    host, port = base.removeprefix("http://").split(":")

    def sender() -> None:
        # The standard library's client: a router's own overhead must not eat the two cores
        # the server is measured on (httpx costs several times more CPU per request).
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    body = queue.pop()
                conn.request("POST", "/v1/results", body=body, headers=headers)
                response = conn.getresponse()
                answer = response.read()
                if response.status != 200 or orjson.loads(answer)["accepted"] != BATCH:
                    failures.append(f"{response.status} {answer[:200]!r}")
        finally:
            conn.close()

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"end-to-end run failed: {failures[:3]}")
    return len(items) / elapsed


def singles(base: str, key: str, items: list[dict[str, Any]], rate: float) -> list[float]:
    """Open loop: request i is due at start + i/rate whatever happened before; its latency
    runs from that due time to the end of its answer (so a stalled server cannot hide
    behind a client that waits for it)."""
    host, port = base.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    bodies = [orjson.dumps(item) for item in items]
    local = threading.local()
    failures: list[str] = []

    def exchange(body: bytes) -> tuple[int, bytes]:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v1/results", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    def post(due: float, body: bytes) -> float:
        try:
            status, answer = exchange(body)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed an idle keep-alive connection: reconnect and resend (an
            # idempotent write), as a router would. The lost time stays in the figure.
            local.conn.close()
            local.conn = None
            status, answer = exchange(body)
        if status != 200 or orjson.loads(answer)["accepted"] != 1:
            failures.append(f"{status} {answer[:200]!r}")
        return (time.perf_counter() - due) * 1000

    with ThreadPoolExecutor(max_workers=32) as pool:
        start = time.perf_counter() + 0.05
        futures = []
        for i, body in enumerate(bodies):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(post, due, body))
        latencies = [f.result() for f in futures]
    if failures:
        raise SystemExit(f"single posts failed: {failures[:3]}")
    return latencies


def settle(url: str) -> None:
    with psycopg.connect(pg_conninfo(url), autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def median_of(label: str, reps: int, url: str, run: Callable[[int], float], unit: str) -> float:
    figures = []
    for rep in range(reps):
        settle(url)
        figures.append(run(rep))
    med = statistics.median(figures)
    print(
        f"  {label:<52} median {med:>9,.0f} {unit}   runs: {', '.join(f'{f:,.0f}' for f in figures)}"
    )
    return med


def measure_latency(args: argparse.Namespace, base: str, key: str, url: str) -> None:
    print(f"Single-result posts, open loop at {args.rate:.0f}/s, {args.singles} per run (ms):")
    singles(base, key, results(args.singles // 2, "warm-up"), args.rate)  # not counted
    p50s, p99s = [], []
    for rep in range(args.reps):
        settle(url)
        lat = singles(base, key, results(args.singles, f"single{rep}"), args.rate)
        p50s.append(percentile(lat, 50))
        p99s.append(percentile(lat, 99))
    print(
        f"  p50 median {statistics.median(p50s):.2f} ms   runs: {', '.join(f'{x:.2f}' for x in p50s)}"
    )
    print(
        f"  p99 median {statistics.median(p99s):.2f} ms   runs: {', '.join(f'{x:.2f}' for x in p99s)}"
        "   (goal < 15 ms)"
    )


def measure_throughput(args: argparse.Namespace, base: str, key: str, url: str) -> None:
    print("\nThroughput:")
    e2e = median_of(
        "end to end over HTTP (batches of 500)",
        args.reps,
        url,
        lambda rep: end_to_end(base, key, results(args.rows, f"e2e{rep}"), args.senders),
        "results/s",
    )
    copy = median_of(
        "ceiling: plain binary COPY (not idempotent)",
        args.reps,
        url,
        lambda rep: ceiling_copy(url, db_rows(url, results(args.rows, f"copy{rep}"))),
        "rows/s",
    )
    staged = median_of(
        "idempotent: COPY → temp, claim keys, move rows",
        args.reps,
        url,
        lambda rep: ceiling_idempotent(url, db_rows(url, results(args.rows, f"idem{rep}"))),
        "rows/s",
    )
    optimistic = median_of(
        "idempotent: claim keys (arrays), ids, COPY",
        args.reps,
        url,
        lambda rep: ceiling_idempotent(
            url, db_rows(url, results(args.rows, f"opt{rep}")), method=_keyed
        ),
        "rows/s",
    )
    optimistic_b = median_of(
        "  the same in batches of 500, a commit each",
        args.reps,
        url,
        lambda rep: ceiling_idempotent(
            url, db_rows(url, results(args.rows, f"ob{rep}")), BATCH, _keyed
        ),
        "rows/s",
    )
    ceiling = max(staged, optimistic)
    print(
        f"\n  end to end / fastest idempotent ceiling ({ceiling:,.0f} rows/s): {e2e / ceiling:.0%}"
        f" (goal ≥ 50%)\n  end to end / idempotent in batches of 500: {e2e / optimistic_b:.0%};"
        f" / plain COPY: {e2e / copy:.0%}"
    )


def measure_repeats(args: argparse.Namespace, base: str, key: str, url: str) -> None:
    """End to end without repeat pairs and with `cloud_repeat` on 1% of results, in turns
    (so both see the same machine and the same growing table); the goal: within 5%."""
    print("\nRepeat pairs (end to end over HTTP, batches of 500, runs in turns):")
    without: list[float] = []
    with_repeats: list[float] = []
    for rep in range(args.reps):
        # Which goes first alternates, so neither always meets the other's dirty pages.
        runs = [(without, 0.0, "norep"), (with_repeats, 0.01, "rep")]
        for figures, rate, tag in runs if rep % 2 == 0 else runs[::-1]:
            settle(url)
            rows = results(args.rows, f"{tag}{rep}", repeat_rate=rate)
            figures.append(end_to_end(base, key, rows, args.senders))
    a, b = statistics.median(without), statistics.median(with_repeats)
    for label, figures in (("without repeats", without), ("cloud_repeat on 1%", with_repeats)):
        runs = ", ".join(f"{f:,.0f}" for f in figures)
        print(f"  {label:<52} median {statistics.median(figures):>9,.0f} results/s   runs: {runs}")
    print(f"\n  with repeats / without: {b / a:.1%} (goal ≥ 95%)")


def services_redis_url(tmp: Path) -> str | None:
    """The Redis scripts/services started in `tmp` (None when it started none)."""
    env = tmp / "env"
    if not env.exists():
        return None
    for line in env.read_text().splitlines():
        if "SHADOWPLANE_TEST_REDIS_URL=" in line:
            return line.split("=", 1)[1].strip()
    return None


def serve(url: str, port: int, log: Path, reader: str, redis_url: str | None = None) -> Api:
    """The API with 2 workers on `url`, reading text with `reader`, as in production: with
    Redis (`redis_url`: SHADOWPLANE_BENCH_REDIS_URL, else the Redis this benchmark started),
    so Celery's beat, not the API, owns the periodic pass; with no Redis, the embedded
    scheduler is off (it would compute windows in the API's processes while they are
    measured)."""
    settings = {
        "SHADOWPLANE_DATABASE_URL": url,
        "SHADOWPLANE_LOG_LEVEL": "INFO",
        "SHADOWPLANE_TEXT_READER": reader,
    }
    if redis_url:
        settings["SHADOWPLANE_REDIS_URL"] = redis_url
    else:
        settings["SHADOWPLANE_TICK_SECONDS"] = "0"
    return start_api(settings, log, port=port)


def text_pool() -> list[tuple[str, str]]:
    """(edge, cloud) rewrites of ~3,000 characters, half English, half Chinese."""
    from benchmarks.comparators import rewrites

    # One rewrite in ten unfaithful somewhere (the others conserve everything), and the
    # simulator's odds per reply, which make most long pairs conflict: every conflict keeps
    # its payload, masked, with a diff listing each number and name of both sides.
    return rewrites("en", TEXT_CHARS, 100, seed=3, unfaithful=0.1) + rewrites(
        "zh", TEXT_CHARS, 100, seed=4, unfaithful=0.1
    )


def measure_text(args: argparse.Namespace, api: Api, key: str, url: str, log: Path) -> Api:
    """Label against text ingest, the text with each reader; the API it leaves running."""
    from benchmarks.comparators import rewrites

    base = f"http://127.0.0.1:{args.port}"
    n = args.text_rows
    pool = text_pool()
    conflicting = rewrites("en", TEXT_CHARS, 100, seed=5) + rewrites("zh", TEXT_CHARS, 100, seed=6)
    chars = statistics.mean(len(cloud) for _, cloud in pool)
    print(
        f"\nText ingest: {n:,} results per run, answers of ~{chars:,.0f} characters on each "
        "side (reply_rewrite: text_conservation, payloads redacted); one pair in ten "
        "unfaithful, unless said:"
    )

    def run(label: str, make: Callable[[int], list[dict[str, Any]]]) -> float:
        return median_of(
            label,
            args.reps,
            url,
            lambda rep: end_to_end(base, key, make(rep), args.senders),
            "results/s",
        )

    label = run("label task (ticket_classify)", lambda rep: results(n, f"tl{rep}"))
    native = run("text task, compiled reader", lambda rep: text_results(n, f"tn{rep}", pool))
    run(
        "  the same, nearly every pair conflicting",
        lambda rep: text_results(n, f"tc{rep}", conflicting),
    )
    api.stop()
    api = serve(url, args.port, log, "python", args.redis_url)
    python = run("text task, Python reader", lambda rep: text_results(n, f"tp{rep}", pool))
    api.stop()
    api = serve(url, args.port, log, args.reader, args.redis_url)
    print(
        f"\n  label / text with the compiled reader: {label / native:.1f}× (goal ≤ 2×); "
        f"label / text with the Python reader: {label / python:.1f}×; "
        f"compiled / Python: {native / python:.1f}×"
    )
    return api


# --- the per-result cost table (--profile) ----------------------------------------------


def in_process(url: str, bodies: list[bytes], context: IngestContext) -> float:
    """Seconds the server's path takes over these bodies in this process: each body decoded
    and validated, then ingested in one transaction, as the endpoint does."""
    engine = get_engine(url)
    started = time.perf_counter()
    for body in bodies:
        received_at = utcnow()
        valid, rejected = validation.validate_body(body, 1000)

        def work(
            session: Any, valid: Any = valid, rejected: Any = rejected, at: Any = received_at
        ) -> Any:
            return service.ingest(session, valid, list(rejected), at, context)

        report = in_transaction(engine, work)
        if report.accepted != len(valid) or report.rejected:
            raise SystemExit(f"in-process ingest refused results: {report.rejected[:3]}")
    return time.perf_counter() - started


def write_floor(
    url: str,
    bodies: list[bytes],
    context: IngestContext,
    writers: int,
    payloads: bool = True,
) -> float:
    """Seconds the server's write alone takes over these bodies: every item decoded and scored
    beforehand, untimed, as the endpoint does; then timed, `writers` processes (the senders'
    concurrency; processes, as the API's workers, so that no GIL is shared) each storing
    its share of the batches, one transaction a batch (`service.store`: keys claimed, free
    repeat pairs, rows and kept payloads copied, commit). An API that cost nothing would
    still take about this long with this schema on this machine."""
    received_at = utcnow()
    with session_scope(get_engine(url)) as session:
        items = [validation.validate_body(body, 1000)[0] for body in bodies]
        runtimes = task_runtimes(session, {item["task"] for batch in items for _, item in batch})
    tasks = {task.id: task for task in runtimes.values()}
    batches = [
        [
            service.stored_form(score(item, runtimes[item["task"]], received_at, context))
            for _, item in batch
        ]
        for batch in items
    ]
    if not payloads:  # what-if: no result keeps a payload
        for batch in batches:
            for scored in batch:
                scored.payload = None
    forking = multiprocessing.get_context("fork")
    start = forking.Barrier(writers + 1)

    def writer(share: list[list[Any]]) -> None:
        forget_engines()  # the parent's pool is not this process's
        engine = get_engine(url)
        engine.connect().close()  # connected before the clock starts
        start.wait()
        for scored in share:
            stored = in_transaction(
                engine, lambda session, scored=scored: service.store(session, scored, tasks)
            )
            if stored != len(scored):
                raise SystemExit(f"the write floor stored {stored} of {len(scored)} results")

    children = [forking.Process(target=writer, args=(batches[i::writers],)) for i in range(writers)]
    for child in children:
        child.start()
    start.wait()
    started = time.perf_counter()
    for child in children:
        child.join()
    seconds = time.perf_counter() - started
    if any(child.exitcode for child in children):
        raise SystemExit("a writer of the write floor failed (its error is above)")
    return seconds


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of process `root` and every process below it, the exited
    ones included (as their parents' reaped-children times)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / tick


def postmaster_pid(tmp: Path) -> int | None:
    """The PostgreSQL this benchmark started (None when it runs against another server)."""
    pid_file = tmp / "pgdata" / "postmaster.pid"
    if os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or not pid_file.exists():
        return None
    return int(pid_file.read_text().split()[0])


def ceiling_slim(url: str, rows: list[list[Any]], batch: int | None = None) -> float:
    """Binary COPY of the rows into a slim table: the same columns as `results`, one unique
    key `(task_id, request_id)`, no other index, not partitioned (made anew each time); in
    one transaction, or with `batch` a COPY and a commit per `batch` rows."""
    with psycopg.connect(pg_conninfo(url)) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_slim")
        conn.execute(f"CREATE TABLE bench_slim AS SELECT {COLS} FROM results WITH NO DATA")
        conn.execute("ALTER TABLE bench_slim ADD UNIQUE (task_id, request_id)")
        conn.commit()
        step = batch or len(rows)
        started = time.perf_counter()
        for i in range(0, len(rows), step):
            with conn.cursor() as cur:
                _copy(cur, "bench_slim", COLS, TYPES, rows[i : i + step])
            conn.commit()
        return len(rows) / (time.perf_counter() - started)


def measure_floor(args: argparse.Namespace, url: str) -> None:
    """What each part of the write costs: the floor as stored, then without kept payloads,
    without the key claim too, and without free repeats too (their probe skipped, the
    input-hash index dropped from this benchmark's own database, last), each beside the
    slim keyed table's COPY."""
    settings = Settings()
    with session_scope(get_engine(url)) as session:
        hash_key = service.id_hash_key(session, settings.id_hash_secret)
    context = IngestContext(id_hash_key=hash_key, max_backfill=settings.max_backfill)
    n = args.text_rows

    def bodies(tag: str) -> list[bytes]:
        items = results(n, tag)
        return [
            orjson.dumps({"results": items[i : i + BATCH]}) for i in range(0, len(items), BATCH)
        ]

    def every_key_new(_session: Any, rows: list[dict[str, Any]], _pg: bool) -> set[Any]:
        return {(row["task_id"], row["request_id"]) for row in rows}

    print(
        f"The write alone: {n:,} label results a run, scored beforehand, {args.senders} "
        f"writers, a transaction a batch of {BATCH}; median of {args.reps} runs, µs a result"
    )
    figures: dict[str, list[float]] = {}
    for rep in range(args.reps):
        settle(url)
        slim = 1e6 / ceiling_slim(url, db_rows(url, results(n, f"fs{rep}")))
        figures.setdefault("ceiling: binary COPY into a slim keyed table", []).append(slim)
        settle(url)
        batched = 1e6 / ceiling_slim(url, db_rows(url, results(n, f"fb{rep}")), batch=BATCH)
        figures.setdefault(f"  the same, a COPY and a commit per {BATCH} rows", []).append(batched)
        for what, kwargs, claims in (
            ("as stored", {}, True),
            ("no kept payloads", {"payloads": False}, True),
            ("no kept payloads, no key claim", {"payloads": False}, False),
        ):
            settle(url)
            with contextlib.ExitStack() as stack:
                if not claims:  # what-if: every key new, result_keys not written
                    stack.enter_context(mock.patch.object(repository, "_claim_keys", every_key_new))
                seconds = write_floor(
                    url, bodies(f"f{what[:6]}{rep}"), context, args.senders, **kwargs
                )
            figures.setdefault(what, []).append(seconds * 1e6 / n)
    with psycopg.connect(pg_conninfo(url)) as conn:
        conn.execute("DROP INDEX ix_results_input_hash_ts")  # this benchmark's database only
    for rep in range(args.reps):
        settle(url)
        with (
            mock.patch.object(repository, "_claim_keys", every_key_new),
            mock.patch.object(service, "free_repeats", lambda *_: None),
        ):
            seconds = write_floor(url, bodies(f"fi{rep}"), context, args.senders, payloads=False)
        figures.setdefault("… and no free repeats (their probe, the input-hash index)", []).append(
            seconds * 1e6 / n
        )
    slim = statistics.median(figures["ceiling: binary COPY into a slim keyed table"])
    batched = statistics.median(figures[f"  the same, a COPY and a commit per {BATCH} rows"])
    print(f"  {'':<58} {'µs':>7}  slim / it  (batched) / it")
    for what, values in figures.items():
        median = statistics.median(values)
        print(f"  {what:<58} {median:>7.1f}  {slim / median:>9.2f}  {batched / median:>13.2f}")


# The label results' write alone (service.store, the results scored beforehand), a result.
FLOOR = "floor: the server's write alone (scored before)"


def measure_profile(args: argparse.Namespace, api: Api, key: str, url: str, tmp: Path) -> None:
    """The per-result cost table: each stage in process, untimed, through HTTP, ceilings."""
    n = args.text_rows
    settings = Settings()
    with session_scope(get_engine(url)) as session:
        hash_key = service.id_hash_key(session, settings.id_hash_secret)
    context = IngestContext(
        id_hash_key=hash_key,
        max_backfill=settings.max_backfill,
        max_chars=settings.compare_max_chars,
    )
    pool = text_pool()
    kinds: dict[str, Callable[[str], list[dict[str, Any]]]] = {
        "label": lambda tag: results(n, tag),
        "text": lambda tag: text_results(n, tag, pool),
    }
    kinds = {kind: make for kind, make in kinds.items() if kind in args.kinds}
    pg = postmaster_pid(tmp)
    per: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
    ceilings: dict[str, list[float]] = {}

    def add(kind: str, row: str, micros: float) -> None:
        per[kind].setdefault(row, []).append(micros)

    def bodies_of(items: list[dict[str, Any]]) -> list[bytes]:
        return [
            orjson.dumps({"results": items[i : i + BATCH]}) for i in range(0, len(items), BATCH)
        ]

    print(
        f"Per-result cost: {n:,} results a run, batches of {BATCH}, median of {args.reps} runs "
        "(µs per result; in process, the stages sampled in "
        + (
            "this process's CPU time, the waits on PostgreSQL left out)"
            if args.cpu
            else "wall time)"
        )
    )
    in_process(url, bodies_of(results(BATCH * 2, "warm")), context)  # caches, plans
    for rep in range(args.reps):
        for kind, make in kinds.items():
            settle(url)
            sampler = StageSampler(cpu=args.cpu)
            bodies = bodies_of(make(f"pt{kind}{rep}"))
            # As the API does after start-up: what exists now is frozen, so the collector
            # walks only what the run allocates (this process holds every run's items).
            gc.collect()
            gc.freeze()
            with sampler.sampling():
                wall = in_process(url, bodies, context)
            gc.unfreeze()
            for stage in ORDER:
                add(kind, stage, sampler.share(stage) * 1e6 / n)
            add(kind, "  of all these: the garbage collector (wall)", sampler.gc_seconds * 1e6 / n)
            if args.cpu:
                add(kind, "in process, CPU (the stages' sum)", sampler.seconds * 1e6 / n)
            add(kind, "in process, wall", wall * 1e6 / n)
            items = make(f"ph{kind}{rep}")
            settle(url)
            api_cpu = tree_cpu_seconds(api.proc.pid)
            pg_cpu = tree_cpu_seconds(pg) if pg else 0.0
            rate = end_to_end(api.base, key, items, args.senders)
            add(kind, "through HTTP: wall per result (2 workers)", 1e6 / rate)
            add(
                kind,
                "  CPU of the API's processes",
                (tree_cpu_seconds(api.proc.pid) - api_cpu) * 1e6 / n,
            )
            if pg:
                add(kind, "  CPU of PostgreSQL", (tree_cpu_seconds(pg) - pg_cpu) * 1e6 / n)
        # What the schema itself allows: the label results' write alone.
        settle(url)
        floor = write_floor(url, bodies_of(results(n, f"pf{rep}")), context, writers=args.senders)
        ceilings.setdefault(FLOOR, []).append(floor * 1e6 / n)
        # The ceilings: the label results' rows, as the server stores them.
        settle(url)
        copy_rate = ceiling_copy(url, db_rows(url, results(n, f"pc{rep}")))
        ceilings.setdefault("ceiling: binary COPY into results", []).append(1e6 / copy_rate)
        settle(url)
        slim_rate = ceiling_slim(url, db_rows(url, results(n, f"ps{rep}")))
        ceilings.setdefault("ceiling: binary COPY into a slim keyed table", []).append(
            1e6 / slim_rate
        )

    rows = list(dict.fromkeys(row for kind in per for row in per[kind]))
    print(f"\n  {'stage':<46} " + " ".join(f"{kind:>9}" for kind in per))
    for row in rows:
        cells = [
            f"{statistics.median(per[kind][row]):>9.1f}" if row in per[kind] else f"{'':>9}"
            for kind in per
        ]
        print(f"  {row:<46} {' '.join(cells)}")
    for row, figures in ceilings.items():
        unit = "(a result)" if row == FLOOR else "(a row)"
        print(f"  {row:<46} {statistics.median(figures):>9.1f}  {unit}")
    http = {
        kind: statistics.median(per[kind]["through HTTP: wall per result (2 workers)"])
        for kind in per
    }
    copy = statistics.median(ceilings["ceiling: binary COPY into results"])
    slim = statistics.median(ceilings["ceiling: binary COPY into a slim keyed table"])
    if "label" in http:
        # The goal's ceiling is the slim keyed table: the same rows, only the unique key.
        # `results` (day partitions, four indexes, a foreign key) is what this schema pays.
        print(
            f"\n  label through HTTP / COPY into the slim keyed table: "
            f"{slim / http['label']:.2f} (goal ≥ 0.25); / COPY into results: "
            f"{copy / http['label']:.2f}"
        )
        floor = statistics.median(ceilings[FLOOR])
        print(
            f"  the write alone / COPY into the slim keyed table: {slim / floor:.2f} (about the most "
            "label through HTTP could reach with this schema: an API that cost nothing)"
        )
    if len(http) == 2:
        print(
            f"  text through HTTP / label through HTTP: {http['label'] / http['text']:.2f} "
            "(goal ≥ 0.5)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--singles", type=int, default=2000, help="one-result posts per latency run"
    )
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--port", type=int, help="the API's port (default: a free one)")
    parser.add_argument(
        "--only",
        choices=["latency", "throughput", "text", "repeats", "floor"],
        help="run one part only",
    )
    parser.add_argument(
        "--text-rows",
        type=int,
        default=10_000,
        help="results per run of the text part and of each kind in --profile",
    )
    parser.add_argument(
        "--profile", action="store_true", help="only the per-result cost table (see above)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="with --profile: the stages in CPU time (robust on a busy machine), not wall time",
    )
    parser.add_argument(
        "--kinds",
        type=lambda v: v.split(","),
        default=["label", "text"],
        help="with --profile: label,text (the default), label or text",
    )
    parser.add_argument(
        "--reader",
        choices=["native", "python", "auto"],
        default="native",
        help="the API's text reader outside the text part (SHADOWPLANE_TEXT_READER)",
    )
    args = parser.parse_args()
    args.port = args.port or free_port()

    tmp = Path(tempfile.mkdtemp(prefix="shadowplane-bench."))
    os.chmod(tmp, 0o755)
    admin_url = os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL") or start_services(tmp)
    args.redis_url = os.environ.get("SHADOWPLANE_BENCH_REDIS_URL") or services_redis_url(tmp)
    api = None
    try:
        url = fresh_database(admin_url, "sp_bench")
        with session_scope(get_engine(url)) as session:
            apply_config(session, TASK, actor="bench")
            apply_config(session, yaml.safe_load(TEXT_TASK.read_text()), actor="bench")
            _, key = create_key(session, name="bench", scopes=["ingest"], actor="bench")
        api = serve(url, args.port, tmp / "api.log", args.reader, args.redis_url)
        base = f"http://127.0.0.1:{args.port}"

        print(
            f"PostgreSQL {psycopg.connect(pg_conninfo(url)).info.server_version}, "
            f"{os.cpu_count()} cores, "
            + ("" if args.profile else f"{args.rows:,} results per run, ")
            + f"batches of {BATCH}, {args.senders} senders, API with 2 uvicorn workers\n"
        )
        # Latency first, on a young table; then throughput. Every measured run starts
        # after a CHECKPOINT, so one run's dirty pages are not flushed during the next.
        if args.profile:
            measure_profile(args, api, key, url, tmp)
            return
        if args.only == "floor":
            measure_floor(args, url)
            return
        if args.only in (None, "latency"):
            measure_latency(args, base, key, url)
        if args.only in (None, "throughput"):
            measure_throughput(args, base, key, url)
        if args.only in (None, "repeats"):
            measure_repeats(args, base, key, url)
        if args.only in (None, "text"):
            api = measure_text(args, api, key, url, tmp / "api.log")
    finally:
        if api is not None:
            api.stop()
        forget_engines()
        if not os.environ.get("SHADOWPLANE_BENCH_DATABASE_URL"):
            stop_services(tmp)


if __name__ == "__main__":
    main()

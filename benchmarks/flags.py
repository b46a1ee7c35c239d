"""Flag serving: polls per second and their latency beside the ceiling measured in the same
run, the time from a rollback to a router answering cloud, and the memory of open streams.

    .venv/bin/python benchmarks/flags.py [--seconds 8] [--reps 3] [--tasks 20] [--workers 1,2]
        [--streams 1000]

The server is the real application (`controlplane.api:create_app`) under uvicorn with the
settings `shadowplane api` uses (uvloop, httptools, no access log), on a SQLite file (a
poll never reads the database), with one route added for the ceiling: `GET /_bench/304`
answers a constant 304 with an ETag, registered first, through the same middleware, with
no authentication and no flags — what this server costs per request before any flag
work. The load generator shares the machine: `wrk` (Debian's package; a Lua script sends
the key and If-None-Match) when installed, else a small asyncio client.

1. Throughput, with 1 and 2 workers (`--workers`), medians of `--reps` runs of `--seconds`,
   interleaved: the ceiling; conditional polls of GET /v1/flags (304); conditional polls
   of one flag; full polls (200 with the document of `--tasks` flags). Requests/s, p50,
   p99. The conditional polls are answered before routing (controlplane.rollout.flagpolls),
   as in production: the key, the rate and the ETag checked in memory.
2. Latency at a fixed rate, on the same servers: conditional polls of GET /v1/flags sent
   open-loop at `--rate` (1,000/s) for `--seconds`, each timed from its scheduled send.
3. Rollback to router: a task in canary at 5% and a session the canary serves the edge;
   the time from a rollback (decided at a random moment) until
   `controlplane.client.FlagClient.route` answers cloud, `--rollbacks` times each:
   streaming from one worker, decided through the API (the worker reloads on its own
   commit); streaming from two workers without Redis, decided through the API (maybe the
   other worker) and by another process (this one, writing the database): the workers find
   it by their check every second; the same with Redis, where the writer publishes (when
   `redis-server` is installed); polling every `--poll-interval` seconds.
4. Open streams: the server's resident memory (1 worker) before and after `--streams`
   streams are connected and have read the document; then the time until every one of
   them has read the event of a rollback.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._support import Api, free_port, percentile, rss_mib, start_api  # noqa: E402
from controlplane.client import FlagClient, sticky_bucket  # noqa: E402
from controlplane.db import get_engine, session_scope  # noqa: E402
from controlplane.keys.service import create_key  # noqa: E402
from controlplane.migrate import upgrade  # noqa: E402
from controlplane.models import Task  # noqa: E402
from controlplane.rollout import actions, flagbus  # noqa: E402
from controlplane.rollout.configs import apply_config  # noqa: E402

TASK = "ticket_classify"
BARE = "/_bench/304"
PLAIN = "/_bench/starlette-304"


def bench_app() -> Any:
    """The application `shadowplane api` serves, plus two bare routes matched first: a
    FastAPI route with no dependency (the ceiling) and a plain Starlette route (what is left
    without FastAPI's per-route work), both answering a constant 304."""
    from fastapi import Response
    from starlette.routing import Route

    from controlplane.api import create_app

    app = create_app()
    headers = {"ETag": '"bench"', "Cache-Control": "no-cache"}

    @app.get(BARE, include_in_schema=False)
    async def bare() -> Response:
        return Response(status_code=304, headers=headers)

    async def plain(_: Any) -> Response:
        return Response(status_code=304, headers=headers)

    routes = app.router.routes
    routes.insert(0, routes.pop())
    routes.insert(0, Route(PLAIN, plain, methods=["GET"]))
    return app


def seed(url: str, tasks: int) -> dict[str, str]:
    """`tasks` tasks (the first one in canary at 5%), and a reading and an acting key."""
    upgrade(url)
    engine = get_engine(url)
    with session_scope(engine) as session:
        keys = {
            scope: create_key(session, name=f"bench-{scope}", scopes=[scope], actor="bench")[1]
            for scope in ("flags:read", "admin")
        }
        for i in range(tasks):
            apply_config(
                session,
                {
                    "task": TASK if i == 0 else f"task_{i:03d}",
                    "comparator": {"kind": "label", "labels": ["a", "b", "c", "d"]},
                    "max_input_tokens": 512 + i,
                    "sticky_by": "user" if i % 3 == 0 and i else "session",
                },
                actor="bench",
            )
    actions.promote(engine, TASK, actor="bench", reason="bench", force=True, veto=1.0)
    return keys


def serve(url: str, workdir: Path, workers: int, **settings: str) -> Api:
    """The benchmark app under uvicorn, as `shadowplane api` runs it."""
    port = free_port()
    return start_api(
        {
            "SHADOWPLANE_DATABASE_URL": url,
            "SHADOWPLANE_TICK_SECONDS": "0",
            # The benchmark measures serving, not the per-key limit (its check still runs).
            "SHADOWPLANE_RATE_FLAGS_PER_SECOND": "1e9",
            "SHADOWPLANE_RATE_FLAGS_BURST": str(10**9),
            "SHADOWPLANE_FLAG_STREAMS_PER_KEY": "100000",
            **settings,
        },
        workdir / f"api-{port}.log",
        workers=workers,
        port=port,
        factory="benchmarks.flags:bench_app",
    )


# --- load ------------------------------------------------------------------------------


def _seconds(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def wrk(
    base: str, path: str, headers: dict[str, str], seconds: float, connections: int, workdir: Path
) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 (seconds) of `wrk` against one URL."""
    script = workdir / "headers.lua"
    script.write_text(
        "".join(f'wrk.headers["{name}"] = [[{value}]]\n' for name, value in headers.items())
    )
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--latency",
            "-s",
            str(script),
            base + path,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    if "Non-2xx or 3xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors against {path}:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _seconds(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _seconds(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    return rate, p50, p99


def _request(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: bench"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
    if length and int(length.group(1)):
        await reader.readexactly(int(length.group(1)))
    return status


async def _closed_loop(
    base: str, path: str, headers: dict[str, str], seconds: float, connections: int
) -> list[float]:
    host, port = base.removeprefix("http://").split(":")
    request = _request(path, headers)
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        while time.perf_counter() < end:
            started = time.perf_counter()
            if await _exchange(reader, writer, request) >= 400:
                raise RuntimeError(f"{path} failed")
            latencies.append(time.perf_counter() - started)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies


def load(
    base: str, path: str, headers: dict[str, str], seconds: float, connections: int, workdir: Path
) -> tuple[float, float, float]:
    if shutil.which("wrk"):
        return wrk(base, path, headers, seconds, connections, workdir)
    latencies = asyncio.run(_closed_loop(base, path, headers, seconds, connections))
    return len(latencies) / seconds, percentile(latencies, 50), percentile(latencies, 99)


async def _open_loop(
    base: str, path: str, headers: dict[str, str], rate: float, seconds: float, connections: int
) -> list[float]:
    """Requests sent at `rate` per second on a pool of connections; each latency counts
    from the request's scheduled time, so queueing behind a slow answer is measured."""
    host, port = base.removeprefix("http://").split(":")
    request = _request(path, headers)
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection(host, int(port)))
    latencies: list[float] = []

    async def one(due: float) -> None:
        reader, writer = await pool.get()
        try:
            if await _exchange(reader, writer, request) >= 400:
                raise RuntimeError(f"{path} failed")
        finally:
            pool.put_nowait((reader, writer))
        latencies.append(time.perf_counter() - due)

    start = time.perf_counter() + 0.1
    tasks = []
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(due)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait()[1].close()
    return latencies


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


# --- measurements ----------------------------------------------------------------------


def throughput(args: argparse.Namespace, url: str, keys: dict[str, str], workdir: Path) -> None:
    read = {"Authorization": f"Bearer {keys['flags:read']}"}
    generator = "wrk -t1" if shutil.which("wrk") else "asyncio client"
    print(
        f"1. Polls per second ({generator}, {args.connections} connections, medians of {args.reps} runs of {args.seconds:g} s)"
    )
    print(f"{'workers':>7}  {'request':<34} {'req/s':>9} {'p50':>9} {'p99':>9} {'of ceiling':>10}")
    for workers in args.workers:
        server = serve(url, workdir, workers)
        try:
            every = httpx.get(f"{server.base}/v1/flags", headers=read)
            one = httpx.get(f"{server.base}/v1/flags/{TASK}", headers=read)
            cases: list[tuple[str, str, dict[str, str]]] = [
                ("ceiling: bare route, constant 304", BARE, {**read, "If-None-Match": '"bench"'}),
                ("(bare Starlette route, 304)", PLAIN, {**read, "If-None-Match": '"bench"'}),
                (
                    "GET /v1/flags, 304",
                    "/v1/flags",
                    {**read, "If-None-Match": every.headers["etag"]},
                ),
                (
                    "GET /v1/flags/{task}, 304",
                    f"/v1/flags/{TASK}",
                    {**read, "If-None-Match": one.headers["etag"]},
                ),
                (f"GET /v1/flags, 200 ({len(every.content):,} B)", "/v1/flags", read),
            ]
            for _, path, headers in cases:  # warm up every path once
                load(server.base, path, headers, 1, args.connections, workdir)
            runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _, _ in cases}
            for _ in range(args.reps):
                for label, path, headers in cases:
                    runs[label].append(
                        load(server.base, path, headers, args.seconds, args.connections, workdir)
                    )
            ceiling = statistics.median(r[0] for r in runs[cases[0][0]])
            for label, _, _ in cases:
                rate = statistics.median(r[0] for r in runs[label])
                p50 = statistics.median(r[1] for r in runs[label])
                p99 = statistics.median(r[2] for r in runs[label])
                print(
                    f"{workers:>7}  {label:<34} {rate:>9,.0f} {ms(p50):>9} {ms(p99):>9} {rate / ceiling:>10.0%}"
                )

            latencies = asyncio.run(
                _open_loop(
                    server.base,
                    "/v1/flags",
                    {**read, "If-None-Match": every.headers["etag"]},
                    args.rate,
                    args.seconds,
                    32,
                )
            )
            print(
                f"{workers:>7}  GET /v1/flags, 304 at {args.rate:,.0f}/s open-loop: "
                f"p50 {ms(percentile(latencies, 50))}, p99 {ms(percentile(latencies, 99))}, "
                f"max {ms(max(latencies))} ({len(latencies):,} polls)"
            )
        finally:
            server.stop()
    print()


def _canary_session() -> str:
    """A session the 5% canary serves the edge."""
    return next(f"s-{i}" for i in range(10_000) if sticky_bucket(TASK, f"s-{i}") < 5)


def _until_cloud(client: FlagClient, session: str, timeout: float = 60.0) -> float:
    deadline = time.perf_counter() + timeout
    while client.route(TASK, session_id=session, input_tokens=10).served != "cloud":
        if time.perf_counter() > deadline:
            raise RuntimeError("the client never answered cloud")
        time.sleep(0.0005)
    return time.perf_counter()


def ensure_canary(engine: Any) -> None:
    """The task back in its 5% canary after a rollback (re-armed, then promoted)."""
    with session_scope(engine) as db:
        stage = db.scalar(select(Task.stage).where(Task.name == TASK))
    if stage == "rolled_back":
        actions.rearm(engine, TASK, actor="bench", reason="bench")
        actions.promote(engine, TASK, actor="bench", reason="bench", force=True, veto=1.0)


def _to_edge(engine: Any, client: FlagClient, session: str) -> None:
    """Back to the 5% canary, and the client has seen it."""
    ensure_canary(engine)
    deadline = time.monotonic() + 60
    while client.route(TASK, session_id=session, input_tokens=10).served != "edge":
        if time.monotonic() > deadline:
            raise RuntimeError("the client never saw the canary")
        time.sleep(0.01)


def rollback_times(
    server: Api,
    engine: Any,
    keys: dict[str, str],
    reps: int,
    *,
    stream: bool,
    through_api: bool,
    poll_interval: float = 10.0,
) -> list[float]:
    session = _canary_session()
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    rng = random.Random(7)
    times = []
    with FlagClient(
        server.base, keys["flags:read"], stream=stream, poll_interval=poll_interval
    ) as client:
        client.wait_ready(30)
        for _ in range(reps):
            _to_edge(engine, client, session)
            # Seeing the canary lines the next step up with the server's check (1 s) or the
            # client's poll: decide at a random moment after it, as a real rollback would.
            time.sleep(0.3 + rng.uniform(0, poll_interval if not stream else 1.0))
            started = time.perf_counter()
            if through_api:
                httpx.post(
                    f"{server.base}/v1/tasks/{TASK}/rollback",
                    json={"reason": "bench"},
                    headers=admin,
                    timeout=30,
                ).raise_for_status()
            else:
                actions.rollback(engine, TASK, actor="bench", reason="bench")
            times.append(_until_cloud(client, session) - started)
    return times


def rollbacks(args: argparse.Namespace, url: str, keys: dict[str, str], workdir: Path) -> None:
    engine = get_engine(url)
    print(
        f"3. Rollback to a FlagClient answering cloud ({args.rollbacks} rollbacks each; median, max)"
    )

    def show(label: str, times: list[float]) -> None:
        print(f"   {label:<62} {ms(statistics.median(times)):>10} {ms(max(times)):>10}")

    server = serve(url, workdir, 1)
    try:
        show(
            "streaming, 1 worker, decided through the API",
            rollback_times(server, engine, keys, args.rollbacks, stream=True, through_api=True),
        )
    finally:
        server.stop()
    server = serve(url, workdir, 2)
    try:
        show(
            "streaming, 2 workers, decided through the API (no Redis)",
            rollback_times(server, engine, keys, args.rollbacks, stream=True, through_api=True),
        )
        show(
            "streaming, 2 workers, decided by another process (no Redis)",
            rollback_times(server, engine, keys, args.rollbacks, stream=True, through_api=False),
        )
        show(
            f"polling every {args.poll_interval:g} s, 2 workers, through the API",
            rollback_times(
                server,
                engine,
                keys,
                args.rollbacks,
                stream=False,
                through_api=True,
                poll_interval=args.poll_interval,
            ),
        )
    finally:
        server.stop()
    binary = shutil.which("redis-server")
    if binary is None:
        print("   (redis-server is not installed: the Redis case is skipped)")
        print()
        return
    redis_port = free_port()
    redis = subprocess.Popen(
        [
            binary,
            "--port",
            str(redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    remove = flagbus.add_redis(redis_url)  # this process publishes what it decides
    try:
        time.sleep(0.5)
        server = serve(url, workdir, 2, SHADOWPLANE_REDIS_URL=redis_url)
        try:
            show(
                "streaming, 2 workers, decided by another process (Redis)",
                rollback_times(
                    server, engine, keys, args.rollbacks, stream=True, through_api=False
                ),
            )
        finally:
            server.stop()
    finally:
        remove()
        redis.terminate()
        redis.wait(timeout=30)
    print()


async def _open_streams(
    base: str, key: str, count: int
) -> tuple[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], float]:
    host, port = base.removeprefix("http://").split(":")
    request = _request("/v1/flags/stream", {"Authorization": f"Bearer {key}"})
    started = time.perf_counter()

    async def one() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head[:16]:
            raise RuntimeError(head.decode(errors="replace"))
        await reader.readuntil(b"\n\n")  # the first event (chunked: its size line comes first)
        return reader, writer

    streams = []
    for start in range(0, count, 100):  # in waves, as routers would (re)connect
        streams += await asyncio.gather(*(one() for _ in range(start, min(count, start + 100))))
    return streams, time.perf_counter() - started


async def _all_hear(
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], marker: bytes
) -> None:
    async def hear(reader: asyncio.StreamReader) -> None:
        while marker not in await reader.readuntil(b"\n\n"):
            pass

    await asyncio.gather(*(hear(reader) for reader, _ in streams))


def stream_memory(args: argparse.Namespace, url: str, keys: dict[str, str], workdir: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.streams * 2 + 256)), hard))
    engine = get_engine(url)
    ensure_canary(engine)
    server = serve(url, workdir, 1)
    admin = {"Authorization": f"Bearer {keys['admin']}"}

    async def run() -> None:
        # A few streams and polls first, so what is measured is what more streams cost.
        warm, _ = await _open_streams(server.base, keys["flags:read"], 10)
        before = rss_mib(server.proc.pid)
        streams, took = await _open_streams(server.base, keys["flags:read"], args.streams)
        await asyncio.sleep(1)
        after = rss_mib(server.proc.pid)
        print(f"4. {args.streams:,} open streams on one worker (opened in {took:.1f} s)")
        print(
            f"   server RSS {before:.1f} MiB before, {after:.1f} MiB after: {after - before:.1f} MiB, {(after - before) * 1024 / args.streams:.1f} KiB per stream"
        )
        revision = httpx.get(
            f"{server.base}/v1/flags", headers={"Authorization": f"Bearer {keys['flags:read']}"}
        ).json()["revision"]
        started = time.perf_counter()
        await asyncio.to_thread(
            lambda: httpx.post(
                f"{server.base}/v1/tasks/{TASK}/rollback",
                json={"reason": "bench"},
                headers=admin,
                timeout=30,
            ).raise_for_status()
        )
        await _all_hear(streams, f"id: {revision + 1}\n".encode())
        print(
            f"   a rollback through the API reached all {args.streams:,} streams in {ms(time.perf_counter() - started)}"
        )
        polls = httpx.get(
            f"{server.base}/v1/flags", headers={"Authorization": f"Bearer {keys['flags:read']}"}
        )
        print(f"   a poll meanwhile: {polls.status_code}")
        for _, writer in streams + warm:
            writer.close()

    try:
        asyncio.run(run())
    finally:
        server.stop()
    print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="the polls' servers: workers of each, comma-separated (default 1,2)",
    )
    parser.add_argument("--rollbacks", type=int, default=10)
    parser.add_argument("--poll-interval", type=float, default=10.0)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument(
        "--only", choices=["polls", "rollbacks", "streams"], help="run one part only"
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="shadowplane-flags-bench."))
    url = f"sqlite:///{workdir / 'bench.db'}"
    keys = seed(url, args.tasks)
    print(
        f"{os.cpu_count()} cores, {args.tasks} tasks, SQLite, the load generator on the same machine\n"
    )
    try:
        parts: dict[str, Callable[[argparse.Namespace, str, dict[str, str], Path], None]] = {
            "polls": throughput,
            "rollbacks": rollbacks,
            "streams": stream_memory,
        }
        for name, part in parts.items():
            if args.only in (None, name):
                part(args, url, keys, workdir)
    finally:
        get_engine(url).dispose()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

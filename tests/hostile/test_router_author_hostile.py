"""Hostile review by the author of a routing service that must never be blocked or slowed by
Shadowplane, and for whom "when in doubt, route to the cloud": the Python client against a
real `shadowplane api` (its own SQLite, started per test) and against what can stand in
front of it (a front that answers garbage for the API, a fork of the router's process).

Each test here was a strict xfail naming a defect found in this review, and is a plain
test since it was fixed (reading JSON refuses a value nested too deeply as unreadable, and
the flags thread survives an unexpected failure; in a forked child the flags client, the
reporter and `shadow_compare`'s pools start again with threads of their own; `close()`
counts and logs the held results it gives up on).

1. A flags answer nested deeper than Python's recursion limit (a few hundred KiB of `[`,
   well under `max_document_bytes`) raises RecursionError out of `json.loads`, which the
   client catches only as ValueError: the background thread dies ("the background thread
   failed") and never fetches again, so a rollback made once the API answers sanely again
   is never followed (the copy routes to the edge until `max_staleness`, then every task to
   the cloud for good). A failed fetch should be one failed fetch.
2. The same nesting in the `cache_path` file makes `FlagClient(...)` itself raise, so the
   router does not start; README says a cache file whose age cannot be told is ignored.
3. A `FlagClient` started before the process forks (gunicorn `--preload`, the README's
   module-level client) has no thread in the child: the child never hears a kill, routes
   to the edge for `max_staleness` (600 s) and `status()` says `ok` with no error.
4. `shadow_compare` in a child forked after the parent called it: the pools count the
   parent's idle threads, which the child does not have, so the child's edge call is queued
   with no thread to run it: the worker's first requests (one per thread idle at the fork)
   each wait the whole `edge_timeout` (5 s by default) and are answered by the cloud as an
   edge `timeout`, though the edge answers at once.
5. A `ResultReporter` made before the fork drops every result the child reports (counted,
   as `stopped`): a preloaded router reports nothing from any worker.
6. `close(timeout)` returns with a result still held (a repeat or side beside still
   running) neither counted in `dropped` nor logged: the router that logs its drops at
   shutdown sees none, and the process then exits with the result lost.
"""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.client import FlagClient, ResultReporter
from controlplane.client.tls import default_tls
from controlplane.db import get_engine
from tests.client.fake import Exchange, FakeServer
from tests.client.test_flag_client import _to_full
from tests.liveapi import ApiServer, run_python, seed, wait_until

TICKET = "ticket_classify"
DEEP = b"[" * 200_000  # 200 KB: far under max_document_bytes (8 MiB)


def _served(flags: FlagClient) -> str:
    return flags.route(TICKET, session_id="s-1", input_tokens=100).served


@pytest.fixture
def live_api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    """The real API on a migrated SQLite database, with the example tasks and router keys;
    not started (the test starts it)."""
    api = ApiServer(sqlite_url, tmp_path / "api.log", seed(sqlite_url))
    get_engine(sqlite_url).dispose()
    try:
        yield api
    finally:
        api.kill()


@pytest.fixture
def full_api(live_api: ApiServer) -> Iterator[ApiServer]:
    """The real API running, ticket_classify at `full` (the edge serves)."""
    live_api.start()
    _to_full(live_api)
    yield live_api


# A router process as gunicorn runs one with `--preload`: the app (and the module-level
# clients of README's example) made once, then worker processes forked from it. Run as a
# process of its own (`run_python`, forked from a process without threads), never inside
# pytest's: `worker()` runs in the forked child, its JSON answer printed by the parent.
PRELOADED = """
import json, os, time
import httpx
from controlplane.client import FlagClient, ResultReporter, shadow_compare

URL, KEY, ADMIN = os.environ["URL"], os.environ["KEY"], os.environ["ADMIN"]
TICKET = "ticket_classify"
{setup}
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        out = worker()
    except BaseException as exc:
        out = "raised " + repr(exc)
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
{parent}
data = b""
while chunk := os.read(r, 65536):
    data += chunk
os.waitpid(pid, 0)
print(json.dumps(json.loads(data)))
"""


def _preloaded(api: ApiServer, workdir: Path, setup: str, parent: str = "") -> Any:
    """What the forked worker of a preloaded router answered (`PRELOADED`)."""
    env = {"URL": api.base, "KEY": api.keys["router"], "ADMIN": api.keys["admin"]}
    code = PRELOADED.format(setup=textwrap.dedent(setup), parent=textwrap.dedent(parent))
    done = run_python(code, env, workdir, timeout=40)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _result(request_id: str) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "task": TICKET,
        "ts": _now(),
        "input_tokens": 10,
        "decision": "cloud",
        "served": "cloud",
        "cloud": {"output": "refund", "latency_ms": 3.0},
    }


# -- 1. a flags answer nested too deeply ---------------------------------------------------


class GarbageFront:
    """A front (a load balancer, a proxy) before the real API: it passes `GET /v1/flags` on,
    headers and all, except while `garbage` is set, when it answers 200 with that body."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.garbage: bytes | None = None
        self.server = FakeServer(self._answer)

    def _answer(self, exchange: Exchange) -> None:
        if exchange.path != "/v1/flags":
            exchange.reply(404, b'{"detail":"not here"}')
            return
        if self.garbage is not None:
            exchange.reply(200, self.garbage)
            return
        passed = {
            k: v for k, v in exchange.headers.items() if k in ("authorization", "if-none-match")
        }
        got = httpx.get(
            f"{self.api.base}/v1/flags", headers=passed, timeout=10, verify=default_tls()
        )
        keep = ("etag", "x-shadowplane-stale")
        exchange.reply(
            got.status_code,
            got.content,
            headers={k: v for k, v in got.headers.items() if k.lower() in keep},
        )


def test_a_flags_answer_nested_too_deeply_is_one_failed_fetch_not_the_end_of_polling(
    full_api: ApiServer,
) -> None:
    front = GarbageFront(full_api)
    try:
        with FlagClient(
            front.server.base,
            full_api.keys["flags"],
            stream=False,
            poll_interval=0.05,
            max_backoff=0.1,
        ) as flags:
            assert flags.wait_ready(30)
            assert _served(flags) == "edge"
            front.garbage = DEEP
            polls = len(front.server.requests())
            wait_until(
                lambda: len(front.server.requests()) > polls + 1 or flags.status().error,
                "the client to read the garbage",
            )
            front.garbage = None  # the API answers again, sanely: then the task rolls back
            answer = full_api.call("POST", f"/v1/tasks/{TICKET}/rollback", json={"reason": "x"})
            assert answer.status_code == 200, answer.text
            # A client that polls again follows the rollback within a few polls.
            wait_until(lambda: _served(flags) == "cloud", "the rollback to reach the client", 5)
            assert flags.status().error is None
    finally:
        front.server.close()


# -- 2. a cache file nested too deeply -----------------------------------------------------


def test_a_cache_file_nested_too_deeply_is_ignored_and_the_router_starts(tmp_path: Path) -> None:
    cache = tmp_path / "flags.json"
    cache.write_bytes(DEEP)
    # Nothing listens on the port: the router must start all the same, on the cloud.
    flags = FlagClient("http://127.0.0.1:9", "k", stream=False, cache_path=cache)
    try:
        assert _served(flags) == "cloud"
        assert "cache_path" in (flags.status().error or "")
    finally:
        flags.close()


# -- 3 to 5. the router's process forks after the client started ----------------------------


def test_a_kill_reaches_a_worker_forked_after_the_flag_client_started(
    full_api: ApiServer, tmp_path: Path
) -> None:
    setup = """
        flags = FlagClient(URL, KEY, poll_interval=0.2).start()
        assert flags.wait_ready(30)

        def served():
            return flags.route(TICKET, session_id="s-1", input_tokens=100).served

        assert served() == "edge"

        def worker():  # it routes; the parent kills once it forked
            deadline = time.monotonic() + 5
            while served() != "cloud" and time.monotonic() < deadline:
                time.sleep(0.05)
            return served()
    """
    parent = """
        answer = httpx.post(
            URL + "/v1/kill",
            json={"reason": "hostile review"},
            headers={"Authorization": "Bearer " + ADMIN},
        )
        assert answer.status_code == 200, answer.text
        # The parent's own copy follows the kill, as README promises (about a second).
        deadline = time.monotonic() + 10
        while served() != "cloud" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert served() == "cloud"
    """
    # The worker, serving requests, must not go on sending them to the edge.
    assert _preloaded(full_api, tmp_path, setup, parent) == "cloud"


def test_shadow_compare_in_a_forked_worker_serves_the_edge_without_waiting_its_timeout(
    full_api: ApiServer, tmp_path: Path
) -> None:
    setup = """
        flags = FlagClient(URL, KEY, stream=False).start()
        assert flags.wait_ready(30)

        def answer():
            return shadow_compare(
                {"text": "where is my refund"},
                edge_fn=lambda p: "refund",
                cloud_fn=lambda p: "cloud answered",
                client=flags,
                task=TICKET,
                input_tokens=100,
                session_id="s-1",
                edge_timeout=2.0,
            )

        assert answer() == "refund"  # the app warming up before the workers are forked

        def worker():
            return [answer(), answer()]
    """
    # The edge answers at once, so it serves: not the cloud, after 2 s, as an edge timeout.
    assert _preloaded(full_api, tmp_path, setup) == ["refund", "refund"]


def test_a_reporter_made_before_a_fork_delivers_what_the_worker_reports(
    live_api: ApiServer, tmp_path: Path
) -> None:
    live_api.start()
    setup = """
        from datetime import UTC, datetime

        reporter = ResultReporter(URL, KEY, flush_interval=0.05)

        def worker():
            queued = reporter.report({
                "request_id": "forked-1",
                "task": TICKET,
                "ts": datetime.now(UTC).isoformat(),
                "input_tokens": 10,
                "decision": "cloud",
                "served": "cloud",
                "cloud": {"output": "refund", "latency_ms": 3.0},
            })
            delivered = reporter.close(10)
            return [queued, delivered, reporter.accepted, reporter.drop_reasons]
    """
    assert _preloaded(live_api, tmp_path, setup) == [True, True, 1, {}]


# -- 6. close with a result still held -------------------------------------------------------


def test_close_counts_a_result_still_held_as_dropped(
    live_api: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    live_api.start()
    reporter = ResultReporter(live_api.base, live_api.keys["ingest"], flush_interval=0.05)
    hang = threading.Event()
    try:
        result = _result("held-1")
        # The cloud's repeat (README: "close waits for those waiting for a repeat") hangs.
        assert reporter.report(
            result, repeat=lambda: hang.wait(30), repeat_rate=1.0, repeat_timeout=30
        )
        assert reporter.pending == 1
        assert reporter.close(0.5) is False  # it could not be sent: close says so
        # ... and the result it gives up on is dropped, counted and logged, at close.
        assert (reporter.dropped, reporter.pending) == (1, 0)
        assert any("dropped" in r.getMessage() for r in caplog.records)
    finally:
        hang.set()

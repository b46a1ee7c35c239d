"""Hostile review of 0a2e885 and ed66b09 (the Python client in a router that forks, JSON nested
too deeply, `close()` counting the held results it gives up on), by a router author: real
processes forked from a process without threads (`run_python`), against a `FakeServer`.

Defects, each a strict xfail until it was fixed (now plain tests: a client started in any
ancestor starts its thread at first use; a subclass is made again by ResultReporter's own
__init__; a held result whose report has begun is not given up on at close):

1. A process that daemonizes after making its module-level `FlagClient` (fork, setsid, fork
   again: the first child only forks) serves from a grandchild with no flag thread at all:
   `_forked` decides whether to start one from `self._thread`, which is None in a child
   that never used the client, so the grandchild's `_start_when_used` is False. It routes
   from the copy it inherited until `max_staleness` (a kill never reaches it) while
   `status()` says ok with no error.
2. A `ResultReporter` subclass whose `__init__` takes other arguments (this repository's
   own tests/client/holding.py `Recording()` is one) cannot be made again in a child:
   `_forked` calls `self.__init__(base_url, api_key, batch_size=..., ...)`, which raises
   TypeError; the child keeps the parent's reporter, whose thread is not there, and every
   result the worker reports is dropped as `stopped` (the defect 0a2e885 fixed, back for
   subclasses).
3. A held result whose report begins just before `close()` gives up on it is counted as
   dropped twice: `Held.report` reads `_abandoned` (False), then `close()` abandons it and
   counts it (`closed`), then the report reaches `_queue`, which finds the reporter closed
   and counts it again (`closed`). The commit says "no double count". The interleaving is
   forced with a trace hook pausing the side's thread as it enters `ResultReporter.report`
   (a few bytecodes of window that real sides finishing at the deadline fall into).

What held is a plain test: many threads using a child's client at once start one flag
thread; children forked from a parent whose flag thread, reporter and `shadow_compare` run
flat out route, compare and deliver only their own results, without a deadlock; a closed
reporter stays closed in a child; `close(0)` with several holds counts each once, and
`close()` twice counts nothing more; `async_shadow_compare` in a child.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.client import ResultReporter
from tests.client.fake import Exchange, FakeServer, document
from tests.liveapi import run_python


class Api:
    """Flags for task `t` at full (killed after a request to /kill), and results accepted
    (their request ids kept, in order)."""

    def __init__(self) -> None:
        self.killed = False
        self.ids: list[str] = []
        self.lock = threading.Lock()
        self.server = FakeServer(self._answer)

    def _answer(self, ex: Exchange) -> None:
        if ex.path == "/kill":
            self.killed = True
            ex.reply(200, b"{}")
        elif ex.path.startswith("/v1/flags/stream"):
            ex.reply(404, b'{"detail":"no stream"}')
        elif ex.path.startswith("/v1/flags"):
            ex.reply(200, document(2, killed=True) if self.killed else document(1))
        elif ex.path == "/v1/results":
            results = json.loads(ex.body)["results"]
            with self.lock:
                self.ids.extend(r["request_id"] for r in results)
            answer = {"accepted": len(results), "duplicates": 0, "rejected": []}
            ex.reply(200, json.dumps(answer).encode())
        else:
            ex.reply(404, b"{}")


@pytest.fixture
def api() -> Iterator[Api]:
    a = Api()
    try:
        yield a
    finally:
        a.server.close()


HEAD = """
import json, os, select, signal, sys, threading, time
import httpx
from controlplane.client import FlagClient, ResultReporter, shadow_compare

URL = os.environ["URL"]


def served(flags):
    return flags.route("t", session_id="s", input_tokens=1).served


def flag_threads():
    return sum(t.name == "shadowplane-flags" and t.is_alive() for t in threading.enumerate())


def in_child(work, timeout=20):
    # work() in a forked child; its JSON answer, or "deadlock" when none comes in time.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = work()
        except BaseException as exc:
            out = "raised " + repr(exc)
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    if not select.select([r], [], [], timeout)[0]:
        os.kill(pid, signal.SIGKILL)
        out = "deadlock"
    else:
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        out = json.loads(data)
    os.waitpid(pid, 0)
    os.close(r)
    return out
"""


def _run(api: Api, tmp_path: Path, body: str, timeout: float = 40) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["URL"] = api.server.base
    code = HEAD + textwrap.dedent(body) + "\nprint(json.dumps(OUT))\n"
    done = run_python(code, env, tmp_path, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- 1. a daemonizing router: the grandchild ------------------------------------------------


def test_a_router_that_daemonizes_after_starting_its_flag_client_hears_a_kill(
    api: Api, tmp_path: Path
) -> None:
    body = """
        flags = FlagClient(URL, "k", stream=False, poll_interval=0.05, max_backoff=0.2).start()
        assert flags.wait_ready(10) and served(flags) == "edge"

        def daemon():  # the classic double fork: the first child only forks again
            os.setsid()

            def serving():
                first = served(flags)  # its first request: the flag thread starts now
                httpx.post(URL + "/kill")  # the operator kills the task meanwhile
                deadline = time.monotonic() + 5
                while served(flags) != "cloud" and time.monotonic() < deadline:
                    time.sleep(0.05)
                return [first, served(flags), flag_threads()]

            return in_child(serving)

        OUT = in_child(daemon)
    """
    # The daemon routes from a copy that follows the server: the kill reaches it.
    assert _run(api, tmp_path, body) == ["edge", "cloud", 1]


# -- 2. a subclass of ResultReporter -------------------------------------------------------


def test_a_reporter_subclass_made_before_a_fork_delivers_what_the_worker_reports(
    api: Api, tmp_path: Path
) -> None:
    body = """
        class RouterReporter(ResultReporter):  # the router's own settings in, as any app does
            def __init__(self, settings):
                super().__init__(settings["url"], settings["key"], flush_interval=0.05)

        reporter = RouterReporter({"url": URL, "key": "k"})

        def worker():
            queued = reporter.report({"request_id": "child-1", "task": "t"})
            return [queued, reporter.close(10), reporter.accepted, reporter.drop_reasons]

        OUT = in_child(worker)
    """
    assert _run(api, tmp_path, body) == [True, True, 1, {}]
    assert api.ids == ["child-1"]


# -- 3. a held result reported as close() gives up on it ------------------------------------


def test_a_held_result_reported_as_close_gives_up_on_it_is_counted_once() -> None:
    reporter = ResultReporter("http://127.0.0.1:9", "k", flush_interval=0.05)
    held = reporter.hold()  # a side beside still running, as shadow_compare holds one
    entering, closed = threading.Event(), threading.Event()

    def pause(frame: Any, event: str, arg: Any) -> None:
        # The side's report has read `_abandoned` and is entering the reporter's report.
        if event == "call" and frame.f_code is ResultReporter.report.__code__:
            entering.set()
            closed.wait(10)

    def side() -> None:
        sys.settrace(pause)
        try:
            held.report({"request_id": "late-1", "task": "t"})
        finally:
            sys.settrace(None)

    reported = threading.Thread(target=side)
    reported.start()
    assert entering.wait(10)
    closer = threading.Thread(target=reporter.close, args=(0,))
    closer.start()
    closer.join(5)  # a fix that makes close wait for the report in progress is fine too
    closed.set()
    reported.join(10)
    closer.join(10)
    # One result, given up on once: counted once.
    assert (reporter.dropped, reporter.drop_reasons) == (1, {"closed": 1})


# -- what held ---------------------------------------------------------------------------------


def test_many_threads_at_a_childs_first_use_start_one_flag_thread(api: Api, tmp_path: Path) -> None:
    body = """
        flags = FlagClient(URL, "k", stream=False, poll_interval=0.05).start()
        assert flags.wait_ready(10)

        def worker():
            gate = threading.Barrier(16)
            uses = [
                lambda: served(flags), flags.status, lambda: flags.flag("t"),
                lambda: flags.wait_ready(1),
            ]

            def use(k):
                gate.wait()
                uses[k % 4]()

            threads = [threading.Thread(target=use, args=(k,)) for k in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return [flag_threads(), served(flags)]

        OUT = [in_child(worker) for _ in range(4)]
    """
    assert _run(api, tmp_path, body) == [[1, "edge"]] * 4


def test_children_of_a_busy_parent_serve_and_deliver_only_their_own_results(
    api: Api, tmp_path: Path
) -> None:
    body = """
        # The parent is busy while it forks: its flag thread polls every few ms, its reporter
        # posts a few results a batch, three threads compare and report without a pause.
        flags = FlagClient(URL, "k", stream=False, poll_interval=0.002, max_backoff=0.01)
        flags.start()
        assert flags.wait_ready(10)
        reporter = ResultReporter(URL, "k", flush_interval=0.001, batch_size=5)
        stop = threading.Event()
        count = iter(range(10**9))

        def compare(rid):
            return shadow_compare(
                "p", edge_fn=lambda p: "edge", cloud_fn=lambda p: "cloud", client=flags,
                task="t", input_tokens=1, session_id="s", reporter=reporter,
                request_id=rid, edge_timeout=5,
            )

        def busy(k):
            while not stop.is_set():
                compare(f"parent-{k}-{next(count)}")
                reporter.report({"request_id": f"parent-r-{next(count)}", "task": "t"})
                time.sleep(0.002)  # what the server takes in: the parent must not drop

        threads = [threading.Thread(target=busy, args=(k,), daemon=True) for k in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.1)

        def worker(i):
            answer = compare(f"child-{i}-a")
            queued = reporter.report({"request_id": f"child-{i}-b", "task": "t"})
            delivered = reporter.close(10)
            return [answer, queued, delivered, reporter.accepted, reporter.dropped]

        children = [in_child(lambda: worker(i)) for i in range(8)]
        stop.set()
        for t in threads:
            t.join()
        parent_done = reporter.close(10)
        OUT = [children, parent_done, reporter.drop_reasons]
    """
    children, parent_done, parent_dropped = _run(api, tmp_path, body)
    assert children == [["edge", True, True, 2, 0]] * 8
    assert (parent_done, parent_dropped) == (True, {})
    # Each result reached the API once: no child sent what its parent had queued.
    assert len(api.ids) == len(set(api.ids))
    assert {i for i in api.ids if i.startswith("child-")} == {
        f"child-{i}-{s}" for i in range(8) for s in "ab"
    }


def test_a_reporter_closed_before_the_fork_stays_closed_and_close_twice_counts_nothing_more(
    api: Api, tmp_path: Path
) -> None:
    body = """
        reporter = ResultReporter(URL, "k", flush_interval=0.05)
        assert reporter.report({"request_id": "before", "task": "t"})
        assert reporter.close(10)

        def worker():
            queued = reporter.report({"request_id": "after", "task": "t"})
            return [queued, reporter.close(1), reporter.drop_reasons, reporter._thread.is_alive()]

        OUT = [in_child(worker), reporter.close(1), reporter.accepted, reporter.dropped]
    """
    child, again, accepted, dropped = _run(api, tmp_path, body)
    assert child == [False, True, {"closed": 1}, False]  # True: nothing left to send
    assert (again, accepted, dropped) == (True, 1, 0)
    assert api.ids == ["before"]


def test_close_gives_up_on_several_holds_counting_each_once() -> None:
    reporter = ResultReporter("http://127.0.0.1:9", "k", flush_interval=0.05)
    holds = [reporter.hold() for _ in range(3)]
    assert reporter.pending == 3
    assert reporter.close(0) is False
    assert reporter.drop_reasons == {"closed": 3}
    # They come after all: not sent, not counted again; nor by a second close.
    assert [h.report({"request_id": f"late-{i}", "task": "t"}) for i, h in enumerate(holds)] == [
        False
    ] * 3
    for h in holds:
        h.release()
    reporter.close(0)
    assert (reporter.dropped, reporter.drop_reasons, reporter.pending) == (3, {"closed": 3}, 0)


def test_async_shadow_compare_in_a_child_reports_both_sides(api: Api, tmp_path: Path) -> None:
    body = """
        import asyncio
        from controlplane.client import async_shadow_compare
        from controlplane.client.routing import Route

        class EdgeWithCloudBeside:
            def route(self, task, **_):
                return Route("edge", True, 3, "STATIC", "edge")

        class Keep:
            def __init__(self):
                self.got = []

            def report(self, result):
                self.got.append(result)
                return True

        async def edge(p):
            return "edge"

        async def cloud(p):
            await asyncio.sleep(0.05)
            return "cloud"

        async def compare(keep):
            answer = await async_shadow_compare(
                "p", edge, cloud, client=EdgeWithCloudBeside(), task="t", input_tokens=1,
                reporter=keep, edge_timeout=2, cloud_timeout=2,
            )
            await asyncio.sleep(0.3)  # the cloud beside comes in
            return answer

        parent = Keep()
        assert asyncio.run(compare(parent)) == "edge" and len(parent.got) == 1

        def worker():
            keep = Keep()
            answer = asyncio.run(compare(keep))
            return [answer, [(r["edge"]["output"], r["cloud"]["output"]) for r in keep.got]]

        OUT = in_child(worker)
    """
    assert _run(api, tmp_path, body) == ["edge", [["edge", "cloud"]]]

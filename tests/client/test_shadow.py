"""`shadow_compare` and `async_shadow_compare`: the caller always gets an answer from the
side the flag serves or, when the edge fails on the serving path, from the cloud; the
side beside never delays the answer, and the pair is reported once with both timings.

The flags come from a `FlagClient` reading its cache file (no network); hangs are held on
events the test controls, so "did not wait" is shown by the answer arriving while the
edge is still blocked, never by a clock.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from controlplane.client import FlagClient, async_shadow_compare, shadow_compare, shadow_stats
from controlplane.client.shadow import BESIDE_THREADS, SERVING_THREADS

T = TypeVar("T")

WAIT = 30.0  # generous bound for a background event that must happen


class Collected:
    """A reporter that keeps what it is given (`ResultReporter` posts it instead)."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.arrived = threading.Event()

    def report(self, result: Any) -> bool:
        self.results.append(json.loads(json.dumps(result)))
        self.arrived.set()
        return True

    def one(self) -> dict[str, Any]:
        assert self.arrived.wait(WAIT), "nothing was reported"
        assert len(self.results) == 1, self.results
        return self.results[0]


def _flags(tmp_path: Path, stage: str, shadow_rate: float) -> FlagClient:
    flag = {
        "task": "ticket_classify",
        "version": 7,
        "stage": stage,
        "edge_percent": {"full": 100, "canary": 50}.get(stage, 0),
        "sticky_by": "session",
        "max_input_tokens": 512,
        "shadow_rate": shadow_rate,
        "killed": False,
        "default_route": "cloud",
    }
    path = tmp_path / f"flags-{stage}-{shadow_rate}.json"
    path.write_text(
        json.dumps(
            {
                "format": 1,
                "confirmed_at": time.time(),
                "revision": 1,
                "etag": None,
                "flags": {"ticket_classify": flag},
            }
        ),
        encoding="utf-8",
    )
    return FlagClient("http://127.0.0.1:9", "sp_unused", cache_path=path)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Held edges wait on this; set at the end so no thread outlives the test for long."""
    event = threading.Event()
    yield event
    event.set()


def cloud(payload: str) -> str:
    return f"cloud:{payload}"


KW: dict[str, Any] = {"task": "ticket_classify", "input_tokens": 100, "session_id": "s-2"}


def test_an_edge_that_raises_on_the_serving_path_degrades_to_the_cloud(tmp_path: Path) -> None:
    def edge(payload: str) -> str:
        raise ConnectionError("edge box unreachable")

    reports = Collected()
    answer = shadow_compare(
        "hi", edge, cloud, client=_flags(tmp_path, "full", 0.0), reporter=reports, **KW
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert (r["served"], r["degraded"], r["degrade_reason"], r["decision"]) == (
        "cloud",
        True,
        "exception",
        "edge",
    )
    assert r["flag_version"] == 7 and r["task"] == "ticket_classify" and r["input_tokens"] == 100
    assert r["edge"]["error"] == "exception" and r["edge"]["output"] is None
    assert r["edge"]["error_message"] == "ConnectionError: edge box unreachable"
    assert r["cloud"]["output"] == "cloud:hi" and r["cloud"]["error"] is None
    assert r["edge"]["latency_ms"] >= 0 and r["cloud"]["latency_ms"] >= 0


def test_an_edge_that_hangs_on_the_serving_path_is_left_behind(
    tmp_path: Path, release: threading.Event
) -> None:
    def edge(payload: str) -> str:
        release.wait()
        return "edge, too late"

    reports = Collected()
    answer = shadow_compare(
        "hi",
        edge,
        cloud,
        client=_flags(tmp_path, "full", 0.0),
        reporter=reports,
        edge_timeout=0.2,
        **KW,
    )
    # The edge is still blocked: the answer did not wait for it.
    assert answer == "cloud:hi" and not release.is_set()
    r = reports.one()
    assert (r["served"], r["degraded"], r["degrade_reason"]) == ("cloud", True, "timeout")
    assert r["edge"]["error"] == "timeout" and r["edge"]["latency_ms"] == 200.0


def test_garbage_from_the_edge_is_never_served(tmp_path: Path) -> None:
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: {"label": "refund???"},
        cloud,
        client=_flags(tmp_path, "full", 0.0),
        reporter=reports,
        validate=lambda out: out.get("label") in {"refund", "exchange"},
        **KW,
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert (r["degraded"], r["degrade_reason"]) == (True, "invalid")
    assert r["edge"] == {
        "output": {"label": "refund???"},
        "error": "invalid",
        "error_message": "validate refused the output",
        "latency_ms": r["edge"]["latency_ms"],
        "valid": False,
    }

    # An answer that is not JSON is garbage too, even without `validate`; a validate that
    # raises refuses.
    reports = Collected()
    assert (
        shadow_compare(
            "x",
            lambda p: object(),
            cloud,
            client=_flags(tmp_path, "full", 0.0),
            reporter=reports,
            **KW,
        )
        == "cloud:x"
    )
    r = reports.one()
    assert r["edge"]["error"] == "invalid" and r["edge"]["output"] is None
    assert "not JSON (object)" in r["edge"]["error_message"]

    def broken(out: Any) -> bool:
        raise KeyError("label")

    reports = Collected()
    got = shadow_compare(
        "y",
        lambda p: "refund",
        cloud,
        client=_flags(tmp_path, "full", 0.0),
        reporter=reports,
        validate=broken,
        **KW,
    )
    assert got == "cloud:y" and reports.one()["edge"]["error_message"].startswith("validate raised")


def test_a_valid_edge_answer_is_served_and_the_cloud_verifies_beside_it(
    tmp_path: Path, release: threading.Event
) -> None:
    def slow_cloud(payload: str) -> str:
        release.wait()
        return f"cloud:{payload}"

    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: f"edge:{p}",
        slow_cloud,
        client=_flags(tmp_path, "full", 1.0),
        reporter=reports,
        validate=lambda out: out.startswith("edge:"),
        edge_fields={"model": "small@3"},
        cloud_fields={"model": "large@7"},
        fields={"input": {"text": "hi"}},
        **KW,
    )
    assert answer == "edge:hi" and not release.is_set()  # the cloud is still running
    assert not reports.results  # reported when the side beside finishes
    release.set()
    r = reports.one()
    assert (r["served"], r["degraded"]) == ("edge", False)
    assert r["edge"]["output"] == "edge:hi" and r["edge"]["valid"] is True
    assert r["cloud"]["output"] == "cloud:hi" and r["cloud"]["model"] == "large@7"
    assert r["edge"]["model"] == "small@3" and r["input"] == {"text": "hi"}


def test_the_cloud_serves_while_a_hung_edge_runs_beside_it_and_is_reported_as_a_timeout(
    tmp_path: Path, release: threading.Event
) -> None:
    started = threading.Event()

    def edge(payload: str) -> str:
        started.set()
        release.wait()
        return "edge, late"

    def cloud_after_edge_started(payload: str) -> str:
        assert started.wait(WAIT)  # both sides really run at once
        return f"cloud:{payload}"

    reports = Collected()
    pool = ThreadPoolExecutor(2)
    answer = shadow_compare(
        "hi",
        edge,
        cloud_after_edge_started,
        client=_flags(tmp_path, "shadow", 1.0),
        reporter=reports,
        edge_timeout=0.3,
        executor=pool,
        **KW,
    )
    assert answer == "cloud:hi" and not release.is_set()
    r = reports.one()  # at the edge's timeout, while it is still blocked
    assert not release.is_set()
    assert (r["served"], r["degraded"], r["decision"]) == ("cloud", False, "edge")
    assert r["edge"]["error"] == "timeout" and r["cloud"]["output"] == "cloud:hi"
    release.set()
    pool.shutdown(wait=True)  # the late edge finished: its answer is not reported again
    assert len(reports.results) == 1


def test_an_ineligible_request_is_reported_with_decision_cloud_and_both_sides(
    tmp_path: Path,
) -> None:
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: f"cloud:{p}",
        cloud,
        client=_flags(tmp_path, "full", 1.0),
        reporter=reports,
        task="ticket_classify",
        input_tokens=100,
        eligible=False,
        request_id="r-fixed",
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert (r["request_id"], r["decision"], r["served"]) == ("r-fixed", "cloud", "cloud")
    assert r["edge"]["output"] == r["cloud"]["output"] == "cloud:hi"


def test_no_side_beside_when_the_flag_says_so(tmp_path: Path) -> None:
    ran = []
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: ran.append(p) or "edge",
        cloud,
        client=_flags(tmp_path, "cloud", 1.0),
        reporter=reports,
        **KW,
    )
    assert answer == "cloud:hi" and ran == []
    r = reports.one()
    assert r["edge"] is None and r["cloud"]["output"] == "cloud:hi"


def test_a_cloud_exception_on_the_serving_path_is_the_callers_and_is_reported(
    tmp_path: Path,
) -> None:
    def failing(payload: str) -> str:
        raise TimeoutError("cloud provider timed out")

    reports = Collected()
    with pytest.raises(TimeoutError, match="cloud provider timed out"):
        shadow_compare(
            "hi",
            lambda p: "edge",
            failing,
            client=_flags(tmp_path, "shadow", 1.0),
            reporter=reports,
            **KW,
        )
    r = reports.one()
    assert r["cloud"]["error"] == "exception" and r["edge"]["output"] == "edge"


def test_a_serving_edge_stuck_behind_hung_calls_degrades_at_its_timeout(
    tmp_path: Path, release: threading.Event
) -> None:
    # One pool thread, held by an earlier hung edge: the next edge call never starts.
    pool = ThreadPoolExecutor(1)
    pool.submit(release.wait)
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: "edge",
        cloud,
        client=_flags(tmp_path, "full", 1.0),
        reporter=reports,
        edge_timeout=0.2,
        executor=pool,
        **KW,
    )
    # The cloud call queued beside it was taken back and answered here.
    assert answer == "cloud:hi" and not release.is_set()
    r = reports.one()
    assert r["degrade_reason"] == "timeout" and r["cloud"]["output"] == "cloud:hi"
    release.set()
    pool.shutdown(wait=True)


# -- async -------------------------------------------------------------------------------


async def acloud(payload: str) -> str:
    return f"cloud:{payload}"


@pytest.mark.parametrize("failure", ["raises", "hangs", "garbage"])
def test_async_edge_failures_on_the_serving_path_give_the_cloud_answer(
    tmp_path: Path, failure: str
) -> None:
    cancelled = []

    async def edge(payload: str) -> Any:
        if failure == "raises":
            raise RuntimeError("boom")
        if failure == "hangs":
            try:
                await asyncio.Event().wait()  # never set
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        return {"not": "a label"}

    reports = Collected()

    async def main() -> str:
        return await async_shadow_compare(
            "hi",
            edge,
            acloud,
            client=_flags(tmp_path, "full", 0.0),
            reporter=reports,
            edge_timeout=0.2,
            validate=lambda out: isinstance(out, str),
            **KW,
        )

    assert asyncio.run(main()) == "cloud:hi"
    r = reports.one()
    expected = {"raises": "exception", "hangs": "timeout", "garbage": "invalid"}[failure]
    assert (r["served"], r["degraded"], r["degrade_reason"]) == ("cloud", True, expected)
    assert r["edge"]["error"] == expected
    assert cancelled == ([True] if failure == "hangs" else [])


def test_async_cloud_serves_without_waiting_for_the_edge_beside_it(tmp_path: Path) -> None:
    reports = Collected()

    async def main() -> None:
        edge_started, edge_release = asyncio.Event(), asyncio.Event()

        async def edge(payload: str) -> str:
            edge_started.set()
            await edge_release.wait()
            return "cloud:hi"

        async def cloud_after_edge(payload: str) -> str:
            await edge_started.wait()
            return f"cloud:{payload}"

        answer = await async_shadow_compare(
            "hi",
            edge,
            cloud_after_edge,
            client=_flags(tmp_path, "shadow", 1.0),
            reporter=reports,
            **KW,
        )
        assert answer == "cloud:hi" and not edge_release.is_set()
        assert not reports.results
        edge_release.set()
        for _ in range(100):
            if reports.results:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    r = reports.one()
    assert (r["served"], r["degraded"]) == ("cloud", False)
    assert r["edge"]["output"] == r["cloud"]["output"] == "cloud:hi"


def test_async_edge_serves_and_a_hung_cloud_beside_it_is_reported_as_a_timeout(
    tmp_path: Path,
) -> None:
    reports = Collected()

    async def main() -> None:
        async def hung_cloud(payload: str) -> str:
            await asyncio.Event().wait()
            return "never"

        async def edge(payload: str) -> str:
            return "edge:hi"

        answer = await async_shadow_compare(
            "hi",
            edge,
            hung_cloud,
            client=_flags(tmp_path, "full", 1.0),
            reporter=reports,
            cloud_timeout=0.2,
            **KW,
        )
        assert answer == "edge:hi" and not reports.results
        for _ in range(1000):
            if reports.results:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    r = reports.one()
    assert (r["served"], r["edge"]["output"], r["cloud"]["error"]) == ("edge", "edge:hi", "timeout")


# -- whatever an async edge does, the caller gets the cloud in the cloud's time --------------


class EdgeOwnBase(BaseException):
    """A BaseException of the edge's own making (not an Exception)."""


def _run_catching(main: Callable[[], Coroutine[Any, Any, T]]) -> T | str:
    """`asyncio.run(main())`, or what escaped it (so a failure cannot end the test run)."""
    try:
        return asyncio.run(main())
    except BaseException as exc:
        return f"escaped: {type(exc).__name__}"


@pytest.mark.parametrize(
    "raised", [asyncio.CancelledError, SystemExit, KeyboardInterrupt, EdgeOwnBase, TimeoutError]
)
def test_whatever_an_async_serving_edge_raises_the_caller_gets_the_cloud_answer(
    tmp_path: Path, raised: type[BaseException]
) -> None:
    async def edge(payload: str) -> str:
        raise raised("from the edge")

    reports = Collected()

    async def main() -> str:
        return await async_shadow_compare(
            "hi", edge, acloud, client=_flags(tmp_path, "full", 0.0), reporter=reports, **KW
        )

    assert _run_catching(main) == "cloud:hi"
    r = reports.one()
    # The edge's own TimeoutError is its exception, not our timeout.
    assert (r["served"], r["degraded"], r["degrade_reason"]) == ("cloud", True, "exception")
    assert r["edge"]["error_message"] == f"{raised.__name__}: from the edge"


@pytest.mark.parametrize("raised", [asyncio.CancelledError, SystemExit, EdgeOwnBase])
def test_whatever_an_async_edge_beside_raises_the_pair_is_reported(
    tmp_path: Path, raised: type[BaseException]
) -> None:
    async def edge(payload: str) -> str:
        raise raised("from the edge")

    reports = Collected()

    async def main() -> str:
        answer = await async_shadow_compare(
            "hi", edge, acloud, client=_flags(tmp_path, "shadow", 1.0), reporter=reports, **KW
        )
        for _ in range(1000):
            if reports.results:
                break
            await asyncio.sleep(0.01)
        return answer

    assert _run_catching(main) == "cloud:hi"
    r = reports.one()
    assert (r["served"], r["degraded"], r["edge"]["error"]) == ("cloud", False, "exception")
    assert r["edge"]["error_message"] == f"{raised.__name__}: from the edge"


def test_an_async_edge_that_ignores_its_cancellation_does_not_hold_the_caller(
    tmp_path: Path,
) -> None:
    reports = Collected()

    async def main() -> tuple[str, bool, bool]:
        release, cancelled = asyncio.Event(), asyncio.Event()
        finished: list[bool] = []

        async def stubborn(payload: str) -> str:
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled.set()  # ... and goes on regardless
            await asyncio.wait_for(release.wait(), WAIT)
            finished.append(True)
            return "edge, late"

        answer = await async_shadow_compare(
            "hi",
            stubborn,
            acloud,
            client=_flags(tmp_path, "full", 0.0),
            reporter=reports,
            edge_timeout=0.2,
            **KW,
        )
        held = not finished  # answered while the edge still runs
        for _ in range(1000):
            if cancelled.is_set():
                break
            await asyncio.sleep(0.01)
        asked = cancelled.is_set() and not finished  # cancelled, and it ignored that
        release.set()
        for _ in range(1000):
            if finished:
                break
            await asyncio.sleep(0.01)
        return answer, held, asked

    assert _run_catching(main) == ("cloud:hi", True, True)
    r = reports.one()  # once: the late edge is not reported again
    assert (r["degraded"], r["degrade_reason"], r["edge"]["latency_ms"]) == (True, "timeout", 200.0)


# -- hung sync calls never queue work ---------------------------------------------------------


class Payload:
    """A request's payload; weakly referenced to see who still holds it."""

    def __init__(self) -> None:
        self.blob = bytearray(64 * 1024)


def _idle(kind: str) -> None:
    """Wait until earlier tests' held calls have returned."""
    deadline = time.monotonic() + WAIT
    while shadow_stats()[kind] > 0:
        assert time.monotonic() < deadline, f"{kind} stayed above 0"
        time.sleep(0.01)


def test_hung_edges_beside_never_queue_payloads_and_later_sides_are_skipped(
    tmp_path: Path, release: threading.Event
) -> None:
    _idle("beside_in_flight")
    before = shadow_stats()["skipped_beside"]
    started: list[int] = []

    def hung_edge(payload: Payload) -> str:
        started.append(1)
        release.wait()
        return "edge, late"

    alive: weakref.WeakSet[Payload] = weakref.WeakSet()
    reports = Collected()
    flags = _flags(tmp_path, "shadow", 1.0)  # the cloud serves, the edge runs beside
    n = BESIDE_THREADS * 3
    for _ in range(n):
        payload = Payload()
        alive.add(payload)
        answer = shadow_compare(
            payload,
            hung_edge,
            lambda p: "cloud",
            client=flags,
            reporter=reports,
            edge_timeout=0.05,
            **KW,
        )
        assert answer == "cloud"
        del payload
    deadline = time.monotonic() + WAIT
    while len(reports.results) < n:  # the held edges are reported at their timeout
        assert time.monotonic() < deadline, len(reports.results)
        time.sleep(0.01)
    gc.collect()
    # Only the calls that hold a thread keep their payload; nothing waits in a queue.
    assert len(alive) <= BESIDE_THREADS and len(started) <= BESIDE_THREADS
    skipped = [r for r in reports.results if r["edge"] is None]
    assert len(skipped) == n - len(started) >= n - BESIDE_THREADS
    assert all(r["skipped"]["edge"].startswith("not run: all 32") for r in skipped)
    assert all(r["cloud"]["output"] == "cloud" for r in reports.results)
    timed_out = [r for r in reports.results if r["edge"] is not None]
    assert all(r["edge"]["error"] == "timeout" for r in timed_out)
    assert shadow_stats()["skipped_beside"] - before == len(skipped)
    release.set()
    _idle("beside_in_flight")


def test_with_every_serving_thread_held_by_hung_edges_the_cloud_answers_at_once(
    tmp_path: Path, release: threading.Event
) -> None:
    _idle("serving_in_flight")
    calls: list[int] = []

    def hung_edge(payload: str) -> str:
        calls.append(1)
        release.wait()
        return "edge, late"

    flags = _flags(tmp_path, "full", 0.0)
    # Every serving thread held by a hung edge: on a loaded machine a call's edge may not
    # have started within its 0.01 s, and is then taken back (its thread not held): such a
    # call holds nothing, so the pool is filled until all of them are held and running.
    deadline = time.monotonic() + WAIT
    while shadow_stats()["serving_in_flight"] < SERVING_THREADS:
        assert time.monotonic() < deadline, shadow_stats()
        assert shadow_compare("x", hung_edge, cloud, client=flags, edge_timeout=0.01, **KW)
    while len(calls) < SERVING_THREADS:
        assert time.monotonic() < deadline, len(calls)
        time.sleep(0.01)
    reports = Collected()
    # Waiting for a thread could take the whole edge_timeout: it is not waited for.
    answer = shadow_compare(
        "hi", hung_edge, cloud, client=flags, reporter=reports, edge_timeout=WAIT, **KW
    )
    assert answer == "cloud:hi" and len(calls) <= SERVING_THREADS
    r = reports.one()
    assert (r["served"], r["degraded"], r["degrade_reason"]) == ("cloud", True, "busy")
    assert r["edge"]["error"] == "busy" and r["edge"]["error_message"].startswith("not run")
    assert shadow_stats()["busy_serving"] >= 1
    release.set()
    _idle("serving_in_flight")

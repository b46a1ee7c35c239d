"""`shadow_compare` and `async_shadow_compare`: the caller always gets an answer from the
side the flag serves or, when the edge fails on the serving path, from the cloud; the
side beside never delays the answer, and the pair is reported once with both timings.

The flags come from a `FlagClient` reading its cache file (no network); hangs are held on
events the test controls, so "did not wait" is shown by the answer arriving while the
edge is still blocked, never by a clock.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from controlplane.client import FlagClient, async_shadow_compare, shadow_compare

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

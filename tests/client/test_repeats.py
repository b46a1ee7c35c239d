"""The cloud asked a second time (`cloud_repeat`): `wants_repeat` picks the flag's
`repeat_rate` of requests, sticky by request id and independent of the sticky bucket;
`route` reads the rate strictly (missing or unreadable: 0); `shadow_compare`,
`async_shadow_compare` and `ResultReporter` ask the cloud again off the serving path and
post the answer, or its error, as `cloud_repeat`.

Hangs are held on events the test controls: "did not wait" is shown by the answer (or the
report) arriving while the repeat is still blocked, never by a clock.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.client import (
    FlagClient,
    ResultReporter,
    async_shadow_compare,
    murmur3_32,
    route,
    shadow_compare,
    sticky_bucket,
    wants_repeat,
)
from tests.client.fake import Exchange, FakeServer
from tests.client.test_shadow import Collected, _idle
from tests.conftest import TICKET_TASK
from tests.liveapi import ApiServer, wait_until

WAIT = 30.0  # generous bound for a background event that must happen
N = 20_000
TASK = "ticket_classify"
KW: dict[str, Any] = {"task": TASK, "input_tokens": 100, "session_id": "s-2"}


def binomial_interval(n: int, p: float, level: float = 0.999) -> tuple[int, int]:
    """The central `level` interval of Binomial(n, p), by its exact CDF (as
    `scipy.stats.binom.interval`): the smallest k whose CDF reaches (1 - level) / 2, and the
    smallest whose CDF reaches (1 + level) / 2."""
    tail = (1 - level) / 2
    log_p, log_q = math.log(p), math.log1p(-p)
    cdf, low = 0.0, None
    for k in range(n + 1):
        cdf += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * log_p
            + (n - k) * log_q
        )
        if low is None and cdf >= tail:
            low = k
        if cdf >= 1 - tail:
            assert low is not None
            return low, k
    raise AssertionError("the CDF never reached the upper tail")


def test_the_binomial_interval_is_the_textbook_one() -> None:
    # Binomial(20000, 0.2): mean 4000, sd 56.57; a normal 99.9% interval is 4000 +- 186.1.
    low, high = binomial_interval(20_000, 0.2)
    assert abs(low - (4000 - 186.1)) <= 3 and abs(high - (4000 + 186.1)) <= 3
    # Binomial(10, 0.5) at 90%: P(X <= 1) = 11/1024 < 0.05 <= P(X <= 2) = 56/1024, and
    # P(X <= 7) = 968/1024 < 0.95 <= P(X <= 8) = 1013/1024.
    assert binomial_interval(10, 0.5, 0.9) == (2, 8)


def _within_binomial(picked: int, n: int, rate: float) -> tuple[int, int]:
    low, high = binomial_interval(n, rate)
    assert low <= picked <= high, (picked, n, rate, low, high)
    return low, high


# -- wants_repeat and the rate read from the flag ----------------------------------------------


@pytest.mark.parametrize("rate", [0.01, 0.2])
def test_the_share_picked_is_the_published_rate(rate: float) -> None:
    ids = [f"r-{i}" for i in range(N)]
    picked = [rid for rid in ids if wants_repeat(TASK, rid, rate)]
    _within_binomial(len(picked), N, rate)
    # Sticky by request id: the same ids again, in another order, pick the same ones.
    assert [rid for rid in reversed(ids) if wants_repeat(TASK, rid, rate)] == picked[::-1]
    # Independent of the sticky bucket of the same string: among the ids in the first 20
    # buckets the share picked is the rate too.
    low = [rid for rid in ids if (sticky_bucket(TASK, rid) or 0) < 20]
    _within_binomial(sum(wants_repeat(TASK, rid, rate) for rid in low), len(low), rate)
    # A repeat at a lower rate is a repeat at any higher one (one hash, one threshold).
    assert set(picked) <= {rid for rid in ids if wants_repeat(TASK, rid, min(1.0, rate * 3))}


def test_no_rate_no_id_no_repeat_and_a_rate_of_one_always() -> None:
    ids = [f"r-{i}" for i in range(2000)]
    assert not any(wants_repeat(TASK, rid, 0.0) for rid in ids)
    assert all(wants_repeat(TASK, rid, 1.0) for rid in ids)
    assert all(wants_repeat(TASK, rid, 1) for rid in ids)
    for rate in (float("nan"), -0.5, True, "1", None):
        assert not any(wants_repeat(TASK, rid, rate) for rid in ids), rate  # type: ignore[arg-type]
    for rid in (None, "", "x" * 201):
        assert wants_repeat(TASK, rid, 1.0) is False
    assert wants_repeat(TASK, "x" * 200, 1.0) is True


def test_the_readme_gives_the_formula_and_the_default_timeout() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    formula = '`murmur3_32(utf8("repeat:" + task + ":" + request_id), seed 0) / 2**32 < rate`'
    assert " ".join(formula.split()) in " ".join(readme.split())
    # The formula as written (any client in any language) picks what wants_repeat picks.
    for i in range(500):
        rid = f"r-{i}"
        by_formula = murmur3_32(f"repeat:{TASK}:{rid}".encode()) / 2**32 < 0.5
        assert wants_repeat(TASK, rid, 0.5) is by_formula
    default = inspect.signature(ResultReporter.report).parameters["repeat_timeout"].default
    assert default == 60.0 and "(`repeat_timeout`, 60 s)" in readme


FLAG: dict[str, Any] = {
    "task": TASK,
    "version": 4,
    "stage": "shadow",
    "edge_percent": 0,
    "sticky_by": "session",
    "max_input_tokens": 512,
    "shadow_rate": 0.0,
    "killed": False,
    "default_route": "cloud",
}


def test_the_route_carries_the_flag_repeat_rate_read_strictly() -> None:
    def rate(**fields: Any) -> float:
        return route({**FLAG, **fields}, TASK, draw=0.5, input_tokens=10).repeat_rate

    assert rate(repeat_rate=0.25) == 0.25 and rate(repeat_rate=1) == 1.0
    # Stored before flags carried it, or unreadable: no repeats.
    assert route(FLAG, TASK, draw=0.5).repeat_rate == 0.0
    for bad in (None, "0.5", True, -0.1, 1.5, float("nan"), [0.5]):
        assert rate(repeat_rate=bad) == 0.0, bad
    # In stage cloud and under the kill switch the repeats go on (they only ask the cloud).
    assert rate(repeat_rate=0.25, stage="cloud") == 0.25
    assert rate(repeat_rate=0.25, killed=True, stage="full", edge_percent=0) == 0.25
    # A flag that cannot be read asks nothing of the cloud either; nor does an unknown task.
    assert rate(repeat_rate=0.25, stage="nonsense") == 0.0
    assert route(None, TASK, draw=0.5).repeat_rate == 0.0


# -- shadow_compare ------------------------------------------------------------------------------


def _flags(tmp_path: Path, stage: str = "shadow", shadow_rate: float = 0.0, **fields: Any) -> Any:
    """A `FlagClient` reading its cache file (no network)."""
    flag = {
        **FLAG,
        "stage": stage,
        "edge_percent": 100 if stage == "full" else 0,
        "shadow_rate": shadow_rate,
        **fields,
    }
    path = tmp_path / f"flags-{uuid.uuid4().hex}.json"
    document = {
        "format": 1,
        "confirmed_at": time.time(),
        "revision": 1,
        "etag": None,
        "flags": {TASK: flag},
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return FlagClient("http://127.0.0.1:9", "sp_unused", cache_path=path)


class Cloud:
    """The cloud: the first call answers at once; later calls (the repeat) answer `second`
    once `release` is set, or raise `error`."""

    def __init__(self, second: str = "cloud again", error: Exception | None = None) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.second = second
        self.error = error
        self.repeat_started = threading.Event()
        self.release = threading.Event()

    def __call__(self, payload: str) -> str:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            return f"cloud:{payload}"
        self.repeat_started.set()
        self.release.wait()
        if self.error is not None:
            raise self.error
        return self.second


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    made = Cloud()
    yield made
    made.release.set()  # no thread outlives the test for long


def test_the_answer_comes_back_while_the_repeat_is_held_and_the_report_carries_it(
    tmp_path: Path, cloud: Cloud
) -> None:
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: "edge",
        cloud,
        client=_flags(tmp_path, repeat_rate=1.0),
        reporter=reports,
        request_id="r-1",
        cloud_fields={"model": "large@7", "input_tokens": 100},
        **KW,
    )
    assert answer == "cloud:hi"
    # The repeat runs, off the serving path: the answer came back while it is still held,
    # and the result waits for it.
    assert cloud.repeat_started.wait(WAIT) and not cloud.release.is_set()
    assert reports.results == []
    cloud.release.set()
    r = reports.one()
    assert r["cloud"]["output"] == "cloud:hi" and r["served"] == "cloud"
    assert r["cloud_repeat"] == {
        "output": "cloud again",
        "error": None,
        "error_message": None,
        "latency_ms": r["cloud_repeat"]["latency_ms"],
        "model": "large@7",
        "input_tokens": 100,
    }
    assert r["cloud_repeat"]["latency_ms"] >= 0 and cloud.calls == 2


def test_a_repeat_that_raises_leaves_the_answer_alone_and_reports_its_error(
    tmp_path: Path,
) -> None:
    cloud = Cloud(error=ConnectionError("provider reset"))
    cloud.release.set()
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: "edge",
        cloud,
        client=_flags(tmp_path, repeat_rate=1.0),
        reporter=reports,
        request_id="r-2",
        **KW,
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert r["cloud"]["output"] == "cloud:hi"
    assert (r["cloud_repeat"]["output"], r["cloud_repeat"]["error"]) == (None, "exception")
    assert r["cloud_repeat"]["error_message"] == "ConnectionError: provider reset"


def test_a_repeat_that_hangs_is_reported_as_a_timeout_while_still_held(
    tmp_path: Path, cloud: Cloud
) -> None:
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: "edge",
        cloud,
        client=_flags(tmp_path, repeat_rate=1.0),
        reporter=reports,
        request_id="r-3",
        cloud_timeout=0.2,
        **KW,
    )
    assert answer == "cloud:hi"
    r = reports.one()  # at the repeat's timeout, while it is still blocked
    assert not cloud.release.is_set()
    assert (r["cloud_repeat"]["error"], r["cloud_repeat"]["latency_ms"]) == ("timeout", 200.0)


def test_the_edge_serves_the_cloud_verifies_and_then_repeats(tmp_path: Path, cloud: Cloud) -> None:
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: "edge:hi",
        cloud,
        client=_flags(tmp_path, "full", 1.0, repeat_rate=1.0),
        reporter=reports,
        request_id="r-4",
        **KW,
    )
    assert answer == "edge:hi"
    assert cloud.repeat_started.wait(WAIT) and reports.results == []
    cloud.release.set()
    r = reports.one()
    assert (r["served"], r["edge"]["output"], r["cloud"]["output"]) == (
        "edge",
        "edge:hi",
        "cloud:hi",
    )
    assert r["cloud_repeat"]["output"] == "cloud again"


@pytest.mark.parametrize("fields", [{}, {"repeat_rate": 0.0}, {"repeat_rate": "1"}])
def test_no_repeat_without_a_readable_rate(tmp_path: Path, cloud: Cloud, fields: Any) -> None:
    reports = Collected()
    answer = shadow_compare(
        "hi",
        lambda p: "edge",
        cloud,
        client=_flags(tmp_path, **fields),
        reporter=reports,
        request_id="r-5",
        **KW,
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert "cloud_repeat" not in r and cloud.calls == 1


def test_no_repeat_of_a_cloud_that_failed_or_of_a_request_not_picked(tmp_path: Path) -> None:
    calls: list[str] = []

    def failing(payload: str) -> str:
        calls.append(payload)
        raise TimeoutError("cloud provider timed out")

    reports = Collected()
    with pytest.raises(TimeoutError):
        shadow_compare(
            "hi",
            lambda p: "edge",
            failing,
            client=_flags(tmp_path, repeat_rate=1.0),
            reporter=reports,
            request_id="r-6",
            **KW,
        )
    r = reports.one()
    assert calls == ["hi"] and "cloud_repeat" not in r

    # At rate 0.2 the repeats are exactly the requests wants_repeat picks. The side pool
    # first let go by earlier tests in this process: a repeat skipped beside threads still
    # held by their hung sides is not the rate's doing.
    _idle("beside_in_flight")
    flags = _flags(tmp_path, repeat_rate=0.2)
    reports = Collected()
    ids = [f"q-{i}" for i in range(200)]
    for rid in ids:
        shadow_compare(
            "x",
            lambda p: "e",
            lambda p: f"c:{p}",
            client=flags,
            reporter=reports,
            request_id=rid,
            **KW,
        )
    wait_until(lambda: len(reports.results) == len(ids), "every result reported")
    repeated = sorted(r["request_id"] for r in reports.results if "cloud_repeat" in r)
    assert repeated == sorted(rid for rid in ids if wants_repeat(TASK, rid, 0.2))
    assert 0 < len(repeated) < len(ids)


def test_async_the_answer_does_not_wait_for_the_repeat(tmp_path: Path) -> None:
    reports = Collected()

    async def main() -> tuple[str, bool]:
        release, started = asyncio.Event(), asyncio.Event()
        calls = 0

        async def acloud(payload: str) -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                return f"cloud:{payload}"
            started.set()
            await release.wait()
            return "cloud again"

        async def edge(payload: str) -> str:
            return "edge"

        answer = await async_shadow_compare(
            "hi",
            edge,
            acloud,
            client=_flags(tmp_path, repeat_rate=1.0),
            reporter=reports,
            request_id="r-7",
            **KW,
        )
        await asyncio.wait_for(started.wait(), WAIT)
        held = not release.is_set() and not reports.results
        release.set()
        for _ in range(1000):
            if reports.results:
                break
            await asyncio.sleep(0.01)
        return answer, held

    assert asyncio.run(main()) == ("cloud:hi", True)
    assert reports.one()["cloud_repeat"]["output"] == "cloud again"


# -- ResultReporter ------------------------------------------------------------------------------


class Ingest:
    """A stand-in for POST /v1/results that keeps what it is sent and accepts all of it."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, exchange: Exchange) -> None:
        batch = json.loads(exchange.body)["results"]
        with self.lock:
            self.posted += batch
        answer = {"accepted": len(batch), "duplicates": 0, "rejected": []}
        exchange.reply(200, json.dumps(answer).encode())


def _result(rid: str, **overrides: Any) -> dict[str, Any]:
    return {
        "request_id": rid,
        "task": TASK,
        "input_tokens": 100,
        "decision": "cloud",
        "served": "cloud",
        "cloud": {"output": "refund", "latency_ms": 380.0, "model": "large@7", "input_tokens": 100},
        **overrides,
    }


def test_the_reporter_posts_the_repeat_it_asked_for_after_report_returned() -> None:
    ingest = Ingest()
    release, started = threading.Event(), threading.Event()

    def again() -> str:
        started.set()
        release.wait()
        return "exchange"

    def broken() -> str:
        raise RuntimeError("boom")

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            assert reporter.report(_result("a"), repeat=again, repeat_rate=1.0) is True
            # report returned while the repeat is held: the result waits for it (pending),
            # nothing is queued or posted yet.
            assert started.wait(WAIT) and not release.is_set()
            assert reporter.pending == 1 and reporter.queued_bytes == 0
            assert reporter.report(_result("b"), repeat=broken, repeat_rate=1.0) is True
            # Not picked (rate 0), or no cloud answer to repeat: posted as given, no call.
            assert reporter.report(_result("c"), repeat=broken, repeat_rate=0.0) is True
            failed = _result("d", cloud={"output": None, "error": "timeout", "latency_ms": 9.0})
            assert reporter.report(failed, repeat=broken, repeat_rate=1.0) is True
            wait_until(lambda: reporter.accepted == 3, "b, c and d posted")
            assert not release.is_set() and "a" not in {r["request_id"] for r in ingest.posted}
            # close waits for the repeat still held (released from another thread).
            threading.Timer(0.05, release.set).start()
            assert reporter.close(timeout=WAIT) is True
            assert (reporter.accepted, reporter.pending, reporter.dropped) == (4, 0, 0)
        finally:
            release.set()
    by_id = {r["request_id"]: r for r in ingest.posted}
    assert sorted(by_id) == ["a", "b", "c", "d"] and len(ingest.posted) == 4
    a = by_id["a"]["cloud_repeat"]
    assert (a["output"], a["error"], a["model"], a["input_tokens"]) == (
        "exchange",
        None,
        "large@7",
        100,
    )
    b = by_id["b"]["cloud_repeat"]
    assert (b["error"], b["error_message"]) == ("exception", "RuntimeError: boom")
    assert "cloud_repeat" not in by_id["c"] and "cloud_repeat" not in by_id["d"]
    assert by_id["a"]["cloud"] == _result("a")["cloud"]


# -- a real API --------------------------------------------------------------------------------


def test_the_real_flag_asks_for_repeats_and_the_api_takes_the_posted_result(
    shared_api: ApiServer,
) -> None:
    live_api, task = shared_api, "repeat_task"
    config = {**TICKET_TASK, "task": task, "stage": "cloud", "grading": {"repeat_rate": 1.0}}
    live_api.call("POST", "/v1/tasks", json=config).raise_for_status()
    flags = FlagClient(live_api.base, live_api.keys["router"], stream=False).start()
    reporter = ResultReporter(live_api.base, live_api.keys["router"], flush_interval=0.05)
    answers = iter(["refund", "exchange"])
    try:
        assert flags.wait_ready(30)
        assert flags.route(task, input_tokens=10).repeat_rate == 1.0
        answer = shadow_compare(
            "t1",
            lambda p: "refund",
            lambda p: next(answers),
            client=flags,
            task=task,
            reporter=reporter,
            input_tokens=100,
            request_id="rep-1",
            cloud_fields={"model": "large@7"},
        )
        assert answer == "refund"
        wait_until(lambda: reporter.accepted == 1, "the result with its repeat stored")
        assert reporter.close(timeout=60) is True
    finally:
        flags.close()
    assert (reporter.accepted, reporter.rejected, reporter.dropped) == (1, 0, 0)
    stored = live_api.call("GET", f"/v1/results/{task}/rep-1", scope="read").json()
    # The cloud served alone: there is no edge pair, whatever the repeat said.
    assert stored["served"] == "cloud" and stored["comparison"]["outcome"] is None

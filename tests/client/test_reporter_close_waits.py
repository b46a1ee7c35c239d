"""`ResultReporter.close()` waits for the results `shadow_compare` (and
`async_shadow_compare`) will report once the side beside the served one is in: a router
that answers its last request and closes at once loses none of them.

Found on main: close() waited only for repeats `report` itself asked for; a result whose
side beside was still running came after close and was dropped ("the reporter is closed").

Hangs are held on events the test controls: "waited" is shown by the result posted while
close was running, never by a clock.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from controlplane.client import ResultReporter, shadow_compare
from tests.client.fake import FakeServer
from tests.client.holding import KW, WAIT, EdgeWithCloudBeside
from tests.client.test_repeats import Ingest
from tests.client.test_reporter_aclose import serve_one


def _closing(reporter: ResultReporter, outcome: list[bool]) -> threading.Thread:
    thread = threading.Thread(target=lambda: outcome.append(reporter.close(timeout=WAIT)))
    thread.start()
    return thread


def test_close_waits_for_the_side_beside_then_posts_the_pair() -> None:
    ingest = Ingest()
    release, started = threading.Event(), threading.Event()

    def cloud(payload: str) -> str:
        started.set()
        release.wait(WAIT)
        return "refund"

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            answer = shadow_compare(
                "t",
                lambda p: "refund",
                cloud,
                client=EdgeWithCloudBeside(),
                reporter=reporter,
                request_id="r-1",
                **KW,
            )
            assert answer == "refund" and started.wait(WAIT)
            assert reporter.pending == 1 and reporter.queued_bytes == 0
            outcome: list[bool] = []
            closing = _closing(reporter, outcome)
            # close is waiting for the cloud beside: nothing is posted, nothing dropped.
            assert closing.is_alive() and not ingest.posted and reporter.dropped == 0
            release.set()
            closing.join(WAIT)
        finally:
            release.set()
    assert outcome == [True]
    assert (reporter.accepted, reporter.pending, reporter.dropped) == (1, 0, 0)
    [posted] = ingest.posted
    assert posted["request_id"] == "r-1" and posted["served"] == "edge"
    assert posted["cloud"]["output"] == "refund" and posted["cloud"]["error"] is None


def test_a_side_that_times_out_ends_the_wait_with_its_timeout() -> None:
    ingest = Ingest()
    release = threading.Event()

    def hung(payload: str) -> str:
        release.wait(WAIT)
        return "late"

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            shadow_compare(
                "t",
                lambda p: "refund",
                hung,
                client=EdgeWithCloudBeside(),
                reporter=reporter,
                request_id="r-2",
                cloud_timeout=0.2,
                **KW,
            )
            assert reporter.close(timeout=WAIT) is True
        finally:
            release.set()
    assert (reporter.accepted, reporter.pending, reporter.dropped) == (1, 0, 0)
    [posted] = ingest.posted
    assert posted["cloud"]["error"] == "timeout" and posted["cloud"]["output"] is None


def test_a_side_that_raises_ends_the_wait_with_its_error() -> None:
    ingest = Ingest()
    release = threading.Event()

    def broken(payload: str) -> str:
        release.wait(WAIT)
        raise RuntimeError("boom")

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            shadow_compare(
                "t",
                lambda p: "refund",
                broken,
                client=EdgeWithCloudBeside(),
                reporter=reporter,
                request_id="r-5",
                **KW,
            )
            assert reporter.pending == 1
            release.set()
            assert reporter.close(timeout=WAIT) is True
        finally:
            release.set()
    assert (reporter.accepted, reporter.pending, reporter.dropped) == (1, 0, 0)
    [posted] = ingest.posted
    assert posted["cloud"]["error"] == "exception"
    assert posted["cloud"]["error_message"] == "RuntimeError: boom"


def test_close_waits_for_an_async_side_beside() -> None:
    ingest = Ingest()

    async def main(reporter: ResultReporter) -> list[bool]:
        release = await serve_one(reporter, "r-3")  # its cloud beside waits for release
        outcome: list[bool] = []
        closing = _closing(reporter, outcome)  # close blocks: off the loop, as at shutdown
        await asyncio.sleep(0)
        assert closing.is_alive() and not ingest.posted
        release.set()
        await asyncio.to_thread(closing.join, WAIT)
        return outcome

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        outcome = asyncio.run(main(reporter))
    assert outcome == [True]
    [posted] = ingest.posted
    assert posted["request_id"] == "r-3" and posted["cloud"]["output"] == "refund"


def test_a_reporter_without_hold_gets_the_pair_as_before() -> None:
    """`hold` is optional: a reporter with `report` alone is handed the pair when it is in."""
    got: list[dict[str, Any]] = []
    arrived = threading.Event()

    class Plain:
        def report(self, result: Any) -> bool:
            got.append(result)
            arrived.set()
            return True

    release = threading.Event()

    def cloud(payload: str) -> str:
        release.wait(WAIT)
        return "refund"

    shadow_compare(
        "t",
        lambda p: "refund",
        cloud,
        client=EdgeWithCloudBeside(),
        reporter=Plain(),
        request_id="r-4",
        **KW,
    )
    assert not got
    release.set()
    assert arrived.wait(WAIT) and got[0]["cloud"]["output"] == "refund"

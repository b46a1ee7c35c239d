"""`await reporter.aclose()` and `async with ResultReporter(...)`: closing from async code
waits in a worker thread, so the event loop goes on running the sides beside that close
waits for. Before, async code had only `close()`, which blocks the loop it is called on:
a side beside on that loop could not finish, and its result was dropped after `timeout`
(README said to wrap it in `asyncio.to_thread` by hand)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from controlplane.client import ResultReporter, async_shadow_compare
from tests.client.fake import FakeServer
from tests.client.holding import KW, WAIT, EdgeWithCloudBeside
from tests.client.test_repeats import Ingest


async def serve_one(reporter: ResultReporter, request_id: str) -> asyncio.Event:
    """One request whose cloud beside waits on the event returned (on this loop)."""
    release, started = asyncio.Event(), asyncio.Event()

    async def edge(payload: str) -> str:
        return "refund"

    async def cloud(payload: str) -> str:
        started.set()
        await release.wait()
        return "refund"

    answer = await async_shadow_compare(
        "t",
        edge,
        cloud,
        client=EdgeWithCloudBeside(),
        reporter=reporter,
        request_id=request_id,
        **KW,
    )
    await asyncio.wait_for(started.wait(), WAIT)
    assert answer == "refund" and reporter.pending == 1
    return release


def test_aclose_lets_the_loop_finish_the_side_beside_it_waits_for() -> None:
    ingest = Ingest()

    async def main(reporter: ResultReporter) -> bool:
        release = await serve_one(reporter, "r-1")
        closing = asyncio.create_task(reporter.aclose(timeout=WAIT))
        await asyncio.sleep(0.01)
        # The loop runs while aclose waits: nothing posted yet, nothing dropped.
        assert not closing.done() and not ingest.posted and reporter.dropped == 0
        release.set()
        return await closing

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        assert asyncio.run(main(reporter)) is True
    [posted] = ingest.posted
    assert posted["request_id"] == "r-1" and posted["cloud"]["output"] == "refund"


def test_async_with_closes_on_the_way_out() -> None:
    ingest = Ingest()

    async def main(base: str) -> ResultReporter:
        async with ResultReporter(base, "k", flush_interval=0.01) as reporter:
            release = await serve_one(reporter, "r-2")
            asyncio.get_running_loop().call_later(0.05, release.set)
        return reporter

    with FakeServer(ingest) as server:
        reporter = asyncio.run(main(server.base))
    assert reporter.pending == 0 and reporter.dropped == 0
    assert [p["request_id"] for p in ingest.posted] == ["r-2"]


def test_close_on_the_loop_says_to_use_aclose(caplog: pytest.LogCaptureFixture) -> None:
    async def main(reporter: ResultReporter) -> bool:
        release = await serve_one(reporter, "r-3")
        try:
            # Blocks this loop: the side beside cannot finish; it is given up at once.
            return reporter.close(timeout=0)
        finally:
            release.set()

    with FakeServer(Ingest()) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        with caplog.at_level(logging.WARNING, logger="shadowplane.client"):
            assert asyncio.run(main(reporter)) is False
    assert "use `await reporter.aclose()`" in caplog.text


def test_close_on_a_loop_says_nothing_of_results_held_off_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A result held by sync code (`shadow_compare`'s side beside runs in a thread, not on
    the loop): close() called on some loop waits for it without a word about aclose."""
    with FakeServer(Ingest()) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        held = reporter.hold()  # no loop runs here: its side is a thread's

        async def main() -> bool:
            return reporter.close(timeout=0)

        with caplog.at_level(logging.WARNING, logger="shadowplane.client"):
            assert asyncio.run(main()) is False
        held.release()
    assert "aclose" not in caplog.text
    assert reporter.drop_reasons == {"closed": 1}

"""Hostile cases for `shadow_compare`'s hold on the reporter (`_Pair._hold`,
`ResultReporter.hold`): each test here failed on c8d69a4, which first held results.

1. A hold that could never end: an async side beside (or the cloud's repeat) whose task
   ended without `put` (the loop shut down and cancelled it; its output broke
   `_cloud_side`) stayed counted in `pending` for good, so every `close()` waited its whole
   timeout and then answered False, the result neither posted nor counted as dropped. Now
   the side is forgotten (named under `skipped`) or read as `invalid`, and the result sent.
2. `hold` was looked up by name on any reporter: a reporter whose `hold` means something
   else, a proxy that delegates unknown names to a `ResultReporter`, a `MagicMock`, or one
   whose attribute lookup raises, lost the result, bypassed the wrapper's `report` (its
   redaction), or failed the caller's request. Only a `HoldsResults` is held now; any
   other reporter gets every result through its own `report`, as before.

Syncing is on things the test controls: an executor it shuts down (its done callbacks,
where the pair is reported, have run by then) and `asyncio.run` returning (the loop's
tasks have ended); no clock.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from unittest import mock

from controlplane.client import ResultReporter, async_shadow_compare, shadow_compare
from tests.client.fake import FakeServer
from tests.client.holding import KW, WAIT, CloudThenRepeat, EdgeWithCloudBeside
from tests.client.test_repeats import Ingest

# -- 1. holds that never end ----------------------------------------------------------------


def test_an_async_side_cancelled_when_the_loop_ends_leaves_nothing_held() -> None:
    ingest = Ingest()

    async def edge(payload: str) -> str:
        return "refund"

    async def cloud(payload: str) -> str:
        await asyncio.Event().wait()  # never answers: the loop ends first
        return "refund"

    async def main(reporter: ResultReporter) -> str:
        return await async_shadow_compare(
            "t",
            edge,
            cloud,
            client=EdgeWithCloudBeside(),
            reporter=reporter,
            request_id="h-1",
            **KW,
        )

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            # asyncio.run cancels the side beside's task, and waits for it, before it returns.
            assert asyncio.run(main(reporter)) == "refund"
            # The result is reported without the side, not held for good: close sends it
            # (a leaked hold makes close wait its whole timeout and answer False).
            assert reporter.close(timeout=WAIT) is True
        finally:
            reporter.close(timeout=0)
    [posted] = ingest.posted
    assert posted["request_id"] == "h-1" and posted["cloud"] is None
    assert posted["skipped"]["cloud"].startswith("not reported: cancelled")


def test_an_async_repeat_cancelled_when_the_loop_ends_leaves_nothing_held() -> None:
    ingest = Ingest()
    calls: list[str] = []

    async def edge(payload: str) -> str:
        return "refund"

    async def cloud(payload: str) -> str:
        calls.append(payload)
        if len(calls) > 1:  # the repeat never answers: the loop ends first
            await asyncio.Event().wait()
        return "refund"

    async def main(reporter: ResultReporter) -> str:
        return await async_shadow_compare(
            "t",
            edge,
            cloud,
            client=CloudThenRepeat(),
            reporter=reporter,
            request_id="h-2",
            **KW,
        )

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            assert asyncio.run(main(reporter)) == "refund"
            assert len(calls) == 2  # the repeat was started
            assert reporter.close(timeout=WAIT) is True
        finally:
            reporter.close(timeout=0)
    [posted] = ingest.posted
    assert posted["cloud"]["output"] == "refund" and "cloud_repeat" not in posted
    assert posted["skipped"]["cloud_repeat"].startswith("not reported: cancelled")


def test_an_async_side_whose_output_breaks_json_still_ends_its_hold() -> None:
    ingest = Ingest()
    deep: list[Any] = []
    inner = deep
    for _ in range(10_000):  # nested past the JSON encoder's recursion limit
        inner.append([])
        inner = inner[0]

    async def edge(payload: str) -> str:
        return "refund"

    async def cloud(payload: str) -> Any:
        await asyncio.sleep(0)
        return deep

    async def main(reporter: ResultReporter) -> str:
        answer = await async_shadow_compare(
            "t",
            edge,
            cloud,
            client=EdgeWithCloudBeside(),
            reporter=reporter,
            request_id="h-3",
            **KW,
        )
        others = asyncio.all_tasks() - {asyncio.current_task()}
        await asyncio.gather(*others, return_exceptions=True)  # the side beside has ended
        return answer

    with FakeServer(ingest) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            assert asyncio.run(main(reporter)) == "refund"
            assert reporter.close(timeout=WAIT) is True
        finally:
            reporter.close(timeout=0)
    [posted] = ingest.posted
    # An output JSON cannot hold is the side's error, as for any output that is not JSON.
    assert posted["cloud"]["error"] == "invalid" and posted["cloud"]["output"] is None


# -- 2. `hold` found by name on any reporter --------------------------------------------------


def _edge_served_cloud_beside(reporter: Any, **extra: Any) -> str:
    """shadow_compare with the cloud beside held on an event until the answer is given; it
    returns once the pair has been handed to whatever reports it (the executor's done
    callbacks have run when its shutdown returns)."""
    release = threading.Event()

    def cloud(payload: str) -> str:
        release.wait(WAIT)
        return "refund"

    executor = ThreadPoolExecutor(2)
    try:
        answer = shadow_compare(
            "t",
            lambda p: "refund",
            cloud,
            client=EdgeWithCloudBeside(),
            reporter=reporter,
            executor=executor,
            **KW,
            **extra,
        )
    finally:
        release.set()
        executor.shutdown(wait=True)
    return answer


def test_a_reporter_whose_hold_returns_nothing_still_gets_the_pair() -> None:
    got: list[Any] = []

    class PausableReporter:
        """A reporter of the router's own whose `hold()` means something else."""

        paused = False

        def report(self, result: Any) -> bool:
            got.append(result)
            return True

        def hold(self) -> None:
            self.paused = True

    assert _edge_served_cloud_beside(PausableReporter()) == "refund"
    assert len(got) == 1 and got[0]["cloud"]["output"] == "refund"


def test_a_redacting_proxy_around_the_reporter_still_redacts_held_results() -> None:
    ingest = Ingest()

    class Redacting:
        """Drops the input before it leaves; everything else is the inner reporter's."""

        def __init__(self, inner: ResultReporter) -> None:
            self._inner = inner

        def report(self, result: Any) -> bool:
            return self._inner.report({k: v for k, v in result.items() if k != "input"})

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    with FakeServer(ingest) as server:
        inner = ResultReporter(server.base, "k", flush_interval=0.01)
        try:
            answer = _edge_served_cloud_beside(
                Redacting(inner), fields={"input": {"text": "card 4111 1111 1111 1111"}}
            )
            assert answer == "refund"
            assert inner.close(timeout=WAIT) is True
        finally:
            inner.close(timeout=0)
    [posted] = ingest.posted
    assert "input" not in posted


def test_a_mock_reporter_is_handed_the_pair_through_report() -> None:
    reporter = mock.MagicMock()
    assert _edge_served_cloud_beside(reporter) == "refund"
    reporter.report.assert_called_once()


def test_a_reporter_whose_attribute_lookup_raises_never_fails_the_answer() -> None:
    got: list[Any] = []

    class ConfiguredReporter:
        """Unknown attributes read from its settings (a KeyError, not AttributeError)."""

        settings: dict[str, Any] = {}

        def report(self, result: Any) -> bool:
            got.append(result)
            return True

        def __getattr__(self, name: str) -> Any:
            return self.settings[name]

    assert _edge_served_cloud_beside(ConfiguredReporter()) == "refund"
    assert len(got) == 1

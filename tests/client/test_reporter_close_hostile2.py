"""Second hostile review of `shadow_compare`'s hold on the reporter (02fe549, fixing c8d69a4).

Defects found there, each a test here (fixed since: the side's task is forgotten when it
ends without its side, whenever it was cancelled; an exception's message that cannot be
read is named by its type):

1. An async side beside (or repeat) whose task is cancelled before its first step never
   enters `_abeside`'s `try`: a coroutine cancelled before it starts raises at its first
   line, so `forget` is not called, the pair is never reported and the hold never ends
   (`pending` stays 1, `close` waits its whole timeout and answers False, the result
   neither posted nor counted as dropped). It happens with the common flag (edge served,
   cloud beside): the answer returns without yielding after the side's task is made, so a
   caller that then cancels the other tasks (the usual graceful shutdown), or a request
   handled in a task the loop stops around, leaves the side unstarted.
2. Sync: a side whose exception cannot be turned into a string (its `__str__` raises)
   breaks `_cloud_side` in the future's done callback; the side is then reported as a
   timeout at its deadline (`cloud_timeout`, 60 s by default, during which `close` waits),
   the way 02fe549 fixed for an output nested too deeply. On the serving path the same
   edge exception reaches the caller, which README says never happens.

Held (plain tests): a held result goes through a `ResultReporter` subclass's own `report`
(its redaction); a repeat whose start fails after its side already came is reported once
(c8d69a4 reported it twice); a result whose side was cancelled is taken by the real API
and readable.

Syncing is on things the test controls (an inline executor, an executor's shutdown,
`asyncio.run` returning); no clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from controlplane.client import ResultReporter, async_shadow_compare, shadow_compare
from controlplane.client import shadow as shadow_module
from tests.client.fake import FakeServer
from tests.client.holding import (
    KW,
    WAIT,
    CloudThenRepeat,
    CloudWithEdgeBeside,
    EdgeOnly,
    EdgeWithCloudBeside,
    Recording,
    Unprintable,
    answers,
    never_answers,
)
from tests.client.test_repeats import Ingest
from tests.conftest import TICKET_TASK
from tests.liveapi import ApiServer

# -- 1. a side beside cancelled before it started --------------------------------------------


def test_cancelling_the_other_tasks_right_after_the_answer_still_reports_the_pair() -> None:
    reporter = Recording()

    async def main() -> str:
        answer = await async_shadow_compare(
            "t", answers, never_answers, client=EdgeWithCloudBeside(), reporter=reporter, **KW
        )
        others = asyncio.all_tasks() - {asyncio.current_task()}
        for other in others:  # the usual graceful shutdown
            other.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        return answer

    try:
        assert asyncio.run(main()) == "refund"
        # Reported without the cloud (named under skipped), the hold ended.
        assert len(reporter.got) == 1 and reporter.pending == 0
        assert reporter.got[0]["skipped"]["cloud"].startswith("not reported: cancelled")
    finally:
        reporter.close(timeout=0)


def test_a_request_answered_as_the_loop_stops_still_reports_the_pair() -> None:
    reporter = Recording()

    async def cloud(payload: str) -> str:
        return "refund"  # answers without yielding

    async def handle() -> str:
        return await async_shadow_compare(
            "t", never_answers, cloud, client=CloudWithEdgeBeside(), reporter=reporter, **KW
        )

    async def main() -> None:
        # A request handled in a task of its own; main ends as its handler answers, and
        # asyncio.run cancels what is left (the edge beside, not started yet).
        asyncio.get_running_loop().create_task(handle())

    try:
        asyncio.run(main())
        assert len(reporter.got) == 1 and reporter.pending == 0
        assert reporter.got[0]["cloud"]["output"] == "refund"
    finally:
        reporter.close(timeout=0)


# -- 2. a side whose exception cannot be read --------------------------------------------------


def test_a_sync_side_beside_whose_exception_cannot_be_read_is_reported_when_it_ends() -> None:
    got: list[dict[str, Any]] = []

    class Plain:
        def report(self, result: Any) -> bool:
            got.append(result)
            return True

    def cloud(payload: str) -> str:
        raise Unprintable()

    executor = ThreadPoolExecutor(2)
    try:
        answer = shadow_compare(
            "t",
            lambda p: "refund",
            cloud,
            client=EdgeWithCloudBeside(),
            reporter=Plain(),
            executor=executor,
            cloud_timeout=WAIT,
            **KW,
        )
    finally:
        executor.shutdown(wait=True)  # the cloud's done callback has run
    assert answer == "refund"
    # Reported as the side's error when it ended, not as a timeout at its deadline.
    assert len(got) == 1 and got[0]["cloud"]["error"] in ("exception", "invalid")


def test_an_edge_whose_exception_cannot_be_read_never_reaches_the_caller() -> None:
    got: list[dict[str, Any]] = []

    class Plain:
        def report(self, result: Any) -> bool:
            got.append(result)
            return True

    def edge(payload: str) -> str:
        raise Unprintable()

    # README: an edge that serves and raises (anything) never reaches the caller.
    answer = shadow_compare(
        "t", edge, lambda p: "refund", client=EdgeOnly(), reporter=Plain(), **KW
    )
    assert answer == "refund"
    assert got[0]["degraded"] is True and got[0]["edge"]["error"] == "exception"


# -- what held ---------------------------------------------------------------------------------


def test_a_held_result_goes_through_a_subclass_report_and_its_redaction() -> None:
    ingest = Ingest()

    class Redacting(ResultReporter):
        def report(self, result: Any, **kw: Any) -> bool:
            return super().report({k: v for k, v in result.items() if k != "input"}, **kw)

    release = threading.Event()

    def cloud(payload: str) -> str:
        release.wait(WAIT)
        return "refund"

    with FakeServer(ingest) as server:
        reporter = Redacting(server.base, "k", flush_interval=0.01)
        try:
            answer = shadow_compare(
                "t",
                lambda p: "refund",
                cloud,
                client=EdgeWithCloudBeside(),
                reporter=reporter,
                request_id="h2-4",
                fields={"input": {"text": "card 4111 1111 1111 1111"}},
                **KW,
            )
            assert answer == "refund" and reporter.pending == 1  # held
            release.set()
            assert reporter.close(timeout=WAIT) is True
        finally:
            release.set()
            reporter.close(timeout=0)
    [posted] = ingest.posted
    assert posted["request_id"] == "h2-4" and "input" not in posted
    assert posted["cloud"]["output"] == "refund"


class Inline(Executor):
    """Runs each call at once: the future it gives is already done."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_a_repeat_whose_start_fails_after_its_side_came_is_reported_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The repeat is in (its future was done when `_beside` added the callback) and then
    setting its deadline raises: the start failed, but the result was already reported;
    `forget` must not report it a second time (c8d69a4 did, with `skipped` added)."""
    reporter = Recording()

    def no_deadline(when: float, fn: Callable[[], None]) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(shadow_module._deadlines, "call_at", no_deadline)
    try:
        answer = shadow_compare(
            "t",
            lambda p: "edge",
            lambda p: "refund",
            client=CloudThenRepeat(),
            reporter=reporter,
            executor=Inline(),
            **KW,
        )
        assert answer == "refund"
        [result] = reporter.got
        assert result["cloud_repeat"]["output"] == "refund" and "skipped" not in result
        assert reporter.pending == 0
    finally:
        reporter.close(timeout=0)


def test_a_result_whose_side_was_cancelled_is_taken_and_stored_by_the_api(
    shared_api: ApiServer,
) -> None:
    task = "hostile2_task"
    shared_api.call("POST", "/v1/tasks", json={**TICKET_TASK, "task": task}).raise_for_status()
    reporter = ResultReporter(shared_api.base, shared_api.keys["router"], flush_interval=0.05)

    async def main() -> str:
        return await async_shadow_compare(
            "t",
            answers,
            never_answers,
            client=EdgeWithCloudBeside(),
            reporter=reporter,
            task=task,
            input_tokens=100,
            request_id="h2-api",
            edge_fields={"model": "small@3"},
        )

    try:
        assert asyncio.run(main()) == "refund"  # the loop cancels the cloud beside
        assert reporter.close(timeout=60) is True
    finally:
        reporter.close(timeout=0)
    assert (reporter.accepted, reporter.rejected, reporter.dropped) == (1, 0, 0)
    stored = shared_api.call("GET", f"/v1/results/{task}/h2-api", scope="read").json()
    assert stored["request_id"] == "h2-api" and stored["served"] == "edge"
    # Stored without the cloud, which `skipped` names with why (the API keeps it).
    assert stored["edge"]["model"] == "small@3" and stored["edge"]["error"] is None
    assert stored["cloud"] is None and list(stored["skipped"]) == ["cloud"], stored
    assert stored["skipped"]["cloud"].startswith("not reported: cancelled before it finished")

"""Third hostile review of `shadow_compare`'s hold on the reporter (82c1feb, fixing 02fe549).

Defects found, each a test here (fixed since):

1. An async side beside whose event loop is closed without cancelling its tasks
   (`loop.run_until_complete(...)` then `loop.close()`, as older code and some servers do)
   is neither put nor cancelled: `_keep_side`'s done callback never runs, the hold never
   ends. `close` waits its whole timeout and answers False, though its docstring says each
   held result waits at most its side's timeout; the result is neither posted nor counted
   as dropped.
2. Sync: a side beside queued in the caller's executor and cancelled there
   (`executor.shutdown(cancel_futures=True)`) never runs, yet `_beside`'s `finished`
   ignores a cancelled future, so the side is reported at its deadline as `error: timeout`
   with `latency_ms` its whole timeout: a false record against the side (the edge never
   ran), and `close` waits that deadline (60 s by default for a cloud beside).
3. An edge that serves and raises an exception whose type name cannot be read, or whose
   `__str__` gives a str subclass that cannot be formatted, reaches the caller: `_message`
   guards only `str(exc)` (README: an edge that raises anything never reaches the caller).
4. An edge that serves an output whose JSON check raises something other than
   TypeError/ValueError/RecursionError (a dict subclass whose `items()` raises) reaches the
   caller from `_jsonable` (README: an answer that is not JSON never reaches the caller).

Held (plain tests): BaseException subclasses raised by a side, sync and async, served,
beside and as the repeat, never reach the caller and are reported once with the hold ended;
`finished` racing `expired` across threads reports each result exactly once.

Syncing is on things the test controls (an executor's shutdown, `run_until_complete`
returning); no clock.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from controlplane.client import async_shadow_compare, shadow_compare
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

# -- 1. a loop closed without cancelling its tasks ---------------------------------------------


def test_a_side_beside_on_a_loop_closed_without_cancelling_it_ends_the_hold() -> None:
    reporter = Recording()
    loop = asyncio.new_event_loop()
    try:
        answer = loop.run_until_complete(
            async_shadow_compare(
                "t",
                answers,
                never_answers,
                client=EdgeWithCloudBeside(),
                reporter=reporter,
                cloud_timeout=0.01,
                **KW,
            )
        )
        assert answer == "refund" and reporter.pending == 1  # held for the cloud beside
        loop.close()  # as `run_until_complete` users do: the cloud's tasks stay pending
        # close waits at most the side's timeout (0.01 s) for it: 5 s is far beyond that.
        assert reporter.close(timeout=5) is True
        assert len(reporter.got) == 1 and reporter.got[0]["served"] == "edge"
    finally:
        if not loop.is_closed():
            loop.close()
        reporter.close(timeout=0)


# -- 2. a sync side cancelled in the caller's executor -----------------------------------------


def test_a_side_beside_cancelled_by_its_executor_is_not_reported_as_a_timeout() -> None:
    reporter = Recording()
    executor = ThreadPoolExecutor(1)
    busy = threading.Event()
    executor.submit(busy.wait, WAIT)  # the one thread held: the edge beside queues
    try:
        answer = shadow_compare(
            "t",
            lambda p: "edge",
            lambda p: "refund",
            client=CloudWithEdgeBeside(),
            reporter=reporter,
            executor=executor,
            edge_timeout=WAIT,
            **KW,
        )
        assert answer == "refund" and reporter.pending == 1  # held for the edge beside
        executor.shutdown(wait=False, cancel_futures=True)  # the edge will never run
        # The cancellation is known now (the future's callbacks ran in shutdown): the pair
        # is reported without the edge, not as an edge timeout WAIT seconds from now.
        assert len(reporter.got) == 1 and reporter.pending == 0
        [result] = reporter.got
        assert result["edge"] is None and "edge" in result["skipped"]
    finally:
        busy.set()
        executor.shutdown(wait=True)
        reporter.close(timeout=0)


# -- 3. an exception whose name or message cannot be formatted ----------------------------------


class _NoName(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise AttributeError("no name")


class NamelessError(Exception, metaclass=_NoName):
    """An exception whose type name cannot be read."""


class _Unformattable(str):
    def __format__(self, spec: str) -> str:
        raise ValueError("cannot be formatted")


class OddMessageError(Exception):
    """An exception whose message is a str subclass that cannot be formatted."""

    def __str__(self) -> str:
        return _Unformattable("odd")


@pytest.mark.parametrize("error", [NamelessError, OddMessageError])
def test_an_edge_raising_an_exception_that_cannot_be_named_never_reaches_the_caller(
    error: type[Exception],
) -> None:
    reporter = Recording()

    def edge(payload: str) -> str:
        raise error()

    try:
        answer = shadow_compare(
            "t", edge, lambda p: "refund", client=EdgeOnly(), reporter=reporter, **KW
        )
        assert answer == "refund"
        assert reporter.got[0]["degraded"] is True
        assert reporter.got[0]["edge"]["error"] == "exception"
    finally:
        reporter.close(timeout=0)


# -- 4. an edge output whose JSON check raises something else -------------------------------------


class LazyMapping(dict[str, Any]):
    """A dict whose items cannot be read (a lazy mapping whose loading fails)."""

    def items(self) -> Any:
        raise KeyError("not loaded")


def test_an_edge_output_whose_json_check_raises_never_reaches_the_caller() -> None:
    reporter = Recording()

    async def edge(payload: str) -> Any:
        return LazyMapping(label="refund")

    async def cloud(payload: str) -> str:
        return "refund"

    try:
        answer = asyncio.run(
            async_shadow_compare("t", edge, cloud, client=EdgeOnly(), reporter=reporter, **KW)
        )
        assert answer == "refund"
        assert reporter.got[0]["degraded"] is True
        assert reporter.got[0]["edge"]["error"] == "invalid"
    finally:
        reporter.close(timeout=0)


# -- what held ------------------------------------------------------------------------------------

BASE_ERRORS = [KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError]


@pytest.mark.parametrize("error", BASE_ERRORS)
def test_a_base_exception_from_a_sync_side_never_reaches_the_caller(
    error: type[BaseException],
) -> None:
    reporter = Recording()
    calls = 0

    def cloud(payload: str) -> str:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise error()  # the repeat
        return "refund"

    def edge(payload: str) -> str:
        raise error()

    executor = ThreadPoolExecutor(2)
    try:
        served = shadow_compare(
            "t", edge, cloud, client=EdgeOnly(), reporter=reporter, executor=executor, **KW
        )
        beside = shadow_compare(
            "t",
            edge,
            lambda p: "refund",
            client=CloudWithEdgeBeside(),
            reporter=reporter,
            executor=executor,
            edge_timeout=WAIT,
            **KW,
        )
        calls = 0
        repeated = shadow_compare(
            "t",
            lambda p: "edge",
            cloud,
            client=CloudThenRepeat(),
            reporter=reporter,
            executor=executor,
            cloud_timeout=WAIT,
            **KW,
        )
    finally:
        executor.shutdown(wait=True)  # every side's done callback has run
    assert (served, beside, repeated) == ("refund", "refund", "refund")
    assert reporter.pending == 0 and len(reporter.got) == 3
    assert [r["edge"]["error"] for r in reporter.got[:2]] == ["exception", "exception"]
    assert reporter.got[2]["cloud_repeat"]["error"] == "exception"
    assert reporter.close(timeout=0) is True


@pytest.mark.parametrize("error", BASE_ERRORS)
def test_a_base_exception_from_an_async_side_never_reaches_the_caller(
    error: type[BaseException],
) -> None:
    reporter = Recording()
    calls = 0

    async def edge(payload: str) -> str:
        raise error()

    async def cloud(payload: str) -> str:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise error()
        return "refund"

    async def main() -> list[str]:
        served = await async_shadow_compare(
            "t", edge, answers, client=EdgeOnly(), reporter=reporter, **KW
        )
        beside = await async_shadow_compare(
            "t", answers, edge, client=EdgeWithCloudBeside(), reporter=reporter, **KW
        )
        repeated = await async_shadow_compare(
            "t", answers, cloud, client=CloudThenRepeat(), reporter=reporter, **KW
        )
        for _ in range(1000):  # the side beside and the repeat end on this loop
            if not reporter.pending:
                break
            await asyncio.sleep(0)
        return [served, beside, repeated]

    try:
        assert asyncio.run(main()) == ["refund", "refund", "refund"]
        assert reporter.pending == 0 and len(reporter.got) == 3
        assert reporter.got[0]["edge"]["error"] == "exception"
        assert reporter.got[1]["cloud"]["error"] == "exception"
        assert reporter.got[2]["cloud_repeat"]["error"] == "exception"
    finally:
        reporter.close(timeout=0)


def test_a_sync_side_racing_its_deadline_is_reported_once() -> None:
    """`finished` (a pool thread: put, or forget for a side that cannot be read) against
    `expired` (the deadline thread) with a deadline that lands as the side ends."""
    reporter = Recording()
    executor = ThreadPoolExecutor(4)
    n = 120

    def cloud(payload: int) -> Any:
        if payload % 2:
            raise Unprintable()
        return "refund"

    try:
        for i in range(n):
            shadow_compare(
                i,
                lambda p: "refund",
                cloud,
                client=EdgeWithCloudBeside(),
                reporter=reporter,
                executor=executor,
                cloud_timeout=0.0005 * (i % 4),
                request_id=f"race-{i}",
                **KW,
            )
        assert reporter.close(timeout=WAIT) is True
    finally:
        executor.shutdown(wait=True)
        reporter.close(timeout=0)
    ids = [r["request_id"] for r in reporter.got]
    assert sorted(ids) == sorted(f"race-{i}" for i in range(n))  # each once

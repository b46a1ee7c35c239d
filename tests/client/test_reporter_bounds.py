"""`ResultReporter` against servers the real API never is, and results larger than it takes:
an odd answer never stops the sending thread; the queue is bounded in bytes as well as in
count; a result larger than one request may be is refused at once; batches stay under the
body limit; a reporter that can no longer send says so with False."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from controlplane.client import ResultReporter
from tests.client.fake import Exchange, FakeServer
from tests.liveapi import free_port, wait_until

KiB, MiB = 1024, 1024 * 1024


def _result(i: int, text: str = "hello") -> dict[str, Any]:
    return {
        "request_id": f"r-{i}",
        "task": "ticket_classify",
        "input_tokens": 10,
        "decision": "edge",
        "served": "cloud",
        "input": {"text": text},
        "cloud": {"output": "refund", "latency_ms": 380.0},
    }


class Api:
    """Stores what it is sent; answers `odd` instead while that is set."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.bodies: list[int] = []
        self.odd: bytes | None = None

    def app(self, ex: Exchange) -> None:
        self.bodies.append(len(ex.body))
        if self.odd is not None:
            ex.reply(200, self.odd)
            return
        items = json.loads(ex.body)["results"]
        new = [i for i in items if i["request_id"] not in self.stored]
        self.stored.update((i["request_id"], i) for i in items)
        answer = {"accepted": len(new), "duplicates": len(items) - len(new), "rejected": []}
        ex.reply(200, json.dumps(answer).encode())


@pytest.mark.parametrize(
    "odd",
    [
        b'{"accepted":Infinity,"duplicates":0,"rejected":[]}',
        b'{"accepted":1e400,"duplicates":0,"rejected":[]}',
        b'{"accepted":NaN,"duplicates":0,"rejected":[]}',
        b'{"accepted":"1","duplicates":0,"rejected":[]}',
        b'{"accepted":1,"duplicates":0,"rejected":{"0":1}}',
        b"[]",
        b"<html>maintenance</html>",
    ],
)
def test_an_odd_answer_is_retried_and_never_stops_the_sender(odd: bytes) -> None:
    api = Api()
    api.odd = odd
    with FakeServer(api.app) as server:
        reporter = ResultReporter(server.base, "k", flush_interval=0.01, max_backoff=0.1)
        assert reporter.report(_result(1))
        wait_until(lambda: len(api.bodies) >= 2, "the batch sent again")
        assert "not the API's" in (reporter.last_error or "")
        assert reporter.accepted == 0 and reporter.pending == 1
        api.odd = None  # the API answers properly again
        assert reporter.report(_result(2))
        wait_until(lambda: reporter.accepted == 2, "both results stored")
        assert reporter.report(_result(3))
        assert reporter.close(timeout=30) is True
    assert sorted(api.stored) == ["r-1", "r-2", "r-3"]
    assert (reporter.accepted, reporter.dropped) == (3, 0)


class Breaks(random.Random):
    """A random source that raises `error` once, the first time the sender backs off."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(7)
        self.error: BaseException | None = error

    def uniform(self, a: float, b: float) -> float:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return super().uniform(a, b)


def test_a_failure_while_sending_one_batch_drops_that_batch_and_the_sender_goes_on() -> None:
    api = Api()
    api.odd = b"{}"  # the first answer is odd: the sender backs off, and that fails
    with FakeServer(api.app) as server:
        reporter = ResultReporter(
            server.base, "k", flush_interval=0.01, rng=Breaks(RuntimeError("a bug"))
        )
        assert reporter.report(_result(1))
        wait_until(lambda: reporter.dropped == 1, "the failed batch dropped")
        assert reporter.drop_reasons == {"failed": 1}
        assert "RuntimeError: a bug" in (reporter.last_error or "")
        api.odd = None
        assert reporter.report(_result(2))
        assert reporter.close(timeout=30) is True
    assert sorted(api.stored) == ["r-2"]


def test_report_answers_false_once_the_sender_has_stopped() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    reporter = ResultReporter(nowhere, "k", flush_interval=0.01, rng=Breaks(SystemExit(3)))
    assert reporter.report(_result(1))
    wait_until(lambda: reporter.dropped == 1, "the thread to stop")  # its batch is lost
    assert reporter.report(_result(2)) is False
    assert reporter.drop_reasons == {"unsent": 1, "stopped": 1}
    reporter.close(timeout=1)
    assert reporter.report(_result(3)) is False
    assert reporter.drop_reasons["closed"] == 1


def test_the_queue_is_bounded_in_bytes_and_a_result_over_a_request_is_refused_at_once() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # the API is down: everything waits
    reporter = ResultReporter(
        nowhere,
        "k",
        max_queue_bytes=2 * MiB,
        max_body_bytes=1 * MiB,
        flush_interval=0.01,
        max_backoff=0.1,
    )
    try:
        text = "x" * (200 * KiB)
        answers = [reporter.report(_result(i, text)) for i in range(100)]
        # At most one request's worth in flight, and max_queue_bytes waiting.
        assert 0 < answers.count(True) <= (2 * MiB + 1 * MiB) // (200 * KiB)
        assert reporter.queued_bytes <= 2 * MiB
        assert reporter.drop_reasons["queue_full"] == answers.count(False)

        # Over what one request may carry: refused without queuing.
        assert reporter.report(_result(1000, "y" * MiB)) is False
        assert reporter.drop_reasons["too_large"] == 1
        assert reporter.report({"request_id": {1, 2}}) is False  # type: ignore[dict-item]
        assert reporter.drop_reasons["not_json"] == 1
    finally:
        reporter.close(timeout=0.5)
    with pytest.raises(ValueError, match="max_result_bytes: must be 1 to"):
        ResultReporter(nowhere, "k", max_body_bytes=MiB, max_result_bytes=2 * MiB)


def test_the_default_limit_refuses_a_result_the_api_would_refuse() -> None:
    reporter = ResultReporter(f"http://127.0.0.1:{free_port()}", "k")
    try:
        assert reporter.report(_result(1, "z" * (17 * MiB))) is False  # the API takes 16 MiB
        assert reporter.drop_reasons == {"too_large": 1} and reporter.pending == 0
    finally:
        reporter.close(timeout=0.5)


def test_batches_are_cut_to_stay_under_the_body_limit() -> None:
    api = Api()
    with FakeServer(api.app) as server:
        reporter = ResultReporter(
            server.base, "k", batch_size=1000, max_body_bytes=64 * KiB, flush_interval=0.2
        )
        assert all(reporter.report(_result(i, "w" * (5 * KiB))) for i in range(100))
        assert reporter.close(timeout=30) is True
    assert len(api.stored) == 100 and reporter.accepted == 100
    assert len(api.bodies) >= 8 and max(api.bodies) <= 64 * KiB

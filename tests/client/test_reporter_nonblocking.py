"""`ResultReporter.report()` never waits on the network: with the sending thread stuck on a
server that takes the request and never answers, every `report()` returns, queues its
result, and once the queue is full returns False and counts the drop."""

from __future__ import annotations

import socket
import threading
from typing import Any

from controlplane.client import ResultReporter
from tests.liveapi import wait_until


class Silent:
    """A server that accepts connections and reads what is sent, and never answers."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._received = bytearray()
        self.connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def received(self) -> bytes:
        with self._lock:
            return bytes(self._received)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._received += data

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._listener.close()
        with self._lock:
            held = list(self.connections)
        for conn in held:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def _result(i: int) -> dict[str, Any]:
    return {
        "request_id": f"r-{i}",
        "task": "ticket_classify",
        "input_tokens": 10,
        "decision": "edge",
        "served": "cloud",
        "cloud": {"output": "refund", "latency_ms": 380.0},
    }


def _bounded(calls: range, reporter: ResultReporter) -> list[bool]:
    """`report()` for each result, on a thread given a generous bound: a bound, not a
    speed (one network wait here would be the reporter's 300 s timeout)."""
    answers: list[bool] = []

    def caller() -> None:
        answers.extend(reporter.report(_result(i)) for i in calls)

    thread = threading.Thread(target=caller, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "report() waited on the network"
    return answers


def test_report_returns_while_the_sender_waits_on_a_server_that_never_answers() -> None:
    silent = Silent()
    # A read timeout far beyond the test: the sender stays stuck on its one request.
    reporter = ResultReporter(
        silent.base, "k", batch_size=1, flush_interval=0.01, max_queue=100, timeout=300
    )
    try:
        assert _bounded(range(1), reporter) == [True]
        wait_until(lambda: b'"r-0"' in silent.received, "the sender to post its batch")
        assert len(silent.connections) == 1

        # The sender is stuck on it; the caller goes on.
        answers = _bounded(range(1, 111), reporter)
        # The first 100 queued, the next 10 dropped as the queue was full: counted.
        assert answers == [True] * 100 + [False] * 10
        assert reporter.pending == 101  # 100 queued + the batch in flight
        assert reporter.queued_bytes > 0
        assert reporter.dropped == 10 and reporter.drop_reasons == {"queue_full": 10}
        # The sender is still waiting for its answer: nothing failed, nothing delivered,
        # and report() opened no connection nor sent a byte of its own.
        assert reporter.accepted == 0 and reporter.last_error is None
        assert len(silent.connections) == 1
        assert b'"r-1"' not in silent.received
    finally:
        silent.close()  # the stuck request ends, so close() need not wait out its timeout
        reporter.close(timeout=0)
    assert reporter.pending == 0

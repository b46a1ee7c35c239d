"""`ResultReporter` against a real `shadowplane api` process (SQLite and PostgreSQL): the API
down for a while and back stores every result exactly once; `report` never waits on the
network or raises; refused batches and rejected items are counted; and `shadow_compare`
with a real `FlagClient` and reporter stores what it served.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.client import FlagClient, ResultReporter, shadow_compare
from controlplane.db import get_engine, session_scope
from controlplane.models import Result
from tests.liveapi import ApiServer, free_port, wait_until


def _result(i: int, run: str, **overrides: Any) -> dict[str, Any]:
    result = {
        "request_id": f"{run}-{i}",
        "task": "ticket_classify",
        "session_id": f"s-{i}",
        "input_tokens": 100 + i,
        "decision": "edge",
        "served": "cloud",
        "edge": {"output": "refund", "latency_ms": 40.0},
        "cloud": {"output": "refund", "latency_ms": 380.0},
    }
    return {**result, **overrides}


def _stored(api: ApiServer) -> tuple[int, int]:
    engine = get_engine(api.database_url)
    with session_scope(engine) as session:
        n, distinct = session.execute(
            select(func.count(), func.count(func.distinct(Result.request_id)))
        ).one()
    return int(n), int(distinct)


def test_the_api_down_for_a_while_then_back_stores_every_result_exactly_once(
    live_api_db: ApiServer,
) -> None:
    api, run = live_api_db, uuid.uuid4().hex[:8]
    api.start()
    reporter = ResultReporter(
        api.base, api.keys["ingest"], batch_size=50, flush_interval=0.05, max_backoff=0.1
    )
    assert all(reporter.report(_result(i, run)) for i in range(100))
    wait_until(lambda: reporter.accepted == 100, "the first 100 to be stored")

    api.kill()
    # While nothing listens, report() still returns at once: it only puts on the queue.
    assert all(reporter.report(_result(i, run)) for i in range(100, 300))
    # ... and the results of a batch already sent are sent again: stored once.
    assert all(reporter.report(_result(i, run)) for i in range(80, 100))
    wait_until(lambda: reporter.last_error is not None, "the reporter to meet the outage")
    assert reporter.pending == 220 and reporter.accepted == 100 and reporter.dropped == 0

    api.start()
    assert reporter.close(timeout=120) is True
    assert (reporter.accepted, reporter.duplicates, reporter.dropped) == (300, 20, 0)
    assert reporter.rejected == 0 and reporter.pending == 0
    assert _stored(api) == (300, 300)


def test_report_never_waits_on_the_network_and_counts_what_it_drops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="shadowplane.client")
    # Nothing listens here: the sender retries with backoff while the caller keeps going.
    reporter = ResultReporter(
        f"http://127.0.0.1:{free_port()}", "k", max_queue=50, batch_size=10, flush_interval=0.01
    )
    wait_until(lambda: reporter.report(_result(0, "x")) and reporter.pending > 0, "a first put")
    answers = [reporter.report(_result(i, "x")) for i in range(1, 200)]
    assert answers.count(False) == reporter.dropped > 0
    assert reporter.pending <= 50 + 10  # the queue, and one batch in flight
    assert reporter.report({"request_id": "nan", "input_tokens": float("nan")}) is False
    assert reporter.report({"request_id": object()}) is False  # type: ignore[dict-item]
    dropped = reporter.dropped
    assert reporter.close(timeout=0.5) is False  # nothing could be sent: all dropped
    assert reporter.dropped == dropped + answers.count(True) + 1 and reporter.pending == 0
    assert reporter.report(_result(1, "x")) is False  # closed: counted, not raised
    assert any("dropped" in r.getMessage() for r in caplog.records)


def test_refused_batches_are_dropped_and_rejected_items_counted(
    shared_api: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shadowplane.client")
    live_api = shared_api
    with ResultReporter(live_api.base, "sp_wrong_key", flush_interval=0.01) as refused:
        assert refused.report(_result(0, "bad"))
        wait_until(lambda: refused.dropped == 1, "the 401 batch to be dropped")
        assert "HTTP 401" in (refused.last_error or "")

    reporter = ResultReporter(live_api.base, live_api.keys["ingest"], flush_interval=0.01)
    assert reporter.report(_result(1, "mixed"))
    assert reporter.report(_result(2, "mixed", task="no_such_task"))
    assert reporter.close(timeout=60) is True
    assert (reporter.accepted, reporter.rejected, reporter.dropped) == (1, 1, 0)
    assert reporter.rejections[-1]["request_id"] == "mixed-2"
    assert "no_such_task" in reporter.rejections[-1]["error"]
    assert any("HTTP 401" in r.getMessage() for r in caplog.records)


def test_shadow_compare_with_the_real_client_and_reporter_stores_what_it_served(
    shared_api: ApiServer,
) -> None:
    live_api = shared_api  # the only test here that changes its flags
    for _ in range(3):  # to full, with verification beside every request
        live_api.call(
            "POST", "/v1/tasks/ticket_classify/promote", json={"reason": "t", "force": True}
        ).raise_for_status()
    release = threading.Event()

    def hung_edge(payload: str) -> str:
        release.wait()
        return "refund"

    flags = FlagClient(live_api.base, live_api.keys["router"], stream=False).start()
    reporter = ResultReporter(live_api.base, live_api.keys["router"], flush_interval=0.05)
    try:
        assert flags.wait_ready(30)
        common: dict[str, Any] = {
            "client": flags,
            "task": "ticket_classify",
            "reporter": reporter,
            "input_tokens": 100,
            "session_id": "s-1",
        }
        assert (
            shadow_compare("t1", lambda p: "refund", lambda p: "refund", request_id="ok", **common)
            == "refund"
        )
        answer = shadow_compare(
            "t2", hung_edge, lambda p: "exchange", request_id="hung", edge_timeout=0.2, **common
        )
        assert answer == "exchange" and not release.is_set()
        assert reporter.close(timeout=60) is True
    finally:
        release.set()
        flags.close()
    ok = live_api.call("GET", "/v1/results/ticket_classify/ok", scope="read").json()
    hung = live_api.call("GET", "/v1/results/ticket_classify/hung", scope="read").json()
    assert (ok["served"], ok["degraded"], ok["comparison"]["outcome"]) == ("edge", False, "agree")
    assert ok["flag_version"] == flags.flag("ticket_classify")["version"]  # type: ignore[index]
    assert (hung["served"], hung["degraded"], hung["degrade_reason"]) == ("cloud", True, "timeout")
    assert hung["edge"]["error"] == "timeout" and hung["edge"]["latency_ms"] == 200.0

"""Drill: an API process SIGKILLed in the middle of a batch. A batch is one transaction:
killed before its commit, nothing of it is stored (neither results nor payloads, wherever
its writes had got to) and the resend stores it all; killed after its commit with the
answer never read, the resend is answered as duplicates. Either way each result is
counted once."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from controlplane.db import get_engine, make_sessionmaker
from controlplane.ingest import service, validation
from controlplane.models.base import utcnow
from tests.conftest import make_result
from tests.drills.servers import PgServer, poll, waiting_on_lock
from tests.liveapi import ApiServer, seed

pytestmark = [pytest.mark.integration, pytest.mark.drills]
N = 500


@pytest.fixture
def api(own_pg: PgServer, tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(own_pg.url, tmp_path / "api.log", keys=seed(own_pg.url)).start()
    try:
        yield server
    finally:
        server.stop()


def stored(pg: PgServer) -> tuple[int, int]:
    """(results, payloads) stored."""
    with pg.admin().connect() as conn:
        row = conn.execute(
            text("SELECT (SELECT count(*) FROM results), (SELECT count(*) FROM payloads)")
        ).one()
    return int(row[0]), int(row[1])


def body(prefix: str) -> dict[str, Any]:
    """N results whose sides disagree: the task keeps the payload of every conflict, so each
    result is written as a row in `results` and one in `payloads`. Timed now: the test
    stores one itself under ingest's default bounds, whatever the date."""
    now = utcnow().isoformat()
    return {
        "results": [
            make_result(
                request_id=f"{prefix}-{i}",
                ts=now,
                edge={"output": "refund", "latency_ms": 41.0, "confidence": 0.9},
                cloud={"output": "exchange", "latency_ms": 380.0},
            )
            for i in range(N)
        ]
    }


def post(api: ApiServer, batch: dict[str, Any]) -> httpx.Response:
    return api.call("POST", "/v1/results", scope="ingest", json=batch)


def hold(session: Session, where: str, batch: dict[str, Any]) -> None:
    """Make the batch's writes wait on the test's open transaction: at a table the test
    locks (`results`, where its writes begin; `payloads`, once its results are written), or
    at the key of the result that sorts last in the batch (every result before it
    written), which the test is storing itself, uncommitted."""
    if where == "last key":
        last = max(batch["results"], key=lambda r: r["request_id"])  # code-point order
        valid, rejected = validation.validate_items([last])
        service.ingest(session, valid, rejected, utcnow())
    else:
        session.execute(text(f"LOCK TABLE {where} IN EXCLUSIVE MODE"))


@pytest.mark.parametrize("where", ["results", "payloads", "last key"])
def test_killed_before_the_commit_nothing_is_stored_and_the_resend_stores_it_once(
    own_pg: PgServer, api: ApiServer, where: str
) -> None:
    batch = body("first")
    holder = make_sessionmaker(get_engine(own_pg.url))()
    outcome: list[Any] = []

    def send() -> None:
        try:
            outcome.append(post(api, batch))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    try:
        # The batch's writes wait on the test, inside the API's transaction.
        hold(holder, where, batch)
        sender = threading.Thread(target=send)
        sender.start()
        poll(lambda: waiting_on_lock(own_pg.admin(), "") >= 1, "the batch waiting on the lock")
        api.kill()
        holder.rollback()
        sender.join(60)
        assert not sender.is_alive()
    finally:
        holder.close()
    assert isinstance(outcome[0], httpx.HTTPError), outcome  # no answer: the client resends
    # Nothing half-stored: the transaction died with the process.
    assert stored(own_pg) == (0, 0)
    api.start()
    assert post(api, batch).json() == {"accepted": N, "duplicates": 0, "rejected": []}
    assert post(api, batch).json() == {"accepted": 0, "duplicates": N, "rejected": []}
    assert stored(own_pg) == (N, N)


def test_killed_after_the_commit_the_resend_is_a_duplicate_not_a_double_count(
    own_pg: PgServer, api: ApiServer
) -> None:
    batch = body("second")
    payload = json.dumps(batch).encode()
    head = (
        f"POST /v1/results HTTP/1.1\r\nHost: 127.0.0.1:{api.port}\r\n"
        f"Authorization: Bearer {api.keys['ingest']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    # A client whose answer is lost: it sends the batch, and never reads what comes back.
    with socket.create_connection(("127.0.0.1", api.port), timeout=30) as client:
        client.sendall(head + payload)
        poll(lambda: stored(own_pg) == (N, N), "the batch committed")
        api.kill()
    api.start()
    assert post(api, batch).json() == {"accepted": 0, "duplicates": N, "rejected": []}
    assert stored(own_pg) == (N, N)
    # The process that counted the first send is gone; the new one counts the resend as
    # duplicates, never as results accepted twice.
    metrics = api.call("GET", "/metrics", scope="read").text
    counted = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("shadowplane_ingest_results_total{")
    }
    assert counted == {"accepted": 0, "duplicate": N, "rejected": 0}, metrics[-2000:]

"""Drill: an API process SIGKILLed in the middle of a batch. A batch is one transaction:
killed before its commit, nothing of it is stored and the resend stores it all; killed
after its commit with the answer never read, the resend is answered as duplicates. Either
way each result is counted once."""

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


def stored(pg: PgServer) -> int:
    with pg.admin().connect() as conn:
        return int(conn.scalar(text("SELECT count(*) FROM results")) or 0)


def body(prefix: str) -> dict[str, Any]:
    return {"results": [make_result(request_id=f"{prefix}-{i}") for i in range(N)]}


def post(api: ApiServer, batch: dict[str, Any]) -> httpx.Response:
    return api.call("POST", "/v1/results", scope="ingest", json=batch)


def test_killed_before_the_commit_nothing_is_stored_and_the_resend_stores_it_once(
    own_pg: PgServer, api: ApiServer
) -> None:
    batch = body("first")
    locker = own_pg.admin().connect()
    outcome: list[Any] = []

    def send() -> None:
        try:
            outcome.append(post(api, batch))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    try:
        # The batch's writes wait on the test, inside the API's transaction.
        locker.execute(text("BEGIN"))
        locker.execute(text("LOCK TABLE results IN EXCLUSIVE MODE"))
        sender = threading.Thread(target=send)
        sender.start()
        poll(lambda: waiting_on_lock(own_pg.admin(), "") >= 1, "the batch waiting on the lock")
        api.kill()
        locker.execute(text("ROLLBACK"))
        sender.join(60)
        assert not sender.is_alive()
    finally:
        locker.close()
    assert isinstance(outcome[0], httpx.HTTPError), outcome  # no answer: the client resends
    assert stored(own_pg) == 0  # nothing half-stored: the transaction died with the process
    api.start()
    assert post(api, batch).json() == {"accepted": N, "duplicates": 0, "rejected": []}
    assert post(api, batch).json() == {"accepted": 0, "duplicates": N, "rejected": []}
    assert stored(own_pg) == N


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
        poll(lambda: stored(own_pg) == N, "the batch committed")
        api.kill()
    api.start()
    assert post(api, batch).json() == {"accepted": 0, "duplicates": N, "rejected": []}
    assert stored(own_pg) == N
    # The process that counted the first send is gone; the new one counts the resend as
    # duplicates, never as results accepted twice.
    metrics = api.call("GET", "/metrics", scope="read").text
    counted = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("shadowplane_ingest_results_total{")
    }
    assert counted == {"accepted": 0, "duplicate": N, "rejected": 0}, metrics[-2000:]

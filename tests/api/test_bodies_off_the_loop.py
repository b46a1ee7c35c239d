"""A large run (`POST /v1/evalsets/{task}/runs`, up to 100,000 lines) is read only once its
key passed, then parsed and validated in a worker thread, as FastAPI reads a body
parameter. Before, FastAPI read, parsed and validated it on the event loop before the key
was looked at: 15 MB without any key held every flag poll of the process for 0.3 s. On a
real `shadowplane api` with one worker."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.settings import Settings
from tests.liveapi import WAIT, ApiServer, seed

RUNS = "/v1/evalsets/ticket_classify/runs"
SMALL = Settings.model_fields["max_small_body_bytes"].default


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(sqlite_url, tmp_path / "api.log", seed(sqlite_url)).start()
    yield server
    server.stop()


def test_a_run_without_a_key_is_refused_before_its_body_is_read(api: ApiServer) -> None:
    # Headers announcing 10 MB, and not one byte of body: the answer cannot wait for it.
    request = (
        f"POST {RUNS} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        "content-length: 10000000\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", api.port), timeout=WAIT) as conn:
        conn.sendall(request)
        conn.settimeout(WAIT)
        answer = b""
        while b"missing API key" not in answer:
            chunk = conn.recv(65536)
            assert chunk, answer[:300]
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]


def test_a_run_is_still_read_as_fastapi_reads_a_body(api: ApiServer) -> None:
    cases = {
        b"": "body: Field required",
        b"null": "body: Input should be a valid dictionary or object to extract fields from",
        b'{"model": "m", "lines": [': "body: not valid JSON (Expecting value at character 25)",
        b'{"model": "m"}': "body.lines: Field required",
    }
    key = {"Authorization": f"Bearer {api.keys['read']}"}
    with httpx.Client(base_url=api.base, timeout=WAIT) as client:
        for raw, first in cases.items():
            json_type = {**key, "content-type": "application/json"}
            response = client.post(RUNS, content=raw, headers=json_type)
            assert response.status_code == 422, (raw, response.text)
            assert response.json()["detail"][0] == first, (raw, response.json())
        text = client.post(RUNS, content=b"{}", headers={**key, "content-type": "text/plain"})
        assert text.status_code == 422
        assert text.json()["detail"][0].startswith("content-type: the body was sent as")


def test_a_body_of_many_unknown_fields_is_refused_in_one_sentence(api: ApiServer) -> None:
    # Before, pydantic built an error for each (2.7 s holding the GIL for 800,000), and the
    # answer named each.
    body = {"model": "m", "lines": [], **{f"k{i}": 1 for i in range(50_000)}}
    response = api.call("POST", RUNS, "read", json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == [
        "body: 50000 unknown fields (k0, k1, k2, …); known: layer, lines, model, note"
    ]
    line = {"id": "0" * 64, **{f"x{i}": 1 for i in range(30)}}
    response = api.call("POST", RUNS, "read", json={"model": "m", "lines": [line]})
    assert response.json()["detail"] == [
        "body.lines.0: 30 unknown fields (x0, x1, x2, …); known: id, output"
    ]
    # Up to MAX_PROBLEMS of them, each is named as before.
    few = {"model": "m", "lines": [], "k0": 1, "k1": 2}
    response = api.call("POST", RUNS, "read", json=few)
    assert response.json()["detail"] == [
        "body.k0: Extra inputs are not permitted",
        "body.k1: Extra inputs are not permitted",
    ]


def test_a_small_route_takes_at_most_its_own_limit_before_the_key(api: ApiServer) -> None:
    # A label, an action or a backfill is read before its key is checked: past 256 KiB it
    # is refused unread, while results, configs and runs keep the larger limit.
    too_big = b'{"reason": "' + b"x" * (SMALL + 1) + b'"}'
    with httpx.Client(base_url=api.base, timeout=WAIT) as client:
        kill = client.post("/v1/kill", content=too_big)
        assert kill.status_code == 413, kill.text[:200]
        assert kill.json()["detail"].startswith(
            f"body: larger than the {SMALL}-byte limit of this route"
        )
        runs = client.post(RUNS, content=too_big)
        assert runs.status_code == 401, runs.text[:200]


def test_a_number_python_cannot_read_is_named(api: ApiServer) -> None:
    # FastAPI answers "There was an error parsing the body" (400) to an integer of more
    # than 4300 digits on every route with a body parameter; the answer names it now.
    digits = b"1" * 4301
    with httpx.Client(base_url=api.base, timeout=WAIT) as client:
        headers = {
            "Authorization": f"Bearer {api.keys['admin']}",
            "content-type": "application/json",
        }
        response = client.post("/v1/kill", content=b'{"reason": ' + digits + b"}", headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == [
        "body: holds a number of more than 4300 digits, more than any field takes"
    ]

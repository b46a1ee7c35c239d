"""GET /v1/flags/stream against a real `shadowplane api` process: the document on connect,
an event per revision (a rollback through the API, and one made by another process),
Last-Event-ID resumes, heartbeats, the per-key cap, and clean ends."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.client.tls import default_tls
from controlplane.db import get_engine
from controlplane.rollout import actions
from tests.liveapi import ApiServer, EventReader, Message, new_keys, seed, wait_until

SETTINGS = {
    "SHADOWPLANE_FLAG_CHECK_SECONDS": "0.1",
    "SHADOWPLANE_FLAG_STREAM_HEARTBEAT_SECONDS": "0.1",
    "SHADOWPLANE_FLAG_STREAMS_PER_KEY": "2",
}
TESTS_SHARING = 5  # the tests here that use `shared`: each has keys of its own


@pytest.fixture(scope="module")
def module_server(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApiServer, Iterator[int]]]:
    """One server for the tests that do not stop it: each changes a task no other test
    here changes, and opens streams on keys of its own."""
    folder = tmp_path_factory.mktemp("flag-stream")
    shutil.copy(sqlite_template, folder / "shadowplane.db")
    url = f"sqlite:///{folder / 'shadowplane.db'}"
    # Streams are capped per key: each test opens its streams on keys of its own, made
    # before the server starts (so it knows them at once).
    keys = seed(url)
    for test in range(TESTS_SHARING):
        keys |= new_keys(url, **{f"flags-{test}": ["flags:read"], f"admin-{test}": ["admin"]})
    api = ApiServer(url, folder / "api.log", keys, SETTINGS).start()
    tests = iter(range(TESTS_SHARING))
    try:
        yield api, tests
    finally:
        api.stop()
        get_engine(url).dispose()


@pytest.fixture
def shared(
    module_server: tuple[ApiServer, Iterator[int]],
) -> tuple[ApiServer, dict[str, str]]:
    """The module's server, and a flags:read and an admin key no other test uses."""
    api, tests = module_server
    test = next(tests, None)
    assert test is not None, "more tests share the server than TESTS_SHARING says"
    return api, {"flags": api.keys[f"flags-{test}"], "admin": api.keys[f"admin-{test}"]}


@pytest.fixture
def server(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[ApiServer, dict[str, str]]]:
    """A server of the test's own (the test stops it)."""
    keys = seed(sqlite_url)
    api = ApiServer(sqlite_url, tmp_path / "api.log", keys, SETTINGS).start()
    try:
        yield api, keys
    finally:
        api.stop()


def _flags(api: ApiServer, key: str) -> httpx.Response:
    return httpx.get(
        f"{api.base}/v1/flags", headers={"Authorization": f"Bearer {key}"}, verify=default_tls()
    )


def test_document_on_connect_then_an_event_per_rollback(
    shared: tuple[ApiServer, dict[str, str]],
) -> None:
    api, keys = shared
    polled = _flags(api, keys["flags"])
    stream = EventReader(api.base, keys["flags"])
    try:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        first = stream.next_event()
        # The wire format, byte for byte: id, event, the canonical document on one line.
        assert stream.raw[:4] == [
            f"id: {polled.json()['revision']}",
            "event: flags",
            f"data: {polled.text}",
            "",
        ]
        assert (first.id, first.event) == (str(polled.json()["revision"]), "flags")

        rolled = httpx.post(
            f"{api.base}/v1/tasks/ticket_classify/rollback",
            json={"reason": "agreement fell"},
            headers={"Authorization": f"Bearer {keys['admin']}"},
            verify=default_tls(),
        )
        assert rolled.status_code == 200
        after = stream.next_event()
        document = json.loads(after.data or "")
        assert after.id == str(document["revision"]) == str(int(first.id or 0) + 1)
        assert document["flags"]["ticket_classify"]["stage"] == "rolled_back"
        assert after.data == _flags(api, keys["flags"]).text
    finally:
        stream.close()


def test_a_rollback_by_another_process_reaches_the_stream(
    shared: tuple[ApiServer, dict[str, str]],
) -> None:
    api, keys = shared
    stream = EventReader(api.base, keys["flags"])
    try:
        first = stream.next_event()
        # This test process is not the server: the server finds it by its database check.
        actions.rollback(
            get_engine(api.database_url), "invoice_extract", actor="test", reason="bad"
        )
        after = stream.next_event()
        assert int(after.id or 0) == int(first.id or 0) + 1
        flag = json.loads(after.data or "")["flags"]["invoice_extract"]
        assert (flag["stage"], flag["edge_percent"]) == ("rolled_back", 0)
    finally:
        stream.close()


def test_last_event_id_resumes_without_resending_what_the_client_has(
    shared: tuple[ApiServer, dict[str, str]],
) -> None:
    api, keys = shared
    revision = _flags(api, keys["flags"]).json()["revision"]
    current = EventReader(api.base, keys["flags"], last_event_id=str(revision))
    try:
        # Nothing to resend: the first message is a heartbeat, not the document.
        assert current.next() == _beat(revision)
    finally:
        current.close()
    behind = EventReader(api.base, keys["flags"], last_event_id=str(revision - 1))
    try:
        event = behind.next()
        assert isinstance(event, Message) and event.id == str(revision)
        assert json.loads(event.data or "")["revision"] == revision
    finally:
        behind.close()


def test_a_quiet_stream_sends_heartbeats(shared: tuple[ApiServer, dict[str, str]]) -> None:
    api, keys = shared
    stream = EventReader(api.base, keys["flags"])
    try:
        stream.next_event()
        revision = _flags(api, keys["flags"]).json()["revision"]
        beats = [stream.next() for _ in range(3)]
        assert beats == [_beat(revision)] * 3
        assert stream.raw[4:7] == [
            "event: heartbeat",
            f'data: {{"revision":{revision},"stale_seconds":null}}',
            "",
        ]
    finally:
        stream.close()


def test_streams_per_key_are_capped_and_polling_is_unaffected(
    shared: tuple[ApiServer, dict[str, str]],
) -> None:
    api, keys = shared
    streams = [EventReader(api.base, keys["flags"]) for _ in range(2)]
    try:
        for stream in streams:
            assert stream.response.status_code == 200
            stream.next_event()
        refused = EventReader(api.base, keys["flags"])
        assert refused.response.status_code == 429
        assert int(refused.response.headers["Retry-After"]) > 0
        detail = json.loads(refused.response.read())["detail"]
        assert "2 open streams" in detail and "SHADOWPLANE_FLAG_STREAMS_PER_KEY" in detail
        refused.close()
        # Another key has its own streams; polling is answered as ever.
        other = EventReader(api.base, keys["admin"])
        assert other.response.status_code == 200
        other.close()
        assert _flags(api, keys["flags"]).status_code == 200

        # A closed stream frees its place.
        streams.pop().close()

        def reopened() -> EventReader | None:
            stream = EventReader(api.base, keys["flags"])
            if stream.response.status_code == 200:
                return stream
            stream.close()
            return None

        streams.append(wait_until(reopened, "a stream to be accepted after one closed"))
        for _ in range(20):
            assert _flags(api, keys["flags"]).status_code == 200
    finally:
        for stream in streams:
            stream.close()


def test_streams_end_cleanly_when_the_server_shuts_down(
    server: tuple[ApiServer, dict[str, str]],
) -> None:
    api, keys = server
    stream = EventReader(api.base, keys["flags"])
    try:
        stream.next_event()
        api.stop()
        # Heartbeats may come first; then the end of a complete response, not a broken one.
        while True:
            message = stream.next()
            if isinstance(message, Message) and message.event == "heartbeat":
                continue
            assert message is None, f"the stream broke instead of ending: {message!r}"
            break
        assert "ASGI callable returned without completing response" not in api.log()
    finally:
        stream.close()


def _beat(revision: int, stale_seconds: int | None = None) -> Message:
    """A heartbeat: the revision the process holds and how stale it is (null: fresh)."""
    stale = "null" if stale_seconds is None else str(stale_seconds)
    return Message(event="heartbeat", data=f'{{"revision":{revision},"stale_seconds":{stale}}}')

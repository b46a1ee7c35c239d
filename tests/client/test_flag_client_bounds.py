"""`FlagClient` against servers the real API never is (a small fake server per test): what
it reads is bounded (a huge poll body, a stream line that never ends, a stream that never
completes an event), its copy never goes back to an older revision (a replica behind the
others), and a cache file or a header whose age cannot be told confirms nothing.

Staleness is judged on a clock the test holds; everything else waits with generous bounds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.client import FlagClient
from tests.client.fake import Exchange, FakeServer, document
from tests.liveapi import free_port, wait_until

MiB = 1024 * 1024
HOUR = 3600.0
EVENT_STREAM = {"Content-Type": "text/event-stream"}


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _route(flags: FlagClient) -> tuple[str, int | None, str]:
    got = flags.route("t", session_id="s-1", input_tokens=10)
    return got.served, got.flag_version, got.reason


@pytest.fixture
def caplog_client(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="shadowplane.client")
    return caplog


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)


# -- what is read is bounded ---------------------------------------------------------------


@pytest.mark.parametrize("length", ["declared", "undeclared"])
def test_a_poll_body_over_max_document_bytes_is_refused_and_the_last_good_copy_stays(
    length: str,
) -> None:
    state = {"huge": False, "sent": 0}

    def app(ex: Exchange) -> None:
        if not state["huge"]:
            ex.reply(200, document(5))
            return
        # 1.5 GB announced (or no length at all); 1 MiB blocks until the client goes.
        headers = {"Content-Type": "application/json"}
        if length == "declared":
            headers["Content-Length"] = str(1500 * MiB)
        ex.start(200, headers)
        while state["sent"] < 64 * MiB and ex.write(b"a" * MiB):
            state["sent"] += MiB

    with FakeServer(app) as server:
        options: dict[str, Any] = {"stream": False, "poll_interval": 0.1, "max_backoff": 0.2}
        with FlagClient(server.base, "k", max_document_bytes=MiB, **options) as flags:
            assert flags.wait_ready(30)
            assert _route(flags) == ("edge", 5, "STATIC")
            state["huge"] = True
            wait_until(
                lambda: "max_document_bytes" in (flags.status().error or ""),
                "the refused body in status()",
            )
            polls = len(server.requests("/v1/flags"))
            wait_until(lambda: len(server.requests("/v1/flags")) > polls + 1, "more polls")
            status = flags.status()
            assert (status.state, status.revision) == ("ok", 5)
            assert _route(flags) == ("edge", 5, "STATIC")  # the last good copy
            if length == "declared":
                assert f"the body is {1500 * MiB} bytes" in (status.error or "")
        # The client stopped reading at the cap: the server could not send it all.
        assert state["sent"] < 64 * MiB


def test_a_stream_line_that_never_ends_is_cut_at_the_cap_and_the_client_polls(
    caplog_client: pytest.LogCaptureFixture,
) -> None:
    sent = {"bytes": 0}

    def app(ex: Exchange) -> None:
        if ex.path == "/v1/flags":
            ex.reply(200, document(5))
            return
        ex.start(200, EVENT_STREAM)
        ex.write(b"id: 1\nevent: flags\ndata: ")
        while sent["bytes"] < 64 * MiB and ex.write(b"x" * MiB):  # never a line end
            sent["bytes"] += MiB

    with FakeServer(app) as server:
        options: dict[str, Any] = {"poll_interval": 0.2, "stream_retry": HOUR}
        with FlagClient(server.base, "k", max_document_bytes=MiB, **options) as flags:
            assert flags.wait_ready(30)
            status = flags.status()
            assert (status.state, status.mode, status.revision) == ("ok", "polling", 5)
            assert _logged(caplog_client, "larger than max_document_bytes allows")
    assert sent["bytes"] < 64 * MiB


def test_a_stream_that_never_completes_an_event_is_dropped_and_the_client_polls(
    caplog_client: pytest.LogCaptureFixture,
) -> None:
    def app(ex: Exchange) -> None:
        if ex.path == "/v1/flags":
            ex.reply(200, document(5))
            return
        ex.start(200, EVENT_STREAM)
        ex.write(b"id: 5\nevent: flags\n")
        # A byte now and then: every read succeeds, no event ever completes.
        while ex.write(b"x") and ex.wait(0.05):
            pass

    with FakeServer(app) as server:
        # Polling hourly: only leaving the stream can bring the first flags.
        options: dict[str, Any] = {"poll_interval": HOUR, "stream_retry": HOUR}
        with FlagClient(server.base, "k", stream_read_timeout=1.0, **options) as flags:
            assert flags.wait_ready(30)
            status = flags.status()
            assert (status.state, status.mode, status.revision) == ("ok", "polling", 5)
            assert _logged(caplog_client, "no complete event or heartbeat in 1 s")


# -- the copy never goes back --------------------------------------------------------------


def test_a_poll_answered_by_a_replica_behind_does_not_undo_a_rollback() -> None:
    served = {"document": document(10, "rolled_back")}

    def app(ex: Exchange) -> None:
        ex.reply(200, served["document"])

    clock = Clock()
    with FakeServer(app) as server:
        options: dict[str, Any] = {"stream": False, "poll_interval": 0.1, "max_backoff": 0.2}
        with FlagClient(server.base, "k", max_staleness=60, clock=clock, **options) as flags:
            assert flags.wait_ready(30)
            assert _route(flags) == ("cloud", 10, "DISABLED")
            served["document"] = document(9, "full")  # the flags before the rollback
            wait_until(
                lambda: "older than the held revision 10" in (flags.status().error or ""),
                "the older revision refused",
            )
            assert _route(flags) == ("cloud", 10, "DISABLED")
            assert flags.status().revision == 10
            # Polls that answer an older revision confirm nothing: the copy ages.
            clock.now += 61
            assert flags.status().state == "stale"
            served["document"] = document(11, "full")
            wait_until(lambda: flags.status().state == "ok", "the newer revision")
            assert _route(flags) == ("edge", 11, "STATIC")


def test_a_stream_event_older_than_the_copy_is_ignored(
    caplog_client: pytest.LogCaptureFixture,
) -> None:
    def app(ex: Exchange) -> None:
        if ex.path == "/v1/flags":
            ex.reply(200, document(9, "full"))  # a replica behind
            return
        ex.start(200, EVENT_STREAM)
        for revision, stage in ((10, "rolled_back"), (9, "full")):
            body = document(revision, stage).decode()
            ex.write(f"id: {revision}\nevent: flags\ndata: {body}\n\n".encode())
        while ex.write(b": heartbeat\n\n") and ex.wait(0.05):
            pass

    with FakeServer(app) as server:
        with FlagClient(server.base, "k", poll_interval=0.2, stream_retry=HOUR) as flags:
            wait_until(
                lambda: _logged(caplog_client, "revision 9 is older than the held revision 10"),
                "the older event refused",
            )
            wait_until(lambda: len(server.requests("/v1/flags")) >= 2, "polls of the replica")
            assert flags.status().revision == 10
            assert _route(flags) == ("cloud", 10, "DISABLED")


def test_a_cache_file_ahead_of_the_server_is_not_replaced_by_an_older_revision(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "flags.json"
    flag = json.loads(document(10, "rolled_back"))["flags"]
    cache.write_text(
        json.dumps(
            {"format": 1, "confirmed_at": time.time(), "revision": 10, "etag": None, "flags": flag}
        ),
        encoding="utf-8",
    )
    with FakeServer(lambda ex: ex.reply(200, document(9, "full"))) as server:
        with FlagClient(server.base, "k", stream=False, poll_interval=0.1, cache_path=cache) as f:
            wait_until(lambda: len(server.requests("/v1/flags")) >= 2, "polls")
            status = f.status()
            assert (status.revision, status.source) == (10, "cache")
            assert "older than the held revision 10" in (status.error or "")
            assert _route(f) == ("cloud", 10, "DISABLED")
    assert json.loads(cache.read_text(encoding="utf-8"))["revision"] == 10


# -- an age that cannot be told confirms nothing ---------------------------------------------


@pytest.fixture
def nowhere() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("confirmed_at", "problem"),
    [
        ("NaN", "not a finite number"),
        ("Infinity", "not a finite number"),
        ("-Infinity", "not a finite number"),
        ("1" + "0" * 400, "not a finite number"),
        ("FUTURE", "3600 s in the future"),
        ('"2024-01-01T00:00:00Z"', "not a number"),
        ("true", "not a number"),
        ("null", "not a number"),
    ],
)
def test_a_cache_file_whose_age_cannot_be_told_is_not_routed_by(
    tmp_path: Path, nowhere: str, confirmed_at: str, problem: str
) -> None:
    cache = tmp_path / "flags.json"
    if confirmed_at == "FUTURE":
        confirmed_at = str(time.time() + 3600)
    flags_json = json.dumps(json.loads(document(5, "full"))["flags"])
    # Written by hand: json.dumps would not write these values.
    fields = f'"confirmed_at":{confirmed_at},"revision":5,"etag":null,"flags":{flags_json}'
    cache.write_text('{"format":1,' + fields + "}", encoding="utf-8")
    flags = FlagClient(nowhere, "k", max_staleness=600, cache_path=cache)
    try:
        status = flags.status()
        assert (status.state, status.age_seconds, status.revision) == ("starting", None, None)
        assert f"confirmed_at: {problem}" in (status.error or "")
        assert "started without it" in (status.error or "")
        assert _route(flags) == ("cloud", None, "STALE")
    finally:
        flags.close()


@pytest.mark.parametrize("header", ["nan", "inf", "-5", "soon"])
def test_a_server_age_that_cannot_be_read_confirms_nothing(header: str) -> None:
    def app(ex: Exchange) -> None:
        ex.reply(200, document(5, "full"), headers={"X-Shadowplane-Stale": header})

    with FakeServer(app) as server:
        with FlagClient(server.base, "k", stream=False, poll_interval=0.1) as flags:
            wait_until(lambda: len(server.requests("/v1/flags")) >= 2, "polls")
            status = flags.status()
            assert (status.state, status.revision) == ("starting", 5)
            assert "X-Shadowplane-Stale" in (status.error or "")
            assert _route(flags) == ("cloud", None, "STALE")


def test_a_304_to_a_client_holding_no_flags_is_not_counted_as_current() -> None:
    """A server (or a cache in front of it) answering 304 to a poll that named no copy: the
    client holds nothing, so it is not `ok`; every task goes to the cloud, and status()
    says why."""

    def app(ex: Exchange) -> None:
        ex.reply(304, headers={"X-Shadowplane-Stale": "0", "ETag": '"x"'})

    with FakeServer(app) as server:
        options: dict[str, Any] = {"stream": False, "poll_interval": 0.1, "max_backoff": 0.2}
        with FlagClient(server.base, "k", **options) as flags:
            wait_until(lambda: len(server.requests("/v1/flags")) >= 2, "two polls")
            status = flags.status()
            assert status.state == "starting", status
            assert "304 to a poll holding no flags" in (status.error or ""), status
            assert flags.route("t", session_id="s-1", input_tokens=10).served == "cloud"

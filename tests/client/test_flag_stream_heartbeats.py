"""A streaming `FlagClient` ages with the server's copy: a heartbeat event carries the
server's own staleness (`event: heartbeat`, `data: {"revision", "stale_seconds"}`), so a
server cut off from its storage makes its streaming routers go to the cloud after
`max_staleness`, like polling ones; a heartbeat ahead of the copy brings the missed
revision; a comment heartbeat (older servers) keeps the connection but confirms nothing.

A small fake server streams what the test sets; staleness is judged on a hand-moved clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from controlplane.client import FlagClient
from tests.client.fake import Exchange, FakeServer, document
from tests.liveapi import wait_until

HOUR = 3600.0


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Server:
    """What the fake server says; the test changes it while the client listens."""

    revision: int = 5
    stage: str = "full"
    streamed: int = 5  # the last revision sent as a flags event on the stream
    stale: int | None = None  # the heartbeat's stale_seconds
    comments: bool = False  # `: heartbeat` comments instead of heartbeat events
    poll_code: int = 200
    poll_stale: str | None = None  # X-Shadowplane-Stale on polls
    beats: int = 0  # heartbeats sent

    def app(self, ex: Exchange) -> None:
        if ex.path == "/v1/flags":
            self._poll(ex)
            return
        ex.start(200, {"Content-Type": "text/event-stream"})
        if ex.headers.get("last-event-id") != str(self.streamed):
            body = document(self.streamed, self.stage).decode()
            ex.write(f"id: {self.streamed}\nevent: flags\ndata: {body}\n\n".encode())
        while ex.wait(0.05):
            if self.comments:
                beat = b": heartbeat\n\n"
            else:
                data = json.dumps({"revision": self.revision, "stale_seconds": self.stale})
                beat = f"event: heartbeat\ndata: {data}\n\n".encode()
            if not ex.write(beat):
                return
            self.beats += 1

    def _poll(self, ex: Exchange) -> None:
        headers = {"ETag": f'"r{self.revision}"'}
        if self.poll_stale is not None:
            headers["X-Shadowplane-Stale"] = self.poll_stale
        if self.poll_code != 200:
            ex.reply(self.poll_code, b'{"detail": "down"}')
        elif ex.headers.get("if-none-match") == headers["ETag"]:
            ex.reply(304, headers=headers)
        else:
            ex.reply(200, document(self.revision, self.stage), headers=headers)


@pytest.fixture
def server() -> Iterator[tuple[Server, FakeServer]]:
    state = Server()
    with FakeServer(state.app) as fake:
        yield state, fake


def _client(fake: FakeServer, clock: Clock) -> FlagClient:
    # Polling hourly and the stream never retried: only the stream keeps the copy current.
    return FlagClient(
        fake.base, "k", poll_interval=HOUR, stream_retry=HOUR, max_staleness=60, clock=clock
    )


def _served(flags: FlagClient) -> str:
    return flags.route("t", session_id="s-1", input_tokens=10).served


def test_heartbeats_of_a_stale_server_age_the_streaming_client_until_it_routes_to_the_cloud(
    server: tuple[Server, FakeServer],
) -> None:
    state, fake = server
    clock = Clock()
    with _client(fake, clock) as flags:
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream" and _served(flags) == "edge"

        # A fresh server's heartbeat confirms the copy: its age starts again.
        clock.now += 50
        wait_until(lambda: flags.status().age_seconds == 0.0, "a heartbeat to confirm the copy")

        # A server whose storage is down says how old its copy is; so is ours.
        state.stale = 30
        wait_until(lambda: flags.status().age_seconds == 30.0, "the server's age taken")
        assert flags.status().state == "ok" and _served(flags) == "edge"
        state.stale = 61
        wait_until(lambda: flags.status().state == "stale", "the copy to go stale")
        status = flags.status()
        assert (status.mode, status.age_seconds) == ("stream", 61.0)  # still connected
        got = flags.route("t", session_id="s-1", input_tokens=10)
        assert (got.served, got.reason) == ("cloud", "STALE")

        state.stale = None  # storage back
        wait_until(lambda: flags.status().state == "ok", "fresh again")
        assert _served(flags) == "edge"


def test_a_heartbeat_ahead_of_the_copy_brings_the_missed_revision(
    server: tuple[Server, FakeServer],
) -> None:
    state, fake = server
    with _client(fake, Clock()) as flags:
        assert flags.wait_ready(30) and _served(flags) == "edge"
        polls = len(fake.requests("/v1/flags"))
        # Revision 6 (a rollback) is never streamed, only named by the heartbeats.
        state.revision, state.stage = 6, "rolled_back"
        wait_until(lambda: flags.status().revision == 6, "the missed revision fetched")
        assert _served(flags) == "cloud" and flags.status().mode == "stream"
        assert len(fake.requests("/v1/flags")) > polls


def test_comment_heartbeats_keep_the_stream_but_only_a_poll_confirms_the_copy(
    server: tuple[Server, FakeServer],
) -> None:
    state, fake = server
    state.comments = True
    state.poll_code = 503
    clock = Clock()
    with _client(fake, clock) as flags:
        assert flags.wait_ready(30) and _served(flags) == "edge"
        clock.now += 61  # comments keep coming; the API cannot be asked: stale
        beats = state.beats
        wait_until(lambda: state.beats > beats + 3, "more comment heartbeats")
        assert flags.status().state == "stale" and flags.status().mode == "stream"
        assert _served(flags) == "cloud"

        state.poll_code = 200  # the poll a comment brings confirms the copy ...
        wait_until(lambda: flags.status().state == "ok", "a poll to confirm the copy")
        assert flags.status().mode == "stream" and _served(flags) == "edge"

        state.poll_stale = "61"  # ... with the server's own age
        clock.now += 30
        wait_until(lambda: flags.status().state == "stale", "the server's age taken")
        assert flags.status().age_seconds == 61.0

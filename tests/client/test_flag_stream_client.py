"""`FlagClient` on the flag stream of a real `shadowplane api` process: a change arrives by
push; a stream cut mid-way (a proxy closes every connection) falls back to polling and the
stream resumes later; a key over its stream limit polls instead."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from controlplane.client import FlagClient
from tests.client.live import ApiProcess, Proxy, wait_until

TICKET = "ticket_classify"
HOUR = 3600.0


def _to_full(api: ApiProcess) -> None:
    for _ in range(3):
        answer = api.call(
            "POST", f"/v1/tasks/{TICKET}/promote", json={"reason": "test", "force": True}
        )
        assert answer.status_code == 200, answer.text


def _rollback(api: ApiProcess) -> None:
    answer = api.call("POST", f"/v1/tasks/{TICKET}/rollback", json={"reason": "test"})
    assert answer.status_code == 200, answer.text


def _served(flags: FlagClient) -> str:
    return flags.route(TICKET, session_id="s-1", input_tokens=100).served


@pytest.fixture
def proxy(live_api: ApiProcess) -> Iterator[Proxy]:
    live_api.start()
    _to_full(live_api)
    through = Proxy(live_api.port)
    yield through
    through.close()


def test_a_streaming_client_hears_a_rollback_without_polling(live_api: ApiProcess) -> None:
    live_api.start()
    _to_full(live_api)
    # Polling once an hour: only the stream can bring the rollback within the wait.
    with FlagClient(live_api.base, live_api.keys["flags"], poll_interval=HOUR) as flags:
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream" and _served(flags) == "edge"
        revision = flags.status().revision
        _rollback(live_api)
        wait_until(lambda: _served(flags) == "cloud", "the rollback pushed to the client")
        status = flags.status()
        assert status.mode == "stream" and (status.revision or 0) > (revision or 0)
        assert flags.flag(TICKET)["stage"] == "rolled_back"  # type: ignore[index]


def test_a_stream_cut_midway_falls_back_to_polling_and_hears_changes_there(
    live_api: ApiProcess, proxy: Proxy
) -> None:
    options = {"poll_interval": 0.2, "max_backoff": 0.5, "stream_retry": HOUR}
    with FlagClient(proxy.base, live_api.keys["flags"], **options) as flags:  # type: ignore[arg-type]
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream" and _served(flags) == "edge"
        proxy.cut()
        wait_until(lambda: flags.status().mode == "polling", "the fallback to polling")
        _rollback(live_api)
        wait_until(lambda: _served(flags) == "cloud", "the rollback, polled")
        status = flags.status()
        assert (status.mode, status.state) == ("polling", "ok")  # the stream waits an hour
        wait_until(lambda: flags.status().error is None, "the polls to succeed")


def test_after_a_cut_the_stream_resumes(
    live_api: ApiProcess, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shadowplane.client")
    options = {"poll_interval": HOUR, "max_backoff": HOUR, "stream_retry": 0.5}
    with FlagClient(proxy.base, live_api.keys["flags"], **options) as flags:  # type: ignore[arg-type]
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream"
        connections = proxy.accepted
        proxy.cut()
        wait_until(lambda: proxy.accepted > connections, "a new connection after the cut")
        wait_until(lambda: flags.status().mode == "stream", "the stream again")
        assert any("polling every" in r.getMessage() for r in caplog.records)
        # Polling once an hour: the rollback can only come through the resumed stream.
        _rollback(live_api)
        wait_until(lambda: _served(flags) == "cloud", "the rollback on the resumed stream")


def test_a_key_over_its_stream_limit_polls_instead(live_api: ApiProcess) -> None:
    live_api.env["SHADOWPLANE_FLAG_STREAMS_PER_KEY"] = "1"
    live_api.start()
    _to_full(live_api)
    key = live_api.keys["flags"]
    with FlagClient(live_api.base, key) as first:
        assert first.wait_ready(30) and first.status().mode == "stream"
        with FlagClient(live_api.base, key, poll_interval=0.2, stream_retry=HOUR) as second:
            assert second.wait_ready(30)
            assert second.status().mode == "polling" and _served(second) == "edge"
            _rollback(live_api)
            wait_until(lambda: _served(second) == "cloud", "the rollback, polled")
            wait_until(lambda: _served(first) == "cloud", "the rollback, pushed")

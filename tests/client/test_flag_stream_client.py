"""`FlagClient` on the flag stream of a real `shadowplane api` process: a change arrives by
push; a stream cut mid-way (a proxy closes every connection) falls back to polling and the
stream resumes later; a key over its stream limit polls instead."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from controlplane.client import FlagClient
from tests.conftest import TICKET_TASK
from tests.liveapi import ApiServer, Proxy, wait_until

HOUR = 3600.0


def _to_full(api: ApiServer, task: str) -> None:
    for _ in range(3):
        answer = api.call(
            "POST", f"/v1/tasks/{task}/promote", json={"reason": "test", "force": True}
        )
        assert answer.status_code == 200, answer.text


def _rollback(api: ApiServer, task: str) -> None:
    answer = api.call("POST", f"/v1/tasks/{task}/rollback", json={"reason": "test"})
    assert answer.status_code == 200, answer.text


def _served(flags: FlagClient, task: str) -> str:
    return flags.route(task, session_id="s-1", input_tokens=100).served


@pytest.fixture
def task(shared_api: ApiServer) -> str:
    """A task of the test's own on the module's server, at full: the edge serves."""
    name = f"ticket_{uuid.uuid4().hex[:8]}"
    config = {**TICKET_TASK, "task": name, "max_input_tokens": 512}
    created = shared_api.call("POST", "/v1/tasks", json=config)
    assert created.status_code == 201, created.text
    _to_full(shared_api, name)
    return name


@pytest.fixture
def proxy(shared_api: ApiServer) -> Iterator[Proxy]:
    through = Proxy(shared_api.port)
    yield through
    through.close()


def test_a_streaming_client_hears_a_rollback_without_polling(
    shared_api: ApiServer, task: str
) -> None:
    api = shared_api
    # Polling once an hour: only the stream can bring the rollback within the wait.
    with FlagClient(api.base, api.keys["flags"], poll_interval=HOUR) as flags:
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream" and _served(flags, task) == "edge"
        revision = flags.status().revision
        _rollback(api, task)
        wait_until(lambda: _served(flags, task) == "cloud", "the rollback pushed to the client")
        status = flags.status()
        assert status.mode == "stream" and (status.revision or 0) > (revision or 0)
        assert flags.flag(task)["stage"] == "rolled_back"  # type: ignore[index]


def test_a_stream_cut_midway_falls_back_to_polling_and_hears_changes_there(
    shared_api: ApiServer, task: str, proxy: Proxy
) -> None:
    options = {"poll_interval": 0.05, "max_backoff": 0.1, "stream_retry": HOUR}
    with FlagClient(proxy.base, shared_api.keys["flags"], **options) as flags:  # type: ignore[arg-type]
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream" and _served(flags, task) == "edge"
        proxy.cut()
        wait_until(lambda: flags.status().mode == "polling", "the fallback to polling")
        _rollback(shared_api, task)
        wait_until(lambda: _served(flags, task) == "cloud", "the rollback, polled")
        status = flags.status()
        assert (status.mode, status.state) == ("polling", "ok")  # the stream waits an hour
        wait_until(lambda: flags.status().error is None, "the polls to succeed")


def test_after_a_cut_the_stream_resumes(
    shared_api: ApiServer, task: str, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shadowplane.client")
    options = {"poll_interval": HOUR, "max_backoff": HOUR, "stream_retry": 0.1}
    with FlagClient(proxy.base, shared_api.keys["flags"], **options) as flags:  # type: ignore[arg-type]
        assert flags.wait_ready(30)
        assert flags.status().mode == "stream"
        connections = proxy.accepted
        proxy.cut()
        wait_until(lambda: proxy.accepted > connections, "a new connection after the cut")
        wait_until(lambda: flags.status().mode == "stream", "the stream again")
        assert any("polling every" in r.getMessage() for r in caplog.records)
        # Polling once an hour: the rollback can only come through the resumed stream.
        _rollback(shared_api, task)
        wait_until(lambda: _served(flags, task) == "cloud", "the rollback on the resumed stream")


def test_a_key_over_its_stream_limit_polls_instead(live_api: ApiServer) -> None:
    task = TICKET_TASK["task"]
    live_api.settings["SHADOWPLANE_FLAG_STREAMS_PER_KEY"] = "1"
    live_api.start()
    _to_full(live_api, task)
    key = live_api.keys["flags"]
    with FlagClient(live_api.base, key) as first:
        assert first.wait_ready(30) and first.status().mode == "stream"
        with FlagClient(live_api.base, key, poll_interval=0.05, stream_retry=HOUR) as second:
            assert second.wait_ready(30)
            assert second.status().mode == "polling" and _served(second, task) == "edge"
            _rollback(live_api, task)
            wait_until(lambda: _served(second, task) == "cloud", "the rollback, polled")
            wait_until(lambda: _served(first, task) == "cloud", "the rollback, pushed")

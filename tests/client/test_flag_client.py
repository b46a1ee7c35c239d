"""`FlagClient` against a real `shadowplane api` process: polling, the API going down and
coming back, staleness, the cache file across restarts, and keys that cannot read flags.

Staleness is judged on a clock the test holds (`Clock`), so "older than max_staleness"
never depends on how fast this machine is; everything else waits with generous bounds.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from controlplane.client import FlagClient
from tests.liveapi import ApiServer, free_port, wait_until

TICKET = "ticket_classify"  # promoted to full below: the edge serves within 512 tokens
INVOICE = "invoice_extract"  # stays in shadow: the cloud serves, the edge runs beside


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _to_full(api: ApiServer) -> int:
    for _ in range(3):  # shadow -> canary 5 -> canary 25 -> full, forced past the gate
        answer = api.call(
            "POST", f"/v1/tasks/{TICKET}/promote", json={"reason": "test", "force": True}
        )
        assert answer.status_code == 200, answer.text
    return int(api.call("GET", f"/v1/flags/{TICKET}", scope="flags").json()["version"])


def _client(api: ApiServer, **kw: object) -> FlagClient:
    options: dict[str, object] = {
        "stream": False,
        "poll_interval": 0.05,
        "max_backoff": 0.1,
        **kw,
    }
    return FlagClient(api.base, api.keys["flags"], **options)  # type: ignore[arg-type]


def test_a_client_whose_api_goes_down_keeps_its_flags_until_max_staleness_then_routes_to_the_cloud(
    live_api: ApiServer,
) -> None:
    live_api.start()
    version = _to_full(live_api)
    clock = Clock()
    with _client(live_api, max_staleness=60, clock=clock) as flags:
        assert flags.wait_ready(30)
        edge = flags.route(TICKET, session_id="s-1", input_tokens=100)
        assert (edge.served, edge.flag_version, edge.reason) == ("edge", version, "STATIC")
        assert flags.route(INVOICE, session_id="s-1", input_tokens=100).served == "cloud"

        live_api.kill()
        # (A poll in flight when it died may fail otherwise, e.g. a reset: the next is refused.)
        wait_until(
            lambda: "ConnectError" in (flags.status().error or ""), "the client to see the API gone"
        )
        # The last good flags, for the tasks it saw; the cloud for any other.
        still = flags.route(TICKET, session_id="s-1", input_tokens=100)
        assert (still.served, still.flag_version) == ("edge", version)
        assert flags.route(TICKET, session_id="s-1", input_tokens=600).served == "cloud"
        unseen = flags.route("reply_rewrite", session_id="s-1", input_tokens=100)
        assert (unseen.served, unseen.reason, unseen.flag_version) == ("cloud", "UNKNOWN", None)
        assert flags.status().state == "ok"

        clock.now += 60.5  # past max_staleness with no answer from the API
        stale = flags.route(TICKET, session_id="s-1", input_tokens=100)
        assert (stale.served, stale.run_other, stale.reason, stale.flag_version) == (
            "cloud",
            False,
            "STALE",
            None,
        )
        assert flags.flag(TICKET) is None
        status = flags.status()
        assert (status.state, status.tasks, status.revision) == ("stale", 2, status.revision)
        assert status.age_seconds is not None and status.age_seconds >= 60

        live_api.start()  # back: the next poll (backoff capped at 0.1 s) makes it current
        wait_until(lambda: flags.status().state == "ok", "the client to recover")
        assert flags.status().error is None
        assert flags.route(TICKET, session_id="s-1", input_tokens=100).served == "edge"


def test_a_client_started_while_the_api_is_down_routes_everything_to_the_cloud(
    live_api: ApiServer,
) -> None:
    with _client(live_api) as flags:  # nothing listens on the port yet
        assert flags.wait_ready(30) is False
        assert flags.status().state == "starting" and flags.status().age_seconds is None
        for task in (TICKET, INVOICE, "anything"):
            got = flags.route(task, session_id="s-1", input_tokens=10)
            assert (got.served, got.run_other, got.reason) == ("cloud", False, "STALE")
        live_api.start()
        wait_until(lambda: flags.status().state == "ok", "the first flags")
        shadow = flags.route(INVOICE, session_id="s-1", input_tokens=10)
        assert (shadow.served, shadow.run_other, shadow.variant) == ("cloud", True, "shadow")


def test_a_polling_client_hears_a_rollback_within_a_poll(shared_api: ApiServer) -> None:
    live_api = shared_api  # the only test here that changes its flags
    version = _to_full(live_api)
    with _client(live_api) as flags:
        assert flags.wait_ready(30)
        revision = flags.status().revision
        assert flags.route(TICKET, session_id="s-1", input_tokens=100).served == "edge"
        answer = live_api.call(
            "POST", f"/v1/tasks/{TICKET}/rollback", json={"reason": "test: bad answers"}
        )
        assert answer.status_code == 200, answer.text
        wait_until(
            lambda: flags.route(TICKET, session_id="s-1", input_tokens=100).served == "cloud",
            "the rollback to reach the client",
        )
        after = flags.route(TICKET, session_id="s-1", input_tokens=100)
        assert (after.flag_version, after.reason, after.variant) == (
            version + 1,
            "DISABLED",
            "shadow",
        )
        assert (flags.status().revision or 0) > (revision or 0)
        assert flags.flag(TICKET)["stage"] == "rolled_back"  # type: ignore[index]


def test_the_cache_file_is_written_atomically_and_reloaded_at_start_with_its_age(
    live_api: ApiServer, tmp_path: Path
) -> None:
    cache = tmp_path / "router" / "flags.json"
    live_api.start()
    version = _to_full(live_api)
    with _client(live_api, cache_path=cache) as flags:
        assert flags.wait_ready(30)
        revision = flags.status().revision
    saved = json.loads(cache.read_text(encoding="utf-8"))
    assert saved["revision"] == revision and saved["flags"][TICKET]["version"] == version
    assert [p.name for p in cache.parent.iterdir()] == ["flags.json"]  # no temporary left

    live_api.kill()
    # A router restarted during the outage routes from the file, and says so.
    with _client(live_api, cache_path=cache, max_staleness=600) as restarted:
        got = restarted.route(TICKET, session_id="s-1", input_tokens=100)
        assert (got.served, got.flag_version) == ("edge", version)
        status = restarted.status()
        assert (status.source, status.state, status.revision) == ("cache", "ok", revision)
        assert status.age_seconds is not None and status.age_seconds < 600

    # The same file, two hours old: too old to route by.
    saved["confirmed_at"] = time.time() - 7200
    cache.write_text(json.dumps(saved), encoding="utf-8")
    with _client(live_api, cache_path=cache, max_staleness=600) as late:
        assert late.route(TICKET, session_id="s-1", input_tokens=100).reason == "STALE"
        status = late.status()
        assert status.state == "stale" and (status.age_seconds or 0) >= 7200
        live_api.start()
        wait_until(lambda: late.status().state == "ok", "the server to refresh the copy")
        assert late.status().source == "server"
        assert late.route(TICKET, session_id="s-1", input_tokens=100).served == "edge"

    # A damaged file is ignored with a warning: nothing to route by.
    cache.write_text("{not json", encoding="utf-8")
    broken = FlagClient(f"http://127.0.0.1:{free_port()}", "k", cache_path=cache)
    assert broken.status().state == "starting"
    assert broken.route(TICKET, session_id="s-1", input_tokens=100).served == "cloud"
    broken.close()


@pytest.mark.parametrize("scope", ["bad", "ingest"])
def test_a_key_that_cannot_read_flags_stops_the_client_and_says_so(
    shared_api: ApiServer, scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    live_api = shared_api
    key = "sp_not_a_key" if scope == "bad" else live_api.keys["ingest"]
    caplog.set_level(logging.ERROR, logger="shadowplane.client")
    flags = FlagClient(live_api.base, key, stream=False, poll_interval=0.05)
    with flags:
        assert flags.wait_ready(30) is False
        status = flags.status()
        code = "401" if scope == "bad" else "403"
        assert (status.state, status.mode) == ("stopped", "stopped")
        assert f"HTTP {code}" in (status.error or "") and "stopped asking" in (status.error or "")
        assert flags.route(TICKET, session_id="s-1", input_tokens=10).served == "cloud"
        assert flags._thread is not None
        flags._thread.join(30)
        assert not flags._thread.is_alive()  # it really stopped asking
    assert any(f"HTTP {code}" in r.getMessage() for r in caplog.records)

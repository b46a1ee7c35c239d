"""README, "With the Python client": the figures it gives for the client's defaults are the
ones a router gets when it passes nothing — polls every 10 s ± 10%, flags served until they
are 600 s old, a document over 8 MiB or a stream quiet for 45 s is a failed fetch, a
reporter queue of 64 MiB and batches of at most the API's own body limit (16 MiB) — and a
task the client never saw goes to the cloud."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path
from typing import Any

from controlplane.client import FlagClient, ResultReporter
from controlplane.settings import Settings

MIB = 1024 * 1024
FULL = {
    "task": "t",
    "version": 4,
    "stage": "full",
    "edge_percent": 100,
    "max_input_tokens": None,
    "shadow_rate": 0.0,
    "sticky_by": "session",
    "killed": False,
}


def default(function: Any, name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def test_the_flag_client_defaults_are_the_readmes() -> None:
    assert default(FlagClient, "poll_interval") == 10
    assert default(FlagClient, "max_staleness") == 600
    assert default(FlagClient, "max_document_bytes") == 8 * MIB
    assert default(FlagClient, "stream_read_timeout") == 45
    assert default(FlagClient, "stream") is True  # the stream first, polls when it breaks


def test_the_reporter_defaults_are_the_readmes_and_the_apis_body_limit() -> None:
    assert default(ResultReporter, "max_queue_bytes") == 64 * MIB
    assert default(ResultReporter, "max_body_bytes") == 16 * MIB == Settings().max_body_bytes


def _cache(path: Path, age: float) -> Path:
    document = {
        "format": 1,
        "confirmed_at": time.time() - age,
        "revision": 3,
        "etag": None,
        "flags": {"t": FULL},
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_by_default_the_last_good_flags_serve_until_they_are_600_seconds_old(
    tmp_path: Path,
) -> None:
    # Not started: each client answers from the copy its cache file gave it.
    young = FlagClient("http://127.0.0.1:9", "k", cache_path=_cache(tmp_path / "a.json", 570))
    old = FlagClient("http://127.0.0.1:9", "k", cache_path=_cache(tmp_path / "b.json", 630))
    try:
        assert young.route("t", session_id="s", input_tokens=10).served == "edge"
        stale = old.route("t", session_id="s", input_tokens=10)
        assert (stale.served, stale.reason) == ("cloud", "STALE")
        # A task it never saw goes to the cloud too.
        unseen = young.route("never_seen", session_id="s", input_tokens=10)
        assert unseen.served == "cloud" and not unseen.run_other
    finally:
        young.close()
        old.close()

"""A 1 MiB adversarial text posted to a real API process must not stall it: while the
result is read, compared and masked, every `/healthz` poll from another client answers
within a second (Python's `re` holds the GIL, so a superlinear pattern froze every thread).

Run twice: with the default `compare_max_chars` (the text is stored but not read past the
cap) and with the cap lifted past the text, so the whole MiB goes through the readers.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from controlplane.client.tls import default_tls
from tests.liveapi import ApiServer, new_keys

TEXT_TASK = {
    "task": "reply_rewrite",
    "comparator": {"kind": "text_conservation"},
    "payload_policy": "redacted",
}
# One piece of each shape that was quadratic, or close to a pattern without matching it.
PIECES = [
    "x" * 3000 + "@",
    "1_" * 1500,
    "1-" * 1500,
    "+1 1 " * 600,
    "Aa Bb " * 500,
    "“" * 2000,
    '"abc ' * 600,
    "一二三四" * 500,
    "百分之" * 600,
    "www." * 700,
    "ab12-" * 600,
    "a@a." * 700,
    "Mr. " * 700,
    "!?" * 1500,
    "不没" * 1000,
]


def adversarial(size: int, shift: int = 0) -> str:
    pieces = PIECES[shift:] + PIECES[:shift]
    out: list[str] = []
    total = 0
    while total < size:
        for piece in pieces:
            out.append(piece)
            total += len(piece)
    return "".join(out)[:size]


@pytest.mark.parametrize("max_chars", [None, 2_000_000])
def test_healthz_answers_within_a_second_while_a_mib_of_hostile_text_is_read(
    sqlite_url: str, tmp_path: Path, max_chars: int | None
) -> None:
    from controlplane.db import get_engine, session_scope
    from controlplane.rollout.configs import apply_config

    with session_scope(get_engine(sqlite_url)) as session:
        apply_config(session, TEXT_TASK, actor="test")
    key = new_keys(sqlite_url, router=["ingest"])["router"]
    settings = {} if max_chars is None else {"SHADOWPLANE_COMPARE_MAX_CHARS": str(max_chars)}
    # `shadowplane api`, one worker, as its own process (forked: no import wait).
    server = ApiServer(sqlite_url, tmp_path / "api.log", settings=settings).start()
    base = server.base
    try:
        mib = 1024 * 1024
        result = {
            "request_id": "hostile-1",
            "task": "reply_rewrite",
            "input_tokens": 300_000,
            "decision": "edge",
            "served": "cloud",
            "session_id": "s-1",
            "input": {"text": adversarial(mib, shift=3)},
            "edge": {"output": adversarial(mib)},
            "cloud": {"output": adversarial(mib, shift=7)},
        }
        posted: dict[str, object] = {}

        def post() -> None:
            started = time.monotonic()
            response = httpx.post(
                f"{base}/v1/results",
                json=result,
                headers={"Authorization": f"Bearer {key}"},
                timeout=600,
                verify=default_tls(),
            )
            posted.update(
                status=response.status_code,
                body=response.json(),
                seconds=time.monotonic() - started,
            )

        poster = threading.Thread(target=post)
        poster.start()
        polls: list[float] = []
        with httpx.Client(base_url=base, timeout=30, verify=default_tls()) as client:
            while poster.is_alive():
                started = time.monotonic()
                assert client.get("/healthz").status_code == 200
                polls.append(time.monotonic() - started)
                time.sleep(0.02)
        poster.join()
        assert posted["status"] == 200, posted
        assert posted["body"] == {"accepted": 1, "duplicates": 0, "rejected": []}, posted
        assert polls, "no poll ran while the result was posted"
        # The one wall-clock claim the issue makes: no poll waits a second behind the reader.
        assert max(polls) < 1.0, (max(polls), len(polls), posted["seconds"])
    finally:
        server.stop()

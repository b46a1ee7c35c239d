"""A 1 MiB adversarial text posted to a real API process must not stall it: while the
result is read, compared and masked, every `/healthz` poll from another client answers
within a second (Python's `re` holds the GIL, so a superlinear pattern froze every thread).

Run twice: with the default `compare_max_chars` (the text is stored but not read past the
cap) and with the cap lifted past the text, so the whole MiB goes through the readers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("max_chars", [None, 2_000_000])
def test_healthz_answers_within_a_second_while_a_mib_of_hostile_text_is_read(
    tmp_path: Path, max_chars: int | None
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'api.db'}"
    env["SHADOWPLANE_TICK_SECONDS"] = "0"
    if max_chars is not None:
        env["SHADOWPLANE_COMPARE_MAX_CHARS"] = str(max_chars)
    cli = [sys.executable, "-m", "controlplane.cli"]
    run = {"env": env, "check": True, "capture_output": True, "text": True, "timeout": 120}
    subprocess.run([*cli, "migrate"], **run)  # type: ignore[call-overload]
    config = tmp_path / "task.json"
    config.write_text(json.dumps(TEXT_TASK))
    subprocess.run([*cli, "tasks", "apply", "-f", str(config)], **run)  # type: ignore[call-overload]
    created = subprocess.run(  # type: ignore[call-overload]
        [*cli, "keys", "create", "--name", "router", "--scope", "ingest"], **run
    )
    key = created.stdout.strip().splitlines()[-1]
    port = _free_port()
    server = subprocess.Popen(
        [*cli, "api", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, "the API exited"
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.2)

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
            )
            posted.update(
                status=response.status_code,
                body=response.json(),
                seconds=time.monotonic() - started,
            )

        poster = threading.Thread(target=post)
        poster.start()
        polls: list[float] = []
        with httpx.Client(base_url=base, timeout=30) as client:
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
        server.terminate()
        server.wait(timeout=30)

"""`shadowplane api --host --port --workers 2` serves the real app under uvicorn."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.liveapi import free_port


def test_api_command_serves_with_two_workers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'api.db'}"
    cli = [sys.executable, "-m", "controlplane.cli"]
    subprocess.run([*cli, "migrate"], env=env, check=True, capture_output=True, timeout=120)
    created = subprocess.run(
        [*cli, "keys", "create", "--name", "ops", "--scope", "read"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    key = created.stdout.strip().splitlines()[-1]
    port = free_port()
    server = subprocess.Popen(
        [*cli, "api", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120  # a bound on a loaded machine, not a speed test
        while True:
            assert server.poll() is None, server.stderr.read() if server.stderr else b""
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not become ready"
            time.sleep(0.2)
        answers = {
            httpx.get(f"{base}/v1/tasks", headers={"Authorization": f"Bearer {key}"}).status_code
            for _ in range(20)
        }
        assert answers == {200}
        assert httpx.get(f"{base}/v1/tasks").status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()

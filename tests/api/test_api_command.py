"""`shadowplane api --host --port --workers 2` serves the real app under uvicorn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from controlplane.client.tls import default_tls
from tests.liveapi import ApiServer


def test_api_command_serves_with_two_workers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'api.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = url
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
    # `start` runs `shadowplane api --host 127.0.0.1 --port P --workers 2` and fails with
    # the server's log if it exits or never answers.
    server = ApiServer(url, tmp_path / "api.log", {"read": key}, workers=2).start()
    try:
        assert (
            httpx.get(f"{server.base}/readyz", timeout=5, verify=default_tls()).status_code == 200
        ), server.log()
        answers = {server.call("GET", "/v1/tasks", "read").status_code for _ in range(20)}
        assert answers == {200}
        assert httpx.get(f"{server.base}/v1/tasks", verify=default_tls()).status_code == 401
    finally:
        server.stop()

"""A real `shadowplane api` process the client tests can stop and start again on the same
port, and a TCP proxy that can cut every connection through it (a stream cut mid-way)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

WAIT = 60.0  # bound for anything that must happen in the background


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll `condition` until it is truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.05)


@dataclass
class ApiProcess:
    """`python -m controlplane.cli api` on a database, on a fixed port across restarts."""

    database_url: str
    log_path: Path
    keys: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    # More SHADOWPLANE_* settings for the process.
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
        env.update(
            SHADOWPLANE_DATABASE_URL=self.database_url,
            SHADOWPLANE_TICK_SECONDS="0",
            SHADOWPLANE_LOG_LEVEL="WARNING",
        )
        env.update(self.env)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controlplane.cli",
                    "api",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                env=env,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + WAIT
        while True:
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not come up"
            time.sleep(0.1)

    def kill(self) -> None:
        """Gone at once, open connections and all (SIGKILL), like a crashed host."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)
        self.proc = None

    def call(self, method: str, path: str, scope: str = "admin", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys[scope]}"}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=30, **kw)


class Proxy:
    """Forwards 127.0.0.1:<port> to a target port; `cut()` closes every open connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._listener.close()
        self.cut()

"""Real servers for the flag-serving tests: `shadowplane api` under uvicorn on a free port,
and a private Redis the tests may stop and start without disturbing the suite's."""

from __future__ import annotations

import os
import queue
import shutil
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

from controlplane.auth.service import create_key
from controlplane.db import get_engine, session_scope
from controlplane.rollout.actions import apply_config
from tests.conftest import INVOICE_TASK, TICKET_TASK

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


def seed(url: str) -> dict[str, str]:
    """Two tasks and a key each for reading flags and for acting; returns the keys."""
    with session_scope(get_engine(url)) as session:
        keys = {
            scope: create_key(session, name=f"{scope}-key", scopes=[scope], actor="test")[1]
            for scope in ("flags:read", "admin")
        }
        apply_config(session, TICKET_TASK, actor="test")
        apply_config(session, INVOICE_TASK, actor="test")
    return keys


@dataclass
class ApiServer:
    """`python -m controlplane.cli api` with the given settings (SHADOWPLANE_* names)."""

    database_url: str
    log_path: Path
    settings: dict[str, str] = field(default_factory=dict)
    workers: int = 1
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
        env.update(
            SHADOWPLANE_DATABASE_URL=self.database_url,
            SHADOWPLANE_TICK_SECONDS="0",
            SHADOWPLANE_LOG_LEVEL="WARNING",
            **self.settings,
        )
        command = [sys.executable, "-m", "controlplane.cli", "api", "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--workers", str(self.workers)], env=env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + WAIT
        while True:
            assert self.proc.poll() is None, self.log()
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not start:\n" + self.log()
            time.sleep(0.1)

    def stop(self) -> int | None:
        """SIGTERM, then wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        proc.terminate()
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


@dataclass
class RedisServer:
    """A Redis of the test's own, on a free port, with nothing saved to disk."""

    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run the suite with scripts/test"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(answers, "the test's Redis to answer", timeout=30)
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


@dataclass
class Message:
    """One server-sent message: an event (id, event, data) or a comment."""

    id: str | None = None
    event: str | None = None
    data: str | None = None
    comment: str | None = None


class EventReader:
    """Reads GET /v1/flags/stream in a thread of its own; `next()` waits for a message."""

    def __init__(self, base: str, key: str, last_event_id: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self._client = httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=120))
        self._stream = self._client.stream("GET", "/v1/flags/stream", headers=headers)
        self.response = self._stream.__enter__()
        self.messages: queue.Queue[Message | BaseException | None] = queue.Queue()
        self.raw: list[str] = []
        if self.response.status_code == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        current = Message()
        try:
            for line in self.response.iter_lines():
                self.raw.append(line)
                if line == "":
                    if current != Message():
                        self.messages.put(current)
                    current = Message()
                elif line.startswith(":"):
                    current.comment = line[1:].strip()
                else:
                    name, _, value = line.partition(": ")
                    setattr(current, name, value)
            self.messages.put(None)  # the server ended the stream
        except BaseException as exc:  # the stream broke: the test sees how
            self.messages.put(exc)

    def next(self, timeout: float = WAIT) -> Message | BaseException | None:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message on the stream within {timeout} s") from None

    def next_event(self, timeout: float = WAIT) -> Message:
        """The next flags event, skipping heartbeats."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next(max(0.0, deadline - time.monotonic()))
            assert isinstance(message, Message), f"the stream ended: {message!r}"
            if message.comment is None and message.event != "heartbeat":
                return message

    def close(self) -> None:
        try:
            self._stream.__exit__(None, None, None)
        finally:
            self._client.close()

"""Plain helpers the test files share: Celery processes (`shadowplane worker` and `beat`) as
process groups of their own, their environment, and the databases of a Redis server handed
out one test at a time (the fixtures in tests/fixtures.py use them)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.liveapi import ROOT, WAIT


def celery_env(database_url: str, redis_url: str, **settings: str) -> dict[str, str]:
    """This process's environment for a Celery process on `database_url` and `redis_url`:
    no SHADOWPLANE_* setting of this one but the text reader the run chose, plus
    `settings`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SHADOWPLANE_") or k == "SHADOWPLANE_TEXT_READER"
    }
    env.update(SHADOWPLANE_DATABASE_URL=database_url, SHADOWPLANE_REDIS_URL=redis_url, **settings)
    return env


@dataclass
class CeleryProcess:
    """`shadowplane worker` or `shadowplane beat`: its main process leads a process group,
    so `kill` takes the pool processes with it, as a crashed host would."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path = ROOT
    proc: subprocess.Popen[bytes] | None = None

    @property
    def redis_url(self) -> str:
        return self.env["SHADOWPLANE_REDIS_URL"]

    def start(self) -> CeleryProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controlplane.cli", *self.argv],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def node_name(self) -> str:
        """The worker's node name as Celery reports it, or the start of it: `shadowplane
        worker` names a worker without `--hostname` after its own pid (it execs Celery)."""
        assert self.proc is not None
        for flag in ("--hostname", "-n"):
            if flag in self.argv:
                given = self.argv[self.argv.index(flag) + 1]
                return given.replace("%h", socket.gethostname())
        return f"shadowplane-{self.proc.pid}-"

    def wait_ready(self) -> CeleryProcess:
        """Return once the worker answers a control ping on its broker (fail with its log if
        it exits or stays silent for WAIT seconds)."""
        from controlplane.settings import Settings
        from shadowplane_workers.app import make_celery

        name = self.node_name()
        control = make_celery(
            Settings(database_url=self.env["SHADOWPLANE_DATABASE_URL"], redis_url=self.redis_url)
        )

        def answered() -> bool:
            assert self.running(), f"the worker exited:\n{self.log()}"
            replies = control.control.ping(timeout=1.0) or []
            return any(node.startswith(name) for reply in replies for node in reply)

        deadline = time.monotonic() + WAIT
        try:
            while not answered():
                if time.monotonic() > deadline:
                    pytest.fail(f"worker {name} answered no ping in {WAIT:g} s:\n{self.log()}")
        finally:
            control.close()
        return self

    def children(self) -> list[int]:
        """The main process's children (a prefork worker's pool processes)."""
        assert self.proc is not None
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            return [int(p) for p in path.read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL to the whole group, at once; returns when the main process is gone."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=WAIT)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM (a warm shutdown), then SIGKILL if it is still there after 30 s; the
        process is reaped either way."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
        self.kill()

    def log(self, tail: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-tail:]


@dataclass
class RedisDatabases:
    """The numbered databases of this process's Redis server (SHADOWPLANE_TEST_REDIS_URL),
    each held by one test at a time. Database 0 is left to whatever uses the server's URL as
    it is."""

    held: set[int] = field(default_factory=set)

    def take(self) -> str:
        """The URL of a database no running test holds, flushed."""
        server = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
        if not server:
            pytest.fail("SHADOWPLANE_TEST_REDIS_URL is not set: run the suite with scripts/test")
        base = server.rsplit("/", 1)[0]
        client = redis.Redis.from_url(f"{base}/0")
        try:
            count = int(client.config_get("databases")["databases"])
        finally:
            client.close()
        free = [db for db in range(1, count) if db not in self.held]
        if not free:
            pytest.fail(f"all {count - 1} Redis databases of this test worker are held")
        db = free[0]
        self.held.add(db)
        url = f"{base}/{db}"
        client = redis.Redis.from_url(url)
        try:
            client.flushdb()
        finally:
            client.close()
        return url

    def give_back(self, url: str) -> None:
        self.held.discard(int(url.rsplit("/", 1)[1]))


def raised(exc: BaseException) -> BaseException:
    """`exc` as raised (with its traceback)."""
    try:
        raise exc
    except BaseException as caught:
        return caught

"""Servers a fault drill owns and may stop, kill and restart without touching any other
test's: a PostgreSQL cluster of its own (a copy of a migrated cluster made once per run),
and polling helpers (Celery processes are tests.support's `CeleryProcess`).

Every wait here is bounded (`WAIT`, from tests.liveapi) and polls a condition; nothing
sleeps to let something happen.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from tests.liveapi import WAIT, free_port, wait_until


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    assert found and Path(found[-1], "initdb").exists(), (
        "PostgreSQL's initdb is not installed: run the suite with scripts/test"
    )
    return Path(found[-1])


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def private_dir(prefix: str) -> Path:
    """A folder the postgres user can use (pytest's own tmp folders are root's only)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(path, "postgres")
    return path


def _chown_tree(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres", str(path)], check=True, timeout=WAIT)


@dataclass
class PgServer:
    """A PostgreSQL cluster on a free port; `stop`, `crash` and `start` keep the port."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / "pgdata"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _pgctl(self, *args: str) -> None:
        argv = [str(_bindir() / "pg_ctl"), "-D", str(self.data), "-w", "-t", str(int(WAIT))]
        subprocess.run(
            _as_postgres([*argv, *args]),
            check=True,
            capture_output=True,
            timeout=WAIT + 10,
            stdin=subprocess.DEVNULL,
            cwd="/",
        )

    def init(self) -> PgServer:
        subprocess.run(
            _as_postgres(
                [str(_bindir() / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust"]
                + ["-E", "UTF8", "--no-locale"]
            ),
            check=True,
            capture_output=True,
            timeout=WAIT * 2,
            cwd="/",
        )
        return self

    def start(self) -> PgServer:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=100"
            " -c fsync=off -c full_page_writes=off"
        )
        self._pgctl("-l", str(self.root / "postgres.log"), "-o", options, "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """`fast`: clients are disconnected, the server shuts down cleanly; `immediate`: it
        stops at once, as a crash would (the next start recovers from the WAL)."""
        self._pgctl("-m", mode, "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def admin(self) -> Engine:
        # NullPool: the server goes away in a drill; a pooled connection would be stale.
        return create_engine(self.url, isolation_level="AUTOCOMMIT", poolclass=NullPool)

    def log(self) -> str:
        path = self.root / "postgres.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def copy_cluster(template: PgServer) -> PgServer:
    """A cluster of the drill's own: a copy of the (stopped) migrated template, started."""
    server = PgServer(private_dir("sp-drill-pg-"))
    shutil.copytree(template.data, server.data)
    _chown_tree(server.data)
    server.data.chmod(0o700)
    return server.start()


def waiting_on_lock(engine: Engine, fragment: str) -> int:
    """How many sessions wait on a lock with `fragment` in their statement."""
    with engine.connect() as conn:
        return int(
            conn.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query ILIKE :q"
                ),
                {"q": f"%{fragment}%"},
            )
            or 0
        )


def poll(condition: Callable[[], Any], what: str, timeout: float = WAIT, every: float = 0.1) -> Any:
    """`wait_until` with a slower default step (the drills poll databases and servers)."""
    return wait_until(condition, what, timeout=timeout, every=every)

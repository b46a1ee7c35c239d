"""What the benchmarks share: a private PostgreSQL (and Redis) on free ports started by
scripts/services with durable settings, a freshly migrated database on it, the API as a
real process, and the one percentile definition every printed p50/p99 uses."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from controlplane.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) of `values` by numpy's default definition (linear
    interpolation between the two nearest ranks), so figures of different benchmarks
    compare."""
    return float(numpy.percentile(values, q))


def rss_mib(pid: int) -> float:
    """Resident memory of process `pid` in MiB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_services(tmp: Path) -> str:
    """Start PostgreSQL and Redis in `tmp` on free ports (durable: fsync on, as in
    production); the admin URL of the PostgreSQL server."""
    port = free_port()
    env = {
        **os.environ,
        "SP_PG_DURABLE": "1",
        "SP_PG_PORT": str(port),
        "SP_REDIS_PORT": str(free_port()),
    }
    subprocess.run([str(ROOT / "scripts" / "services"), "start", str(tmp)], check=True, env=env)
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"


def stop_services(tmp: Path) -> None:
    """Stop the servers started in `tmp` and delete their data (gigabytes after a large
    run; left behind, runs fill the disk). The logs stay in `tmp`."""
    subprocess.run([str(ROOT / "scripts" / "services"), "stop", str(tmp)], check=False)
    shutil.rmtree(tmp / "pgdata", ignore_errors=True)


def fresh_database(admin_url: str, name: str) -> str:
    """A new database `name` on the server (dropped first if it exists), migrated; its URL."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    return url


@dataclass
class Api:
    """An API server process started by `start_api`."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def start_api(
    settings: dict[str, str],
    log: Path,
    *,
    workers: int = 2,
    port: int | None = None,
    factory: str = "controlplane.api:create_app",
) -> Api:
    """The app `factory` makes, served by uvicorn as `shadowplane api` serves it (uvloop,
    httptools, no access log) in a process of its own with `workers` workers, once its
    GET /readyz answers 200. Its environment is this one with `settings` (SHADOWPLANE_*
    variables) in place of any SHADOWPLANE_* setting here; its output goes to `log`."""
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env.update(settings)
    code = (
        f"import uvicorn; uvicorn.run({factory!r}, factory=True, host='127.0.0.1', "
        f"port={port}, workers={workers}, access_log=False, log_level='info')"
    )
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    api = Api(proc, port, log)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the API exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{api.base}/readyz", timeout=1).status_code == 200:
                return api
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            api.stop()
            raise SystemExit(f"the API did not become ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)

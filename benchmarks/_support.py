"""What the benchmarks share: a private PostgreSQL (and Redis) on free ports started by
scripts/services with durable settings, and a freshly migrated database on it."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from controlplane.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    subprocess.run([str(ROOT / "scripts" / "services"), "stop", str(tmp)], check=False)


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

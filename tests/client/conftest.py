"""A real API process on a migrated database with keys for routers, and the example tasks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.auth.service import create_key
from controlplane.db import get_engine, session_scope
from controlplane.rollout.actions import apply_config
from tests.client.live import ApiProcess
from tests.conftest import INVOICE_TASK, TICKET_TASK

KEY_SCOPES = {
    "admin": ["admin"],
    "read": ["read"],
    "flags": ["flags:read"],
    "ingest": ["ingest"],
    "router": ["ingest", "flags:read"],
}


def _api(url: str, tmp_path: Path) -> Iterator[ApiProcess]:
    engine = get_engine(url)
    with session_scope(engine) as session:
        keys = {
            name: create_key(session, name=f"{name}-key", scopes=scopes, actor="test")[1]
            for name, scopes in KEY_SCOPES.items()
        }
        apply_config(session, {**TICKET_TASK, "max_input_tokens": 512}, actor="test")
        apply_config(session, INVOICE_TASK, actor="test")
    engine.dispose()
    api = ApiProcess(url, tmp_path / "api.log", keys)
    try:
        yield api
    finally:
        api.kill()


@pytest.fixture
def live_api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiProcess]:
    """Not started: the test starts (and kills, and starts again) the process itself."""
    yield from _api(sqlite_url, tmp_path)


@pytest.fixture
def live_api_db(db_url: str, tmp_path: Path) -> Iterator[ApiProcess]:
    """`live_api` on SQLite and on PostgreSQL."""
    yield from _api(db_url, tmp_path)

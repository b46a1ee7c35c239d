"""Real API processes on a migrated database with keys for routers and the example tasks:
one of a test's own (`live_api`: not started, the test starts, kills and starts it again),
and one a module shares (`shared_api`: running, for tests that neither stop it nor need the
flags as seeded — each of them works on a task of its own or only reads)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.db import get_engine
from tests.liveapi import ApiServer, seed


def _api(url: str, log: Path) -> Iterator[ApiServer]:
    api = ApiServer(url, log, seed(url))
    get_engine(url).dispose()
    try:
        yield api
    finally:
        api.kill()


@pytest.fixture
def live_api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    """Not started: the test starts (and kills, and starts again) the process itself."""
    yield from _api(sqlite_url, tmp_path / "api.log")


@pytest.fixture
def live_api_db(db_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    """`live_api` on SQLite and on PostgreSQL."""
    yield from _api(db_url, tmp_path / "api.log")


@pytest.fixture(scope="module")
def shared_api(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A running API on SQLite that every test of a module shares."""
    folder = tmp_path_factory.mktemp("shared-api")
    shutil.copy(sqlite_template, folder / "shadowplane.db")
    url = f"sqlite:///{folder / 'shadowplane.db'}"
    for api in _api(url, folder / "api.log"):
        yield api.start()
    get_engine(url).dispose()

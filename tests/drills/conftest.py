"""Fixtures of the fault drills: a Redis of each drill's own (its PostgreSQL, `own_pg`, is
shared with other tests that stop theirs: tests/conftest.py), so that stopping or killing
it never touches a test running beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.liveapi import RedisServer


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the drill's own, which it may stop and start again on the same port."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    server = RedisServer(workdir).start()
    try:
        yield server
    finally:
        server.stop()

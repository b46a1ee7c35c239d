"""Fixtures of the fault drills: servers of each drill's own (PostgreSQL, Redis), so that
stopping or killing them never touches a test running beside it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.db import get_engine
from controlplane.migrate import upgrade
from tests.drills.servers import PgServer, copy_cluster, private_dir
from tests.liveapi import RedisServer


@pytest.fixture(scope="session")
def migrated_cluster() -> Iterator[PgServer]:
    """A migrated PostgreSQL cluster, stopped: each drill starts a copy of it."""
    template = PgServer(private_dir("sp-drill-template-")).init().start()
    try:
        upgrade(template.url)
        get_engine(template.url).dispose()
    finally:
        template.stop()
    yield template
    shutil.rmtree(template.root, ignore_errors=True)


@pytest.fixture
def own_pg(migrated_cluster: PgServer) -> Iterator[PgServer]:
    """A migrated PostgreSQL of the drill's own, which it may stop, crash and restart."""
    server = copy_cluster(migrated_cluster)
    try:
        yield server
    finally:
        get_engine(server.url).dispose()
        if server.running():
            try:
                server.stop("immediate")
            except Exception:  # already stopped by the drill: nothing to do
                pass
        shutil.rmtree(server.root, ignore_errors=True)


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

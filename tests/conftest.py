"""Shared fixtures: real databases (a migrated SQLite file, a PostgreSQL database cloned
from a migrated template), an app on them, and keys of every scope.

PostgreSQL comes from SHADOWPLANE_TEST_DATABASE_URL, which `scripts/test` sets after
starting a private server. A test that needs it fails (it is not skipped) when it is absent.

In parallel (pytest-xdist, `scripts/test` runs `-n 2`) each worker process has databases
of its own names (`per_worker`) and a Redis server of its own (SHADOWPLANE_TEST_REDIS_URL
is replaced by it: flag channels, rate buckets and Celery queues are global to a Redis).
Tests marked `serial` run alone: they stop the shared PostgreSQL, or make a wall-clock
claim another process's load could break. A worker never runs them (it skips them, and has
no SHADOWPLANE_TEST_PGCTL); `--serial=skip` leaves them out and `--serial=only` runs only
them, as `scripts/test` does after the parallel run.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from controlplane.api import create_app
from controlplane.auth.scopes import SCOPES
from controlplane.db import get_engine, session_scope
from controlplane.keys.service import create_key
from controlplane.migrate import upgrade
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings

pytest_plugins = ["tests.fixtures"]

# "gw0", "gw1", ... in a pytest-xdist worker; empty when pytest runs in one process.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def per_worker(name: str) -> str:
    """`name` made this worker's own (a database name every worker would otherwise share)."""
    return f"{name}_{WORKER}" if WORKER else name


TEMPLATE_DB = per_worker("sp_test_template")

# Shared, noisy machines: properties are judged by their examples, never by their speed.
settings.register_profile(
    "shadowplane", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shadowplane")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial",
        choices=("run", "skip", "only"),
        default="run",
        help="tests marked serial (they must run alone): run them with the others (the "
        "default), skip them, or run only them",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "serial: runs alone, never next to other tests: it stops the shared PostgreSQL, or "
        "makes a wall-clock claim (scripts/test runs these after the parallel run)",
    )
    if WORKER:
        # Nothing may stop the servers the other worker is using: a serial test fails here.
        os.environ.pop("SHADOWPLANE_TEST_PGCTL", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = config.getoption("serial")
    if choice == "run":
        if WORKER:
            alone = pytest.mark.skip(reason="marked serial, it runs alone: run it without -n")
            for item in items:
                if item.get_closest_marker("serial") is not None:
                    item.add_marker(alone)
        return
    keep = choice == "only"
    selected, deselected = [], []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (selected if serial == keep else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(scope="session", autouse=True)
def worker_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """In a pytest-xdist worker, a Redis server of the worker's own in place of the shared
    one (SHADOWPLANE_TEST_REDIS_URL), for the whole run."""
    shared = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
    if not WORKER or not shared:
        yield
        return
    from tests.liveapi import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    os.environ["SHADOWPLANE_TEST_REDIS_URL"] = server.url
    try:
        yield
    finally:
        os.environ["SHADOWPLANE_TEST_REDIS_URL"] = shared
        server.stop()


def pg_admin_url() -> str:
    url = os.environ.get("SHADOWPLANE_TEST_DATABASE_URL")
    if not url:
        pytest.fail("SHADOWPLANE_TEST_DATABASE_URL is not set: run the suite with scripts/test")
    return url


def _admin_engine() -> Engine:
    # NullPool: the outage test restarts the server, so never reuse a pooled connection.
    return create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT", poolclass=NullPool)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated PostgreSQL database that per-test databases are cloned from."""
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{TEMPLATE_DB}"'))
    url = make_url(pg_admin_url()).set(database=TEMPLATE_DB).render_as_string(hide_password=False)
    upgrade(url)
    get_engine(url).dispose()
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
    admin.dispose()


@contextmanager
def cloned_database() -> Iterator[str]:
    """A fresh migrated PostgreSQL database cloned from the template, dropped afterwards
    (the `pg_template` fixture must be active)."""
    name = f"sp_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"'))
    url = make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        get_engine(url).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh migrated PostgreSQL database of its own, committed to for real."""
    with cloned_database() as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    get_engine(f"sqlite:///{path}").dispose()
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "shadowplane.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    yield url
    get_engine(url).dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using it runs on the embedded SQLite file and on real PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


TICKET_TASK: dict[str, Any] = {
    "task": "ticket_classify",
    "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
}
INVOICE_TASK: dict[str, Any] = {
    "task": "invoice_extract",
    "comparator": {
        "kind": "json_fields",
        "fields": {"amount": "number", "currency": "string"},
        "required": ["amount"],
    },
    "payload_policy": "none",
}


@dataclass
class Api:
    """A running app on a real database, with one key per scope."""

    client: TestClient
    url: str
    keys: dict[str, str] = field(default_factory=dict)

    def headers(self, scope: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[scope]}"}

    def post_results(self, body: Any, scope: str = "ingest") -> Any:
        return self.client.post("/v1/results", json=body, headers=self.headers(scope))

    @property
    def engine(self) -> Engine:
        return get_engine(self.url)


def make_api(url: str, **settings: Any) -> Iterator[Api]:
    engine = get_engine(url)
    keys = {}
    with session_scope(engine) as session:
        for scope in SCOPES:
            _, keys[scope] = create_key(session, name=f"{scope}-key", scopes=[scope], actor="test")
        apply_config(session, TICKET_TASK, actor="test")
        apply_config(session, INVOICE_TASK, actor="test")
    # No background passes in tests: each test runs the pass itself, at the clock it chooses.
    # The suite's results carry fixed timestamps (2026-11-30…), so the ingest bound on old
    # results is opened wide here; tests of that bound pass their own `max_backfill`.
    defaults = {"tick_seconds": 0, "max_backfill": timedelta(days=36500)}
    app = create_app(Settings(database_url=url, **{**defaults, **settings}))
    with TestClient(app) as client:
        yield Api(client=client, url=url, keys=keys)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    yield from make_api(db_url)


def make_result(**overrides: Any) -> dict[str, Any]:
    """A valid shadow-traffic result of ticket_classify; override any field."""
    result: dict[str, Any] = {
        "request_id": f"r-{uuid.uuid4().hex[:10]}",
        "task": "ticket_classify",
        "ts": "2026-11-30T02:00:00Z",
        "session_id": "s-1",
        "input_tokens": 300,
        "decision": "edge",
        "served": "cloud",
        "input": {"text": "I want my money back for order 1234"},
        "edge": {"output": "refund", "latency_ms": 41.0, "confidence": 0.9, "model": "small@3"},
        "cloud": {"output": "refund", "latency_ms": 380.0, "model": "large@7"},
    }
    result.update(overrides)
    return result


def _with_metrics_task(url: str) -> Iterator[Api]:
    from tests.windowdata import METRICS_TASK

    for api in make_api(url):
        with session_scope(api.engine) as session:
            apply_config(session, METRICS_TASK, actor="test")
        yield api


@pytest.fixture
def metrics_api(db_url: str) -> Iterator[Api]:
    """An app with `metrics_task` (one-minute windows, 30 s lateness) registered too."""
    yield from _with_metrics_task(db_url)


@pytest.fixture
def pg_metrics_api(pg_url: str) -> Iterator[Api]:
    """`metrics_api` on PostgreSQL only (for tests that share the database with servers)."""
    yield from _with_metrics_task(pg_url)

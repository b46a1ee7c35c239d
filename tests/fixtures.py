"""Fixtures for tests that need Redis databases and Celery workers of their own (registered
by tests/conftest.py as a pytest plugin): `redis_url()` hands out a flushed database of this
worker's Redis server, `celery_worker(...)` starts a real `shadowplane worker` and stops it
after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.support import CeleryProcess, RedisDatabases, celery_env


@pytest.fixture(scope="session")
def redis_databases() -> RedisDatabases:
    return RedisDatabases()


@pytest.fixture
def redis_url(redis_databases: RedisDatabases) -> Iterator[Callable[[], str]]:
    """`redis_url()`: the URL of a database of this worker's Redis server that no other
    running test holds, flushed; a new one at each call, all given back after the test."""
    taken: list[str] = []

    def take() -> str:
        taken.append(redis_databases.take())
        return taken[-1]

    yield take
    for url in taken:
        redis_databases.give_back(url)


class StartWorker(Protocol):
    def __call__(
        self,
        database_url: str,
        broker_url: str,
        *args: str,
        concurrency: int = 1,
        ready: bool = True,
        **settings: str,
    ) -> CeleryProcess: ...


# It asks for `redis_url` so that its workers stop before their Redis databases are given
# back to the next test.
@pytest.fixture
def celery_worker(redis_url: Callable[[], str], tmp_path: Path) -> Iterator[StartWorker]:
    """`celery_worker(database_url, broker_url, *args, concurrency=1, **settings)`: a real
    `shadowplane worker --concurrency N *args` on those URLs (SHADOWPLANE_* `settings` added
    to its environment), once it answers a ping (`ready=False`: at once, its `wait_ready()`
    to call); stopped and reaped after the test. Its log is `.log_path`."""
    started: list[CeleryProcess] = []

    def start(
        database_url: str,
        broker_url: str,
        *args: str,
        concurrency: int = 1,
        ready: bool = True,
        **settings: str,
    ) -> CeleryProcess:
        worker = CeleryProcess(
            ["worker", "--concurrency", str(concurrency), *args],
            celery_env(database_url, broker_url, **settings),
            tmp_path / f"worker-{len(started)}.log",
        )
        started.append(worker.start())
        return worker.wait_ready() if ready else worker

    yield start
    for worker in started:
        worker.stop()

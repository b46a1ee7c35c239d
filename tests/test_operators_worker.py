"""`shadowplane worker` names each worker uniquely by default (Celery's own default,
celery@<host>, is the same for every worker on a host), and `--hostname` reaches Celery:
real workers on the real Redis broker answer a control ping under those names."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable

import pytest

from controlplane.cli import default_worker_name
from controlplane.settings import Settings
from shadowplane_workers.app import make_celery
from tests.fixtures import StartWorker
from tests.liveapi import WAIT

pytestmark = pytest.mark.integration


def test_default_names_carry_the_pid_and_a_random_part() -> None:
    names = [default_worker_name() for _ in range(20)]
    # Even within one process (a pid reused in another container on the same host name):
    # 4 random hex digits; 20 draws all equal would happen once in 65536**19.
    assert len(set(names)) > 1
    assert all(re.fullmatch(rf"shadowplane-{os.getpid()}-[0-9a-f]{{4}}@%h", n) for n in names)


def test_workers_on_one_host_answer_under_distinct_names(
    pg_url: str, redis_url: Callable[[], str], celery_worker: StartWorker
) -> None:
    broker = redis_url()
    # The named one at SHADOWPLANE_LOG_LEVEL=warning: it says nothing of its start.
    workers = [
        celery_worker(pg_url, broker, *args, ready=False, **level)
        for args, level in (
            ((), {}),
            ((), {}),
            (("--hostname", "ops-a@%h"), {"SHADOWPLANE_LOG_LEVEL": "warning"}),
        )
    ]
    for worker in workers:
        worker.wait_ready()
    celery = make_celery(Settings(database_url=pg_url, redis_url=broker))
    names: list[str] = []
    try:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            assert all(w.running() for w in workers), "a worker exited"
            replies = celery.control.ping(timeout=1.0) or []
            names = sorted(name for reply in replies for name in reply)
            if len(names) >= 3:
                break
    finally:
        celery.close()
    host = socket.gethostname()
    assert len(names) == 3 and len(set(names)) == 3, (names, *(w.log(2000) for w in workers))
    assert f"ops-a@{host}" in names
    defaults = [n for n in names if n != f"ops-a@{host}"]
    levels = [[json.loads(line)["level"] for line in w.log(10**6).splitlines()] for w in workers]
    assert "INFO" in levels[0] and "INFO" in levels[1], levels
    assert {"DEBUG", "INFO"}.isdisjoint(levels[2]), workers[2].log()
    assert all(n.startswith("shadowplane-") and n.endswith(f"@{host}") for n in defaults)

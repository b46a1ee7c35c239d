"""`shadowplane worker` names each worker uniquely by default (Celery's own default,
celery@<host>, is the same for every worker on a host), and `--hostname` reaches Celery:
real workers on the real Redis broker answer a control ping under those names."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from controlplane.cli import default_worker_name
from controlplane.settings import Settings
from tests.liveapi import WAIT
from workers.app import make_celery

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def broker_url() -> str:
    url = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
    if not url:
        pytest.fail("SHADOWPLANE_TEST_REDIS_URL is not set: run the suite with scripts/test")
    return url.rsplit("/", 1)[0] + "/6"  # a database of its own: no other test's workers


def test_default_names_carry_the_pid_and_a_random_part() -> None:
    names = [default_worker_name() for _ in range(20)]
    # Even within one process (a pid reused in another container on the same host name):
    # 4 random hex digits; 20 draws all equal would happen once in 65536**19.
    assert len(set(names)) > 1
    assert all(re.fullmatch(rf"shadowplane-{os.getpid()}-[0-9a-f]{{4}}@%h", n) for n in names)


def test_workers_on_one_host_answer_under_distinct_names(pg_url: str, tmp_path: Path) -> None:
    broker = broker_url()
    redis.Redis.from_url(broker).flushdb()
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": pg_url, "SHADOWPLANE_REDIS_URL": broker}
    cli = [sys.executable, "-m", "controlplane.cli", "worker", "--concurrency", "1"]
    argvs = [cli, cli, [*cli, "--hostname", "ops-a@%h"]]
    logs = [(tmp_path / f"worker-{i}.log").open("w") for i in range(len(argvs))]
    processes = [
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        for argv, log in zip(argvs, logs, strict=True)
    ]
    celery = make_celery(Settings(database_url=pg_url, redis_url=broker))
    names: list[str] = []
    try:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            assert all(p.poll() is None for p in processes), "a worker exited"
            replies = celery.control.ping(timeout=1.0) or []
            names = sorted(name for reply in replies for name in reply)
            if len(names) >= 3:
                break
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs:
            log.close()
        celery.close()
    host = socket.gethostname()
    assert len(names) == 3 and len(set(names)) == 3, (
        names,
        *((tmp_path / f"worker-{i}.log").read_text()[-2000:] for i in range(3)),
    )
    assert f"ops-a@{host}" in names
    defaults = [n for n in names if n != f"ops-a@{host}"]
    assert all(n.startswith("shadowplane-") and n.endswith(f"@{host}") for n in defaults)

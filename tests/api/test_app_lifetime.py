"""No app outlives its test: an app started, asked and stopped is freed, and a hundred of
them leave the process's memory where ten left it."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from controlplane.api import create_app
from controlplane.settings import Settings

STARTS = 100
# Each leaked app held ~1.5 MiB (its engine, pools, routes and flag copy): ninety of them
# leaked are ~130 MiB. What a freed app leaves (interned strings, caches that fill once)
# stays far below this.
FLAT_BYTES = 8 * 2**20


@pytest.fixture
def default_collector() -> Iterator[None]:
    """Python's own collector settings, as production runs (the suite collects less often,
    which lets a process's memory reach higher between collections)."""
    suite = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*suite)


def _start_and_stop(url: str) -> weakref.ref[FastAPI]:
    app = create_app(Settings(database_url=url, tick_seconds=0))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").json()["status"] == "ok"
        assert client.get("/v1/flags", headers={"Authorization": "Bearer x"}).status_code == 401
    return weakref.ref(app)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.usefixtures("default_collector")
def test_a_hundred_app_starts_leave_memory_flat(sqlite_template: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{sqlite_template}"
    # The first app a process starts freezes what exists then (controlplane.api), itself
    # among it: production runs that one app. The measured ones come after it.
    _start_and_stop(url)
    apps = [_start_and_stop(url) for _ in range(10)]
    gc.collect()
    after_ten = _resident_bytes()
    apps += [_start_and_stop(url) for _ in range(STARTS - 10)]
    gc.collect()
    after_all = _resident_bytes()
    alive = sum(ref() is not None for ref in apps)
    assert alive == 0, f"{alive} of {STARTS} stopped apps are still in memory"
    assert after_all - after_ten < FLAT_BYTES, (
        f"memory grew {(after_all - after_ten) / 2**20:.1f} MiB over {STARTS - 10} app starts"
    )

"""PostgreSQL stopped mid-test: ingest answers 503 with nothing half-written, known keys still
authenticate, and everything recovers once the server is back."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from controlplane.models import Result
from tests.conftest import Api, make_api, make_result
from tests.drills.servers import PgServer

KEY_CACHE_SECONDS = 0.2

# It stops a PostgreSQL server of its own.
pytestmark = pytest.mark.integration


def test_postgresql_stopped_then_recovered(own_pg: PgServer) -> None:
    for api in make_api(own_pg.url, key_cache_seconds=KEY_CACHE_SECONDS):
        _outage_and_recovery(api, own_pg)


def _outage_and_recovery(api: Api, server: PgServer) -> None:
    before = {"results": [make_result(request_id=f"before-{i}") for i in range(50)]}
    assert api.post_results(before).json()["accepted"] == 50
    assert api.client.get("/readyz").status_code == 200
    server.stop()
    try:
        during = {"results": [make_result(request_id=f"during-{i}") for i in range(50)]}
        response = api.post_results(during)  # a known key still authenticates (stale cache)
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] == "5"
        assert "nothing from this request was stored" in response.json()["detail"]
        single = api.post_results(make_result(request_id="during-single"))
        assert single.status_code == 503
        ready = api.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"].startswith("error")
        assert api.client.get("/healthz").status_code == 200
        # A key this process never saw cannot be checked: 503, not 401. Once the key
        # snapshot is older than its 0.2 s: until then it answers for every key, and the
        # requests above may all come within 0.2 s of the last read (seen once).
        time.sleep(KEY_CACHE_SECONDS + 0.05)
        unknown = api.client.get("/v1/tasks", headers={"Authorization": "Bearer sp_never_seen"})
        assert unknown.status_code == 503
    finally:
        server.start()
    assert api.client.get("/readyz").status_code == 200
    assert api.post_results(during).json() == {"accepted": 50, "duplicates": 0, "rejected": []}
    assert api.post_results(before).json()["duplicates"] == 50
    with api.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Result)) == 100

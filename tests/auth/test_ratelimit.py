"""Rate limits (docs/http-api.md): a token bucket per key and scope, per process or shared by
replicas through Redis; failed authentications limited per client address (never a valid
key), with no query per made-up token; a Redis outage blocks nobody."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from controlplane.api import create_app
from controlplane.auth.service import MISS_REFRESH_SECONDS
from controlplane.logs import REDIS
from controlplane.settings import Settings
from tests.conftest import Api, make_api

# Three requests, then about one every 100 s: nothing refills during a test.
TINY = {"per_second": 0.01, "burst": 3}


def tiny(*scopes: str) -> dict[str, Any]:
    return {f"rate_{s}_{k}": v for s in scopes for k, v in TINY.items()}


def replica(api: Api, **settings: Any) -> TestClient:
    """A second app on the same database, as another replica would be."""
    app = create_app(Settings(database_url=api.url, tick_seconds=0, **settings))
    return TestClient(app)


def assert_429(response: Any, *words: str) -> int:
    assert response.status_code == 429, response.text
    retry = response.headers["Retry-After"]
    assert retry.isdigit() and int(retry) >= 1, retry
    for word in words:
        assert word in response.json()["detail"], response.text
    return int(retry)


def test_a_key_over_its_scope_rate_gets_429_with_retry_after(db_url: str) -> None:
    for api in make_api(db_url, **tiny("read", "admin")):
        read = api.headers("read")
        assert [api.client.get("/v1/tasks", headers=read).status_code for _ in range(3)] == [
            200
        ] * 3
        retry = assert_429(
            api.client.get("/v1/tasks", headers=read),
            "'read-key'",
            "'read' rate",
            "SHADOWPLANE_RATE_READ_PER_SECOND",
        )
        assert 90 <= retry <= 100  # (1 token) / (0.01 per second), rounded up
        # Per key: another key's read bucket is its own.
        assert api.client.get("/v1/tasks", headers=api.headers("admin")).status_code == 200
        # Per scope: the admin key's admin bucket is not its read bucket. (Lifting a switch
        # that is not on is a 409: the request went through the limiter.)
        lift = {"json": {"reason": "x"}, "headers": api.headers("admin")}
        assert [api.client.post("/v1/kill/lift", **lift).status_code for _ in range(3)] == [409] * 3
        assert_429(
            api.client.post("/v1/kill/lift", **lift),
            "'admin' rate",
            "SHADOWPLANE_RATE_ADMIN_PER_SECOND",
        )


def test_scopes_use_their_own_settings(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, **tiny("ingest", "flags")):
        for _ in range(3):
            assert api.client.get("/v1/flags", headers=api.headers("flags:read")).status_code in (
                200,
                304,
            )
        assert_429(
            api.client.get("/v1/flags", headers=api.headers("flags:read")),
            "'flags:read' rate",
            "SHADOWPLANE_RATE_FLAGS_PER_SECOND",
        )
        for _ in range(3):
            assert api.post_results({"results": []}).status_code != 429
        assert_429(api.post_results({"results": []}), "SHADOWPLANE_RATE_INGEST_PER_SECOND")
        # Untouched scopes keep their generous defaults.
        for _ in range(10):
            assert api.client.get("/v1/tasks", headers=api.headers("read")).status_code == 200


def test_metrics_any_key_uses_the_read_bucket(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, **tiny("read")):
        headers = api.headers("ingest")
        for _ in range(3):
            assert api.client.get("/metrics", headers=headers).status_code == 200
        assert_429(api.client.get("/metrics", headers=headers), "'read' rate")


@pytest.mark.integration
def test_replicas_share_a_key_bucket_through_redis(
    pg_url: str, redis_url: Callable[[], str]
) -> None:
    shared = {"redis_url": redis_url(), **tiny("read")}
    for api in make_api(pg_url, **shared):
        with replica(api, **shared) as other:
            read = api.headers("read")
            assert api.client.get("/v1/tasks", headers=read).status_code == 200
            assert other.get("/v1/tasks", headers=read).status_code == 200
            assert api.client.get("/v1/tasks", headers=read).status_code == 200
            # Three between them: each replica on its own would still allow more.
            assert_429(other.get("/v1/tasks", headers=read), "SHADOWPLANE_RATE_READ_PER_SECOND")
            assert_429(api.client.get("/v1/tasks", headers=read))


def test_a_redis_outage_blocks_nobody_and_is_logged_once(sqlite_url: str) -> None:
    REDIS.reset()  # no outage left over from another test in this process
    logger = logging.getLogger("shadowplane.outage")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        for api in make_api(sqlite_url, redis_url="redis://127.0.0.1:1/0", **tiny("read")):
            read = api.headers("read")
            assert [api.client.get("/v1/tasks", headers=read).status_code for _ in range(3)] == [
                200
            ] * 3
            # Still limited, on this process's own buckets.
            assert_429(api.client.get("/v1/tasks", headers=read))
            for _ in range(3):
                assert api.client.get("/v1/tasks", headers=api.headers("admin")).status_code == 200
    finally:
        logger.removeHandler(handler)
    outages = [r for r in records if '"redis_unavailable"' in r.getMessage()]
    assert len(outages) == 1, [r.getMessage() for r in records]
    REDIS.reset()


def key_reads_allowed(seconds: float, ttl: float = 5.0) -> int:
    """The most reads of the key table a process makes in `seconds` however many unknown
    tokens it is sent: one a second for unknown tokens, plus one per cache window."""
    return int(2 + seconds / MISS_REFRESH_SECONDS + seconds / ttl)


class Queries:
    """Counts the statements an engine runs for requests: all but the flag copy's check of
    the flag revision, which its own thread makes about once a second whatever is asked."""

    def __init__(self, api: Api) -> None:
        self.count = 0
        self.engine = api.client.app.state.engine  # type: ignore[attr-defined]
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FROM flag_state" not in statement:
            self.count += 1

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


@pytest.fixture
def failures_api(db_url: str) -> Iterator[Api]:
    yield from make_api(db_url, auth_failures_per_minute=5)


def test_failed_authentications_are_limited_per_address_without_a_query_each(
    failures_api: Api,
) -> None:
    api = failures_api
    known = api.headers("read")
    assert api.client.get("/v1/tasks", headers=known).status_code == 200
    for i in range(5):
        bad = {"Authorization": f"Bearer sp_made_up_{i}"}
        assert api.client.get("/v1/tasks", headers=bad).status_code == 401
    queries = Queries(api)
    started = time.monotonic()
    try:
        for i in range(20):
            retry = assert_429(
                api.client.get("/v1/tasks", headers={"Authorization": f"Bearer sp_other_{i}"}),
                "too many failed authentications from testclient",
                "SHADOWPLANE_AUTH_FAILURES_PER_MINUTE",
            )
            assert retry <= 12  # one more attempt every 60/5 s
        # No query per token: the process's snapshot of the keys answers them.
        assert queries.count <= key_reads_allowed(time.monotonic() - started)
    finally:
        queries.close()
    # A valid key is never refused for the address's failures, even one this process has
    # not used yet (a router behind the same proxy as the attacker).
    assert api.client.get("/v1/tasks", headers=api.headers("admin")).status_code == 200
    assert api.client.get("/v1/tasks", headers=known).status_code == 200
    # Another address has its own budget; a missing key is not a failed authentication.
    with TestClient(api.client.app, client=("10.0.0.7", 5000)) as elsewhere:
        assert (
            elsewhere.get("/v1/tasks", headers={"Authorization": "Bearer sp_x"}).status_code == 401
        )
    for _ in range(10):
        assert api.client.get("/v1/tasks").status_code == 401


@pytest.mark.integration
def test_failed_authentications_are_counted_across_replicas(
    pg_url: str, redis_url: Callable[[], str]
) -> None:
    shared = {"redis_url": redis_url(), "auth_failures_per_minute": 5}
    for api in make_api(pg_url, **shared):
        with replica(api, **shared) as other:
            for i in range(5):
                bad = {"Authorization": f"Bearer sp_made_up_{i}"}
                assert api.client.get("/v1/tasks", headers=bad).status_code == 401
            assert_429(api.client.get("/v1/tasks", headers={"Authorization": "Bearer sp_a"}))
            # The other replica has not seen a failure from this address, yet its first
            # one finds the shared budget spent: the next is refused.
            bad = {"Authorization": "Bearer sp_made_up_b"}
            assert other.get("/v1/tasks", headers=bad).status_code == 401
            assert_429(other.get("/v1/tasks", headers={"Authorization": "Bearer sp_made_up_c"}))

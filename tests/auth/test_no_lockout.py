"""Nobody can lock a valid key out with bad tokens: after a flood of made-up tokens from
one address (every client's, behind a proxy) has earned it 429s, every valid key from that
address still gets in — keys this process has never used, keys created before it started
and keys created while it runs — per process and through the Redis the replicas share.
A flood of distinct made-up tokens costs a handful of queries, not one each."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from controlplane.db import session_scope
from controlplane.keys.service import create_key
from tests.auth.test_ratelimit import Queries, assert_429, key_reads_allowed, replica
from tests.conftest import Api, make_api, make_result

FLOOD = 40  # with 30 failures a minute allowed: 30 answers of 401, then 429s


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def flood(client: TestClient, prefix: str) -> list[int]:
    return [
        client.get("/v1/tasks", headers=bearer(f"sp_{prefix}_{i}")).status_code
        for i in range(FLOOD)
    ]


def new_key(api: Api, name: str, scopes: list[str]) -> str:
    """A key created while the app runs (as `shadowplane keys create` would)."""
    with session_scope(api.engine) as session:
        _, key = create_key(session, name=name, scopes=scopes, actor="test")
    return key


def eventually(client: TestClient, key: str) -> int:
    """The status of GET /v1/tasks with `key`, asked again while it is refused as a key the
    process has not read yet (for about a second)."""
    seen = []
    deadline = time.monotonic() + 30  # far above the second it takes: never a speed test
    while True:
        status = client.get("/v1/tasks", headers=bearer(key)).status_code
        seen.append(status)
        if status == 200 or time.monotonic() > deadline:
            return status
        assert status in (401, 429), seen  # the key is not known yet: refused as made up
        time.sleep(0.05)


def test_made_up_tokens_from_an_address_never_lock_out_a_valid_key(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, auth_failures_per_minute=30):
        statuses = flood(api.client, "made_up")
        assert statuses == [401] * 30 + [429] * 10
        # Keys from before this process started, never used by it: the ingest key of a
        # router and the admin's (its kill switch must not be lockable by anyone).
        ingest = api.client.post("/v1/results", json=make_result(), headers=api.headers("ingest"))
        assert ingest.status_code == 200, ingest.text
        assert api.client.get("/v1/tasks", headers=api.headers("admin")).status_code == 200
        # A key created while the app runs works within about a second, from the same address.
        key = new_key(api, "late-router", ["read"])
        assert eventually(api.client, key) == 200
        # Made-up tokens from the address are still refused, with Retry-After.
        assert_429(
            api.client.get("/v1/tasks", headers=bearer("sp_made_up_again")),
            "too many failed authentications",
        )
        # The valid keys stay in; the per-key buckets are still their own.
        assert api.client.get("/v1/tasks", headers=api.headers("read")).status_code == 200


@pytest.mark.integration
def test_through_redis_no_replica_locks_out_a_valid_key(
    pg_url: str, redis_url: Callable[[], str]
) -> None:
    shared = {"redis_url": redis_url(), "auth_failures_per_minute": 30}
    # The proxy's address, its own in the Redis the whole suite shares.
    proxy = (f"proxy-{uuid.uuid4().hex[:8]}", 5000)
    for api in make_api(pg_url, **shared):
        with (
            TestClient(api.client.app, client=proxy) as one,
            TestClient(replica(api, **shared).app, client=proxy) as other,
        ):
            # The attacker spreads the flood over both replicas; the budget is shared.
            assert flood(one, "one") == [401] * 30 + [429] * 10
            assert other.get("/v1/tasks", headers=bearer("sp_two_0")).status_code == 401
            assert_429(other.get("/v1/tasks", headers=bearer("sp_two_1")))
            # Neither replica has used a key yet (as after a restart, or a new replica).
            for client in (other, one):
                assert client.get("/v1/tasks", headers=api.headers("admin")).status_code == 200
                ingest = client.post(
                    "/v1/results", json=make_result(), headers=api.headers("ingest")
                )
                assert ingest.status_code == 200, ingest.text
            key = new_key(api, "late-router", ["read"])
            for client in (other, one):
                assert eventually(client, key) == 200
                # Made-up tokens are still cut off: the shared budget refills one failure
                # every 2 s, so on a slow machine the seconds spent above may have let one or
                # two more through before the 429.
                codes = [
                    client.get("/v1/tasks", headers=bearer(f"sp_made_up_again_{i}")).status_code
                    for i in range(5)
                ]
                assert 429 in codes and set(codes) <= {401, 429}, codes


def test_a_flood_of_distinct_made_up_tokens_costs_a_handful_of_queries(db_url: str) -> None:
    # No budget of failures: tokens from many addresses each stay under theirs.
    for api in make_api(db_url, auth_failures_per_minute=0):
        assert api.client.get("/v1/tasks", headers=api.headers("read")).status_code == 200
        queries = Queries(api)
        started = time.monotonic()
        try:
            for i in range(300):
                response = api.client.get("/v1/tasks", headers=bearer(f"sp_made_up_{i}"))
                assert response.status_code == 401
            allowed = key_reads_allowed(time.monotonic() - started)
            assert queries.count <= allowed < 300, (queries.count, allowed)
        finally:
            queries.close()

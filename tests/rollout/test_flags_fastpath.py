"""Conditional flag polls answered before routing (controlplane.rollout.flagpolls): taken
for a poll of the current ETag by a known key within its rate, its 304 the route's 304
header for header, and every other request left to the route, which answers as before.

A request with a query string always goes to the route (`?via=route`): FastAPI ignores the
parameter, so it is the same request answered the old way, to compare with."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from fastapi import Response

from controlplane.db import session_scope
from controlplane.keys.service import revoke_key
from controlplane.rollout.flagpolls import Poll, cache_headers, raw_headers, read_poll
from tests.conftest import Api, make_api
from tests.liveapi import wait_until

pytestmark = pytest.mark.integration

TASK = "ticket_classify"
ROUTE = "?via=route"


def answered(api: Api) -> int:
    return int(api.client.app.state.fast_polls.answered)  # type: ignore[attr-defined]


def poll(api: Api, path: str, tag: str | None, scope: str = "flags:read", **headers: str) -> Any:
    sent = {**api.headers(scope), **headers}
    if tag is not None:
        sent["If-None-Match"] = tag
    return api.client.get(path, headers=sent)


def same_answer(fast: Any, slow: Any) -> None:
    """Status, every header (names, values, order) and body alike."""
    assert fast.status_code == slow.status_code
    assert fast.headers.multi_items() == slow.headers.multi_items()
    assert fast.content == slow.content


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


@pytest.fixture
def log_lines() -> Iterator[list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(orjson.loads(record.getMessage()))

    handler = Keep()
    logger = logging.getLogger("shadowplane.http")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


# --- which requests it reads (pure) -----------------------------------------------------


def scope_of(
    path: str = "/v1/flags", method: str = "GET", query: bytes = b"", **headers: str
) -> dict[str, Any]:
    raw = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query,
        "root_path": "",
        "headers": raw,
    }


KEY = {"authorization": "Bearer sp_k", "if_none_match": '"t"'}


def test_a_poll_is_read_from_the_path_the_key_and_if_none_match() -> None:
    assert read_poll(scope_of(**KEY)) == Poll(None, "sp_k", '"t"')
    assert read_poll(scope_of(f"/v1/flags/{TASK}", **KEY)) == Poll(TASK, "sp_k", '"t"')
    assert read_poll(scope_of(x_api_key="sp_x", if_none_match="*")) == Poll(None, "sp_x", "*")
    # As the route's dependency reads the key: Bearer first, then X-API-Key.
    both = scope_of(authorization="bearer  sp_k ", x_api_key="sp_x", if_none_match='"t"')
    assert read_poll(both) == Poll(None, "sp_k", '"t"')
    # A body of nothing announced is no body.
    assert read_poll(scope_of(content_length="0", **KEY)) == Poll(None, "sp_k", '"t"')


@pytest.mark.parametrize(
    "scope",
    [
        scope_of(method="HEAD", **KEY),
        scope_of(method="POST", **KEY),
        scope_of(query=b"revision=3", **KEY),
        scope_of("/v1/flags/", **KEY),
        scope_of("/v1/flags/stream", **KEY),
        scope_of(f"/v1/flags/{TASK}/history", **KEY),
        scope_of("/v1/flagsx", **KEY),
        scope_of("/v1/ofrep/v1/evaluate/flags", **KEY),
        scope_of("/v1/flags/a\x00b", **KEY),
        scope_of(authorization="Bearer sp_k"),  # no If-None-Match
        scope_of(if_none_match='"t"'),  # no key
        scope_of(authorization="Bearer ", x_api_key="sp_x", if_none_match='"t"'),
        scope_of(authorization="Basic c3A6aw==", if_none_match='"t"'),
        scope_of(content_length="2", **KEY),
        scope_of(transfer_encoding="chunked", **KEY),
        scope_of(content_type="application/json", **KEY),
        {**scope_of(**KEY), "root_path": "/api"},
        # FastAPI's OpenTelemetry records this request: it needs the route matched.
        {**scope_of(**KEY), "fastapi.telemetry": object()},
    ],
)
def test_anything_else_is_left_to_the_route(scope: dict[str, Any]) -> None:
    assert read_poll(scope) is None


def test_its_headers_are_those_starlette_renders_for_the_route() -> None:
    for stale in (None, 0.0, 12.7):
        headers = cache_headers('"abc"', stale)
        assert raw_headers(headers) == Response(status_code=304, headers=headers).raw_headers
    assert raw_headers(cache_headers('"abc"', 12.7)) == [
        (b"etag", b'"abc"'),
        (b"cache-control", b"no-cache"),
        (b"x-shadowplane-stale", b"12"),
    ]


# --- through the application ------------------------------------------------------------


def test_a_conditional_poll_is_answered_before_routing_as_the_route_answers(
    api: Api, log_lines: list[dict[str, Any]]
) -> None:
    for path in ("/v1/flags", f"/v1/flags/{TASK}"):
        tag = poll(api, path, None).headers["etag"]
        for variant in (tag, f'W/"nope", W/{tag}', "*"):
            before = answered(api)
            fast = poll(api, path, variant)
            assert answered(api) == before + 1, (path, variant)
            slow = poll(api, path + ROUTE, variant)
            assert answered(api) == before + 1
            assert fast.status_code == 304 and fast.content == b""
            same_answer(fast, slow)
        # The key in X-API-Key, as the route takes it.
        keyed = api.client.get(
            path, headers={"X-API-Key": api.keys["flags:read"], "If-None-Match": tag}
        )
        assert keyed.status_code == 304 and answered(api) == before + 2
    # The request log has the same line for both: the key's name, the path, the 304.
    polls = [
        (line["method"], line["path"], line["status"], line["key"])
        for line in log_lines
        if line["status"] == 304
    ]
    assert polls[:2] == [("GET", "/v1/flags", 304, "flags:read-key")] * 2


def test_keys_scopes_and_changed_flags_get_the_routes_answers(api: Api) -> None:
    tag = poll(api, "/v1/flags", None).headers["etag"]
    one_tag = poll(api, f"/v1/flags/{TASK}", None).headers["etag"]
    cases: list[tuple[str, dict[str, str], int]] = [
        ("/v1/flags", {"Authorization": "Bearer sp_made_up"}, 401),
        ("/v1/flags", api.headers("ingest"), 403),
        ("/v1/flags", api.headers("review"), 403),
        ("/v1/flags", {}, 401),
        ("/v1/flags/nope", api.headers("flags:read"), 404),
        # Another resource's tag: the body, with its own.
        (f"/v1/flags/{TASK}", api.headers("flags:read"), 200),
    ]
    for path, headers, status in cases:
        sent = {**headers, "If-None-Match": tag}
        fast, slow = api.client.get(path, headers=sent), api.client.get(path + ROUTE, headers=sent)
        assert fast.status_code == status, (path, fast.text)
        same_answer(fast, slow)
    assert answered(api) == 0
    # An admin key holds every scope: answered here.
    assert poll(api, "/v1/flags", tag, scope="admin").status_code == 304
    assert answered(api) == 1

    # A change: the old tags get the new bodies, as from the route; the new ones, 304 here.
    admin = api.headers()
    rolled = api.client.post(f"/v1/tasks/{TASK}/rollback", json={"reason": "x"}, headers=admin)
    assert rolled.status_code == 200
    for path, old in (("/v1/flags", tag), (f"/v1/flags/{TASK}", one_tag)):
        before = answered(api)
        fast, slow = poll(api, path, old), poll(api, path + ROUTE, old)
        assert fast.status_code == 200 and fast.headers["etag"] != old
        same_answer(fast, slow)
        assert answered(api) == before
        assert poll(api, path, fast.headers["etag"]).status_code == 304
        assert answered(api) == before + 1


@pytest.fixture
def quick_keys_api(sqlite_url: str) -> Iterator[Api]:
    """Its key snapshot is read again every 0.2 s."""
    yield from make_api(sqlite_url, key_cache_seconds=0.2)


def test_a_revoked_key_stops_as_at_the_route(quick_keys_api: Api) -> None:
    api = quick_keys_api
    tag = poll(api, "/v1/flags", None).headers["etag"]
    assert poll(api, "/v1/flags", tag).status_code == 304 and answered(api) == 1
    with session_scope(api.engine) as session:
        revoke_key(session, name="flags:read-key", actor="test")
    # Served from the key snapshot until it is read again (0.2 s), here as at the route.
    wait_until(lambda: poll(api, "/v1/flags", tag).status_code == 401, "the key to stop")
    stopped = answered(api)
    fast, slow = poll(api, "/v1/flags", tag), poll(api, "/v1/flags" + ROUTE, tag)
    assert fast.status_code == 401
    same_answer(fast, slow)
    assert answered(api) == stopped


def test_the_rate_counts_each_poll_once_wherever_it_is_answered(sqlite_url: str) -> None:
    # Four tokens, then about one every 1,000 s: nothing refills during the test.
    for api in make_api(sqlite_url, rate_flags_per_second=0.001, rate_flags_burst=4):
        tag = poll(api, "/v1/flags", None).headers["etag"]  # token 1, the route (a 200)
        assert poll(api, "/v1/flags", tag).status_code == 304  # token 2, here
        assert poll(api, "/v1/flags", '"old"').status_code == 200  # token 3, the route
        assert poll(api, "/v1/flags", tag).status_code == 304  # token 4, here
        assert answered(api) == 2
        # The fifth is over the rate: today's 429, from the route, wherever it is asked.
        fast, slow = poll(api, "/v1/flags", tag), poll(api, "/v1/flags" + ROUTE, tag)
        assert fast.status_code == 429, fast.text
        assert "SHADOWPLANE_RATE_FLAGS_PER_SECOND" in fast.json()["detail"]
        assert int(fast.headers["Retry-After"]) >= 900
        same_answer(fast, slow)
        assert answered(api) == 2


def test_a_rate_shared_through_redis_is_answered_here_only_from_a_lease(
    sqlite_url: str, redis_url: Callable[[], str]
) -> None:
    # A lease of min(burst // 20, rate / 20) = 5 tokens per trip to Redis.
    shared = {"redis_url": redis_url(), "rate_flags_per_second": 100, "rate_flags_burst": 100}
    for api in make_api(sqlite_url, **shared):
        tag = poll(api, "/v1/flags", None).headers["etag"]  # the route: Redis, 4 leased
        assert poll(api, "/v1/flags", tag).status_code == 304
        assert answered(api) == 1  # from the lease, in memory
        statuses = [poll(api, "/v1/flags", tag).status_code for _ in range(8)]
        assert statuses == [304] * 8
        # Three more from the lease, then the route takes the next lease from Redis: 8
        # polls never all answered here (each lease lasts a second at most).
        assert 1 < answered(api) < 9

"""README, "HTTP API": every endpoint but `/healthz`, `/readyz` and the API's own description
needs a key; the main endpoints' table gives the scope each needs (`admin` holds all of
them, a key of another scope gets 403); `/metrics` takes any key; failed authentications
are counted per TCP peer, whatever `X-Forwarded-For` says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.auth.scopes import SCOPES
from tests.conftest import Api, make_api, make_result

# Open without a key: the health checks, and the API's description of itself.
OPEN = {"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}

PATH_VALUES = {
    "task": "ticket_classify",
    "key": "ticket_classify",
    "request_id": "r-1",
    "item_id": "1",
    "alert_id": "1",
    "layer": "regression",
}

# README's table of the main endpoints, row by row: (method, path, the scope it names, or
# the scopes any one of which it takes).
README_TABLE: list[tuple[str, str, str | tuple[str, ...]]] = [
    ("POST", "/v1/results", "ingest"),
    ("GET", "/v1/flags", "flags:read"),
    ("GET", "/v1/tasks/{task}/windows", "read"),
    ("GET", "/v1/decisions", "read"),
    ("GET", "/v1/alerts", "read"),
    ("GET", "/v1/audit", "read"),
    ("POST", "/v1/tasks", "admin"),
    ("POST", "/v1/tasks/{task}/promote", "admin"),
    ("POST", "/v1/tasks/{task}/rollback", "admin"),
    ("POST", "/v1/tasks/{task}/rearm", "admin"),
    ("POST", "/v1/tasks/{task}/unblock", "admin"),
    ("POST", "/v1/kill", "admin"),
    ("POST", "/v1/kill/lift", "admin"),
    ("GET", "/v1/review/next", "review"),
    ("POST", "/v1/review/{item_id}/label", "review"),
    ("POST", "/v1/review/{item_id}/release", "review"),
    ("GET", "/v1/tasks/{task}/route-accuracy", "read"),
    ("GET", "/v1/tasks/{task}/calibration", "read"),
    ("GET", "/v1/tasks/{task}/review-agreement", "read"),
    ("POST", "/v1/evalsets/backfill", "review"),
    # Reviewers read the blind form, `read` keys the full one.
    ("GET", "/v1/evalsets", ("review", "read")),
    ("GET", "/v1/evalsets/{task}/{layer}", ("review", "read")),
    ("GET", "/v1/evalsets/{task}/runs", "read"),
    ("POST", "/v1/evalsets/{task}/runs", "read"),
    # "the flag key is the task" (OFREP), for a router's `flags:read` key.
    ("POST", "/ofrep/v1/evaluate/flags/{key}", "flags:read"),
]

BODIES: dict[str, Any] = {
    "/v1/results": make_result(request_id="r-1"),
    "/v1/tasks": {"task": "scope_probe", "comparator": {"kind": "exact"}},
    "/v1/review/{item_id}/label": {"verdict": "a_correct"},
    "/v1/review/{item_id}/release": {"reason": "probe"},
    "/ofrep/v1/evaluate/flags/{key}": {"context": {"targetingKey": "s-1"}},
}
REASONED = ("promote", "rollback", "rearm", "unblock", "kill", "lift", "backfill")


def concrete(path: str) -> str:
    for name, value in PATH_VALUES.items():
        path = path.replace("{" + name + "}", value)
    return path


def body_of(path: str) -> Any:
    if path in BODIES:
        return BODIES[path]
    if path.endswith(REASONED):
        return {"reason": "probe", "model": "small@3"}
    return {}


def call(api: Api, method: str, path: str, headers: dict[str, str]) -> int:
    url = concrete(path)
    if method == "GET":
        return api.client.get(url, headers=headers).status_code
    return api.client.request(method, url, json=body_of(path), headers=headers).status_code


@pytest.fixture
def scoped_api(db_url: str) -> Iterator[Api]:
    # Rates off ("a rate of 0 turns that limit off"): the test calls every endpoint with
    # every key, and with made-up ones.
    rates = {f"rate_{s}_per_second": 0 for s in ("ingest", "flags", "read", "review", "admin")}
    yield from make_api(db_url, auth_failures_per_minute=0, **rates)


def operations(api: Api) -> list[tuple[str, str]]:
    """Every operation the API describes, as (METHOD, path template)."""
    document = api.client.get("/openapi.json").json()
    return [
        (method.upper(), path)
        for path, ops in document["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_every_endpoint_but_the_health_checks_needs_a_key(scoped_api: Api) -> None:
    api = scoped_api
    seen = operations(api)
    assert len(seen) >= 35, seen  # the whole API, not a part of it
    refused = {}
    for method, path in seen:
        if path in OPEN:
            continue
        for headers in ({}, {"Authorization": "Bearer sp_made_up"}):
            refused[(method, path, bool(headers))] = call(api, method, path, headers)
    assert {k: v for k, v in refused.items() if v != 401} == {}
    for path in OPEN:
        assert api.client.get(path).status_code == 200, path


def test_every_row_of_the_readme_table_is_refused_to_the_other_scopes(scoped_api: Api) -> None:
    api = scoped_api
    described = set(operations(api))
    wrong: dict[tuple[str, str, str], int] = {}
    for method, path, scope in README_TABLE:
        assert (method, path) in described, (method, path)
        for held in SCOPES:
            status = call(api, method, path, api.headers(held))
            allowed = held in ((scope,) if isinstance(scope, str) else scope) + ("admin",)
            if allowed != (status not in (401, 403)):
                wrong[(method, path, held)] = status
    assert wrong == {}


def test_metrics_take_a_key_of_any_scope(scoped_api: Api) -> None:
    api = scoped_api
    for held in SCOPES:
        response = api.client.get("/metrics", headers=api.headers(held))
        assert response.status_code == 200, (held, response.text)
    assert api.client.get("/metrics").status_code == 401


def test_a_router_key_with_ingest_and_flags_read_does_what_the_client_needs(
    scoped_api: Api,
) -> None:
    """`keys create --scope ingest --scope flags:read`: the Python client's calls pass."""
    from controlplane.db import session_scope
    from controlplane.keys.service import create_key

    api = scoped_api
    with session_scope(api.engine) as session:
        _, key = create_key(
            session, name="router-eu", scopes=["ingest", "flags:read"], actor="test"
        )
    headers = {"Authorization": f"Bearer {key}"}
    assert api.client.get("/v1/flags", headers=headers).status_code == 200
    assert api.post_results(make_result(request_id="router-1")).status_code == 200
    assert (
        api.client.post(
            "/v1/results", json=make_result(request_id="router-2"), headers=headers
        ).status_code
        == 200
    )
    # And nothing an SRE does.
    assert api.client.get("/v1/tasks", headers=headers).status_code == 403
    assert api.client.post("/v1/kill", json={"reason": "x"}, headers=headers).status_code == 403


def test_failed_authentications_are_counted_per_peer_whatever_x_forwarded_for_says(
    db_url: str,
) -> None:
    for api in make_api(db_url, auth_failures_per_minute=5):
        for i in range(5):
            bad = {"Authorization": f"Bearer sp_made_up_{i}", "X-Forwarded-For": f"10.1.0.{i}"}
            assert api.client.get("/v1/tasks", headers=bad).status_code == 401
        # A sixth address written in the header is the same peer: refused.
        sixth = {"Authorization": "Bearer sp_made_up_6", "X-Forwarded-For": "10.1.0.6"}
        response = api.client.get("/v1/tasks", headers=sixth)
        assert response.status_code == 429, response.text
        assert "testclient" in response.json()["detail"]
        assert response.headers["Retry-After"].isdigit()

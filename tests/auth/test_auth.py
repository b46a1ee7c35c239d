"""Keys and scopes: hashed at rest, every scope rule, revocation within the cache window."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from controlplane.auth.service import hash_key
from controlplane.db import session_scope
from controlplane.keys.service import KeyCommandError, create_key, revoke_key
from controlplane.models import ApiKey
from tests.conftest import Api, make_api, make_result

# (method, path, scope it needs). Expected answers are written out, not derived.
ENDPOINTS = [
    ("POST", "/v1/results", "ingest"),
    ("GET", "/v1/results/ticket_classify/r-1", "read"),
    ("POST", "/v1/tasks", "admin"),
    ("GET", "/v1/tasks", "read"),
    ("GET", "/v1/tasks/ticket_classify", "read"),
    ("GET", "/v1/audit", "read"),
]
ALLOWED = {
    "ingest": {"POST /v1/results"},
    "flags:read": set(),
    "read": {
        "GET /v1/results/ticket_classify/r-1",
        "GET /v1/tasks",
        "GET /v1/tasks/ticket_classify",
        "GET /v1/audit",
    },
    # review does not include read: reviewers see results only through the blind queue.
    "review": set(),
    "admin": {f"{m} {p}" for m, p, _ in ENDPOINTS},
}
TASK_BODY = {
    "task": "ticket_classify",
    "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
}


def call(api: Api, method: str, path: str, headers: dict[str, str]) -> int:
    if method == "POST" and path == "/v1/results":
        return api.client.post(
            path, json=make_result(request_id="r-1"), headers=headers
        ).status_code
    if method == "POST":
        return api.client.post(path, json=TASK_BODY, headers=headers).status_code
    return api.client.get(path, headers=headers).status_code


@pytest.mark.parametrize("scope", list(ALLOWED))
def test_every_scope_rule(api: Api, scope: str) -> None:
    api.post_results(make_result(request_id="r-1"))
    for method, path, _ in ENDPOINTS:
        status = call(api, method, path, api.headers(scope))
        if f"{method} {path}" in ALLOWED[scope]:
            assert status in (200, 201), (scope, method, path, status)
        else:
            assert status == 403, (scope, method, path, status)


def test_a_key_may_hold_several_scopes(api: Api) -> None:
    with session_scope(api.engine) as session:
        _, key = create_key(session, name="router", scopes=["ingest", "read"], actor="test")
    headers = {"Authorization": f"Bearer {key}"}
    assert call(api, "POST", "/v1/results", headers) == 200
    assert call(api, "GET", "/v1/tasks", headers) == 200
    assert call(api, "POST", "/v1/tasks", headers) == 403


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer sp_made_up"}, {"Authorization": "Basic eA=="}]
)
def test_no_valid_key_is_401(api: Api, headers: dict[str, str]) -> None:
    for method, path, _ in ENDPOINTS:
        assert call(api, method, path, headers) == 401


def test_health_checks_need_no_key(api: Api) -> None:
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/readyz").json()["checks"]["database"] == "ok"


def test_keys_are_stored_hashed(api: Api) -> None:
    with api.engine.connect() as conn:
        stored = conn.execute(select(ApiKey.key_hash, ApiKey.prefix)).all()
    plaintexts = set(api.keys.values())
    assert {h for h, _ in stored} >= {hash_key(k) for k in plaintexts}
    for key_hash, prefix in stored:
        assert key_hash not in plaintexts and len(key_hash) == 64
        assert len(prefix) < 16


def test_key_is_32_random_bytes() -> None:
    from controlplane.keys.service import generate_key

    keys = {generate_key() for _ in range(100)}
    assert len(keys) == 100
    assert all(k.startswith("sp_") and len(k) == 3 + 43 for k in keys)


def test_bad_key_commands_name_the_field(api: Api) -> None:
    with (
        session_scope(api.engine) as session,
        pytest.raises(KeyCommandError, match="scope: .*'superuser'"),
    ):
        create_key(session, name="x", scopes=["superuser"], actor="test")
    with (
        session_scope(api.engine) as session,
        pytest.raises(KeyCommandError, match="name: a key named"),
    ):
        create_key(session, name="admin-key", scopes=["read"], actor="test")


@pytest.fixture
def quick_api(db_url: str) -> Iterator[Api]:
    yield from make_api(db_url, key_cache_seconds=0.3)


def test_revoked_key_stops_within_the_cache_window(quick_api: Api) -> None:
    api = quick_api
    assert call(api, "GET", "/v1/tasks", api.headers("read")) == 200
    with session_scope(api.engine) as session:
        revoke_key(session, name="read-key", actor="test")
    time.sleep(0.4)
    assert call(api, "GET", "/v1/tasks", api.headers("read")) == 401
    # Other keys are untouched.
    assert call(api, "GET", "/v1/tasks", api.headers("admin")) == 200


def test_default_cache_window_is_five_seconds() -> None:
    from controlplane.settings import Settings

    assert Settings().key_cache_seconds == 5.0

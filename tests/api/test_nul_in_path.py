"""NUL in a path or a query answers 422 everywhere: PostgreSQL cannot compare text holding
it, so a lookup by such a name failed in the database (a 500) instead of finding nothing."""

from __future__ import annotations

import pytest

from tests.conftest import Api

PATHS = [
    ("GET", "/v1/results/ticket_classify/%00", "read"),
    ("GET", "/v1/results/%00/x", "read"),
    ("GET", "/v1/flags/%00", "flags:read"),
    ("GET", "/v1/tasks/%00", "read"),
    ("GET", "/v1/tasks/%00/windows", "read"),
    ("GET", "/v1/alerts?task=%00", "read"),
    ("GET", "/v1/audit?actor=%00", "read"),
    ("GET", "/v1/decisions?task=%00", "read"),
    ("POST", "/v1/tasks/a%00b/rollback", "admin"),
]


@pytest.mark.parametrize(("method", "path", "scope"), PATHS)
def test_nul_in_a_path_or_query_is_a_422(api: Api, method: str, path: str, scope: str) -> None:
    response = api.client.request(
        method, path, headers=api.headers(scope), json={"reason": "x"} if method == "POST" else None
    )
    assert response.status_code == 422, response.text
    assert "NUL" in response.text

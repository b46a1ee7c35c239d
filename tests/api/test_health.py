"""Health checks: /healthz always answers; /readyz checks storage and, when configured, Redis."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import make_api

pytestmark = pytest.mark.integration


def test_readyz_checks_redis_when_configured(pg_url: str, redis_url: Callable[[], str]) -> None:
    for api in make_api(pg_url, redis_url=redis_url()):
        ready = api.client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {
            "status": "ok",
            "checks": {"database": "ok", "schema": "ok", "redis": "ok"},
        }


def test_readyz_fails_when_redis_is_unreachable(pg_url: str) -> None:
    for api in make_api(pg_url, redis_url="redis://127.0.0.1:1/0"):
        ready = api.client.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        assert body["checks"]["database"] == "ok"
        assert body["checks"]["redis"].startswith("error")
        assert api.client.get("/healthz").status_code == 200


def test_readyz_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from controlplane.api import create_app
    from controlplane.settings import Settings

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}"))
    with TestClient(app) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["schema"].startswith("at nothing, code needs [")
    assert ready.json()["checks"]["schema"].endswith("run shadowplane migrate")


def test_openapi_documents_the_result_body(pg_url: str) -> None:
    for api in make_api(pg_url):
        schema = api.client.get("/openapi.json").json()
        body = schema["paths"]["/v1/results"]["post"]["requestBody"]["content"]["application/json"]
        # A batch, one result, or any object naming a request_id (answered in `rejected`).
        batch, one, other = body["schema"]["anyOf"]
        assert batch == {"$ref": "#/components/schemas/ResultBatch"}
        assert one["allOf"] == [{"$ref": "#/components/schemas/ResultIn"}]
        assert other["required"] == ["request_id"]
        assert one["not"] == other["not"] == {"required": ["results"]}
        components = schema["components"]["schemas"]
        results = components["ResultBatch"]["properties"]["results"]
        assert results["maxItems"] == 1000
        assert {"$ref": "#/components/schemas/ResultIn"} in results["items"]["anyOf"]
        assert set(components["ResultIn"]["required"]) == {
            "request_id",
            "task",
            "input_tokens",
            "decision",
            "served",
        }
        assert "EdgeSideIn" in components and "SideIn" in components


def test_without_redis_the_api_runs_the_periodic_pass_itself(sqlite_url: str) -> None:
    from datetime import UTC, datetime

    from tests.conftest import make_result
    from tests.windowdata import post_all

    now = datetime.now(UTC)
    for api in make_api(sqlite_url, tick_seconds=0.2):
        assert api.client.app.state.scheduler is not None  # type: ignore[attr-defined]
        post_all(api, [make_result(request_id=f"s-{i}", ts=now.isoformat()) for i in range(7)])
        deadline = time.monotonic() + 30
        rows: list[dict] = []
        while time.monotonic() < deadline and not rows:
            rows = [
                w
                for w in api.client.get(
                    "/v1/tasks/ticket_classify/windows",
                    params={"bucket": "all"},
                    headers=api.headers("read"),
                ).json()["windows"]
                if w["n_results"] == 7
            ]
            time.sleep(0.1)
        assert rows, "no pass ran in the API process"

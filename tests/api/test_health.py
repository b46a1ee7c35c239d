"""Health checks: /healthz always answers; /readyz checks storage and, when configured, Redis."""

from __future__ import annotations

import os

import pytest

from tests.conftest import make_api

pytestmark = pytest.mark.integration


def redis_url() -> str:
    url = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
    if not url:
        pytest.fail("SHADOWPLANE_TEST_REDIS_URL is not set: run the suite with scripts/test")
    return url


def test_readyz_checks_redis_when_configured(pg_url: str) -> None:
    for api in make_api(pg_url, redis_url=redis_url()):
        ready = api.client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


def test_readyz_fails_when_redis_is_unreachable(pg_url: str) -> None:
    for api in make_api(pg_url, redis_url="redis://127.0.0.1:1/0"):
        ready = api.client.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        assert body["checks"]["database"] == "ok"
        assert body["checks"]["redis"].startswith("error")
        assert api.client.get("/healthz").status_code == 200

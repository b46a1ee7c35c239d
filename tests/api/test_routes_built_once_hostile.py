"""What adding each router's import-time routes to the app (controlplane.api._add_routes)
loses against FastAPI's include_router: found by a hostile review of 1d85370, each fixed."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException
from fastapi.testclient import TestClient

from controlplane import api
from controlplane.api import create_app
from controlplane.http import api_router
from controlplane.rollout import ofrep
from controlplane.settings import Settings


def test_the_apps_dependency_overrides_reach_a_routers_route(sqlite_url: str) -> None:
    app = create_app(Settings(database_url=sqlite_url, tick_seconds=0))

    async def teapot() -> None:
        raise HTTPException(418, "overridden")

    app.dependency_overrides[ofrep._ofrep_reader] = teapot
    with TestClient(app) as client:
        answer = client.post("/ofrep/v1/evaluate/flags", json={"context": {}})
    assert answer.status_code == 418, answer.text


def test_a_router_with_a_shutdown_handler_is_refused() -> None:
    router = api_router("/v1/hostile", tag="hostile")
    router.add_event_handler("shutdown", lambda: None)
    with pytest.raises(ValueError, match="not made by controlplane.http.api_router"):
        api._add_routes(FastAPI(), router)


def _with_dependency(router: APIRouter) -> None:
    router.dependencies.append(Depends(lambda: None))


def _with_router(router: APIRouter) -> None:
    inner = api_router("/inner", tag="inner")

    @inner.get("/x")
    def x() -> dict[str, int]:
        return {"x": 1}

    router.include_router(inner)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_with_dependency, "dependencies"),
        (lambda r: r.responses.update({418: {"description": "tea"}}), "responses"),
        (_with_router, "routers or routes of other kinds"),
        (lambda r: r.add_event_handler("startup", lambda: None), "start-up handlers"),
    ],
)
def test_a_router_holding_more_for_include_router_is_refused_naming_it(
    change: Callable[[APIRouter], None], named: str
) -> None:
    router = api_router("/v1/hostile", tag="hostile")
    change(router)
    with pytest.raises(ValueError, match=re.escape(named)):
        api._add_routes(FastAPI(), router)

"""The app's routes are the ones its routers built at import, added as they are: FastAPI's
include_router would build each again for every app, on that app's first request (about
60 ms of CPU; the suite starts hundreds of apps). Nothing include_router gives is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from controlplane import api
from controlplane.api import create_app
from controlplane.http import ORJSONResponse
from controlplane.settings import Settings


def _routers() -> list[APIRouter]:
    return [value for value in vars(api).values() if isinstance(value, APIRouter)]


def _included_as_fastapi_does() -> FastAPI:
    reference = FastAPI(default_response_class=ORJSONResponse)
    for router in _routers():
        reference.include_router(router)
    return reference


def _built(app: FastAPI) -> dict[tuple[str, frozenset[str]], APIRoute]:
    """Each API route of the app by path and methods, as it answers a request."""
    routes: dict[tuple[str, frozenset[str]], APIRoute] = {}
    for route in app.router.routes:
        effective = getattr(route, "effective_candidates", None)
        for found in effective() if effective else [route]:
            if isinstance(found, APIRoute) or hasattr(found, "response_class"):
                routes[(found.path, frozenset(found.methods))] = found
    return routes


def _dependencies(route: APIRoute) -> list[tuple[str, str, tuple[object, ...]]]:
    """What each dependency of the route calls: its function, and what it closes over (the
    scope `require` was given)."""
    return [
        (
            d.name or "",
            getattr(d.call, "__qualname__", repr(d.call)),
            tuple(
                getattr(value, "__qualname__", value)
                for value in (c.cell_contents for c in getattr(d.call, "__closure__", None) or ())
            ),
        )
        for d in route.dependant.dependencies
    ]


def test_every_route_of_an_app_is_the_one_built_at_import(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}"))
    built_at_import = {id(route) for router in _routers() for route in router.routes}
    api_routes = [r for r in app.router.routes if r.path not in ("/healthz", "/readyz")]
    from_routers = [r for r in api_routes if isinstance(r, APIRoute)]
    assert from_routers, "no API route found"
    # Every route of every router is there, as it was built.
    assert sorted(id(route) for route in from_routers) == sorted(built_at_import)


def test_each_route_answers_as_it_would_when_included(tmp_path: Path) -> None:
    """Same paths and methods, names, response classes, status codes and dependencies as
    include_router gives, and the same schema."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}"))
    reference = _included_as_fastapi_does()
    with TestClient(reference) as client:
        client.get("/nowhere")  # include_router builds its routes on the first request
    ours, theirs = _built(app), _built(reference)
    theirs = {k: v for k, v in theirs.items() if k[0] not in ("/healthz", "/readyz")}
    ours = {k: v for k, v in ours.items() if k[0] not in ("/healthz", "/readyz")}
    assert set(ours) == set(theirs)
    for key, route in ours.items():
        other = theirs[key]
        assert (route.name, route.response_class, route.status_code) == (
            other.name,
            other.response_class,
            other.status_code,
        ), key
        assert _dependencies(route) == _dependencies(other), key
    assert (
        app.openapi()["paths"].keys() - {"/healthz", "/readyz"}
        == reference.openapi()["paths"].keys()
    )


def test_a_router_not_made_for_the_api_is_refused() -> None:
    plain = APIRouter(prefix="/v1/plain")

    @plain.get("/x")
    def x() -> dict[str, int]:
        return {"x": 1}

    with pytest.raises(ValueError, match="/v1/plain: not made by controlplane.http.api_router"):
        api._add_routes(FastAPI(), plain)

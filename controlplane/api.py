"""The FastAPI application: routers, middleware, health checks and error mapping."""

from __future__ import annotations

import gc
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.routing import Match

from controlplane.alerts.endpoints import router as alerts_router
from controlplane.audit.endpoints import router as audit_router
from controlplane.auth.ratelimit import RateLimiter
from controlplane.auth.service import KeyCache
from controlplane.catalog.endpoints import router as tasks_router
from controlplane.catalog.schemas import TaskConfig
from controlplane.compare import native
from controlplane.compare.jsonutil import short_repr
from controlplane.db import get_engine, make_sessionmaker
from controlplane.errors import MAX_PROBLEMS, ActionError, field_path, first_problems
from controlplane.evalsets.endpoints import router as evalsets_router
from controlplane.evalsets.schemas import RunIn
from controlplane.exporter import router as exporter_router
from controlplane.grading.endpoints import router as grading_router
from controlplane.http import (
    HEAD_MARK,
    SERVING_APP,
    TOO_MANY_DIGITS,
    BodyGuard,
    BodyRefused,
    HeadAsGet,
    ORJSONResponse,
    RequestLog,
    api_router,
    is_json,
    log,
    too_many_digits,
)
from controlplane.ingest.endpoints import router as results_router
from controlplane.ingest.schemas import ResultBatch, ResultIn
from controlplane.logs import configure_logging, noticed
from controlplane.metrics.counters import IngestCounters
from controlplane.metrics.endpoints import router as windows_router
from controlplane.migrate import current_revisions, head_revisions
from controlplane.notify.delivery import DeliveryThread, add_kicker, celery_kicker
from controlplane.notify.endpoints import router as webhooks_router
from controlplane.params import JSON_VALUE_MARK, JSON_VALUE_REF, NO_NUL_PATTERN
from controlplane.review.accuracy_endpoints import router as accuracy_router
from controlplane.review.endpoints import router as review_router
from controlplane.rollout.endpoints import (
    catalog_router,
    decisions_router,
    kill_router,
)
from controlplane.rollout.endpoints import router as flags_router
from controlplane.rollout.endpoints import (
    tasks_router as rollout_router,
)
from controlplane.rollout.flagcopy import FlagCopy, NoFlagsYet
from controlplane.rollout.flagpolls import FastPolls, FlagPolls
from controlplane.rollout.ofrep import router as ofrep_router
from controlplane.scheduler import InProcessScheduler
from controlplane.settings import Settings, get_settings

STORAGE_RETRY_SECONDS = 5


class HealthOut(BaseModel):
    status: str


class ReadyOut(BaseModel):
    """`ok`, or `unavailable` (503) with what failed: database, schema, redis."""

    status: str
    checks: dict[str, str]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_level)
    app = FastAPI(
        title="Shadowplane",
        version="0.1.0",
        default_response_class=ORJSONResponse,
        lifespan=_lifespan,
    )
    engine = get_engine(settings.database_url)
    app.state.settings = settings
    app.state.engine = engine
    app.state.keys = KeyCache(make_sessionmaker(engine), settings.key_cache_seconds)
    app.state.limiter = RateLimiter(settings)
    app.state.counters = IngestCounters(settings.redis_url)
    app.state.schema_heads = head_revisions()
    # Flags are answered from this copy (loaded at start-up, then following the revision).
    app.state.flag_copy = FlagCopy(
        engine, redis_url=settings.redis_url, check_seconds=settings.flag_check_seconds
    )
    # Added first, so it runs inside the log (which then records its 413s and 422s) and
    # before routing, body parsing and authentication.
    app.add_middleware(
        BodyGuard,
        max_bytes=settings.max_body_bytes,
        # Ingest reads its own body item by item; it is the hot path, not scanned twice.
        unchecked_paths=(results_router.prefix,),
        small_bytes=settings.max_small_body_bytes,
        bulk_paths=BULK_PATHS,
    )
    # Conditional flag polls are answered here, inside the log and before anything else
    # (controlplane.rollout.flagpolls); every other request passes through.
    app.state.fast_polls = FastPolls()
    app.add_middleware(FlagPolls, counts=app.state.fast_polls)
    # HEAD as GET without its body, inside the log (which records it as HEAD).
    app.add_middleware(HeadAsGet)
    app.add_middleware(RequestLog)
    # Routes are matched in this order, each miss costing tens of microseconds: the flag
    # polls and evaluations, the hottest requests, are matched first.
    _add_routes(
        app,
        flags_router,
        ofrep_router,
        catalog_router,
        tasks_router,
        results_router,
        audit_router,
        windows_router,
        alerts_router,
        exporter_router,
        rollout_router,
        decisions_router,
        kill_router,
        webhooks_router,
        review_router,
        accuracy_router,
        evalsets_router,
        grading_router,
    )

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]

    @app.exception_handler(BodyRefused)
    async def refused(_: Request, exc: BodyRefused) -> ORJSONResponse:
        detail = exc.detail if exc.status == 413 else [exc.detail]
        return ORJSONResponse({"detail": detail}, status_code=exc.status)

    @app.exception_handler(ActionError)
    async def action_refused(_: Request, exc: ActionError) -> ORJSONResponse:
        # An action that cannot be done, whichever it is: its status and why.
        return ORJSONResponse({"detail": exc.detail}, status_code=exc.status)

    @app.exception_handler(NoFlagsYet)
    async def no_flags_yet(_: Request, exc: NoFlagsYet) -> ORJSONResponse:
        # Only before the first copy was ever loaded: afterwards the last one is served.
        return ORJSONResponse(
            {"detail": str(exc)},
            status_code=503,
            headers={"Retry-After": str(STORAGE_RETRY_SECONDS)},
        )

    @app.exception_handler(RecursionError)
    async def too_deep(request: Request, exc: RecursionError) -> ORJSONResponse:
        # BodyGuard stops deep JSON before any parser; this catches what it does not read
        # (YAML configs, the ingest body), so depth never turns into a 500.
        log.warning(
            '{"event": "recursion_error", "method": "%s", "path": "%s"}',
            request.method,
            request.url.path,
        )
        return ORJSONResponse(
            {"detail": ["body: nested too deeply to read"]},
            status_code=422,
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeout)
    # The COPY path talks to psycopg directly: its errors arrive unwrapped.
    @app.exception_handler(psycopg.OperationalError)
    async def storage_down(_: Request, exc: Exception) -> ORJSONResponse:
        if not noticed(exc):  # an outage is logged once per process (controlplane.logs)
            log.warning('{"event": "storage_unavailable", "error": "%s"}', type(exc).__name__)
        return ORJSONResponse(
            {"detail": "storage unavailable; nothing from this request was stored, retry"},
            status_code=503,
            headers={"Retry-After": str(STORAGE_RETRY_SECONDS)},
        )

    @app.exception_handler(DataError)
    async def unstorable(_: Request, exc: DataError) -> ORJSONResponse:
        # A value the checks before the database let through and the database refuses (a
        # NUL character, a number out of a column's range): the client's data, not a fault.
        log.warning('{"event": "unstorable_value", "error": "%s"}', type(exc.orig).__name__)
        return ORJSONResponse(
            {"detail": ["body: holds a value the database cannot store (NUL or out of range)"]},
            status_code=422,
        )

    @app.exception_handler(DBAPIError)
    async def storage_error(request: Request, exc: DBAPIError) -> ORJSONResponse:
        if exc.connection_invalidated:
            return await storage_down(request, exc)
        raise exc

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> ORJSONResponse:
        every = exc.errors()
        errors = first_problems([_validation_error(e) for e in every[:MAX_PROBLEMS]], len(every))
        content_type = request.headers.get("content-type", "")
        body_refused = any(e["loc"][:1] == ("body",) for e in every)
        if body_refused and content_type and not is_json(content_type.lower().encode()):
            # FastAPI reads a body as JSON only under a JSON type: under another, whatever
            # the body says is "not an object", which names no reason.
            sent = short_repr(content_type, 80)
            errors = [
                f"content-type: the body was sent as {sent}; send JSON as application/json",
                *(e for e in errors if not e.startswith("body")),
            ]
        return ORJSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 400 and too_many_digits(exc.__cause__):
            return await invalid_request(request, RequestValidationError([TOO_MANY_DIGITS]))
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        # Starlette names the methods of the first route matching the path; routers that
        # share a path (GET and POST /v1/tasks) would each hide the others' methods.
        allowed = ", ".join(_methods_of(request))
        method = "HEAD" if request.scope.get(HEAD_MARK) else request.method
        return ORJSONResponse(
            {"detail": f"method: {method} is not allowed on this path; allowed: {allowed}"},
            status_code=405,
            headers={"Allow": allowed},
        )

    # Module-level functions, reading their app off the request: FastAPI keeps a cache of
    # the endpoint callables it has seen, and a closure over `app` there would keep every
    # app (its engine, pools and flag copy) alive after it stopped.
    app.add_api_route("/healthz", healthz, tags=["health"], response_model=HealthOut)
    app.add_api_route(
        "/readyz",
        readyz,
        tags=["health"],
        response_model=ReadyOut,
        responses={503: {"model": ReadyOut, "description": "Not ready: the checks say why."}},
    )

    return app


def _add_routes(app: FastAPI, *routers: APIRouter) -> None:
    """Each router's routes, added to the app as they were built at import. FastAPI's
    include_router would build every one of them again for each app, on its first request
    (about 60 ms of CPU an app: once a process in production, once a test in the suite).
    A router made by controlplane.http.api_router loses nothing include_router would give
    it: it answers with the app's response class and the serving app's dependency
    overrides; one that holds anything more for include_router to merge (event handlers,
    a lifespan, dependencies, responses, callbacks, a body limit, routers of its own) is
    refused."""
    for router in routers:
        refused = [
            what
            for what, held in (
                ("its response class", router.default_response_class is not ORJSONResponse),
                ("dependency overrides", router.dependency_overrides_provider is not SERVING_APP),
                ("start-up handlers", bool(router.on_startup)),
                ("shutdown handlers", bool(router.on_shutdown)),
                ("a lifespan", type(router.lifespan_context) is not _NO_LIFESPAN),
                ("dependencies", bool(router.dependencies)),
                ("responses", bool(router.responses)),
                ("callbacks", bool(router.callbacks)),
                ("a body limit", getattr(router, "max_body_size", None) is not None),
                (
                    "routers or routes of other kinds",
                    any(not isinstance(route, APIRoute) for route in router.routes),
                ),
            )
            if held
        ]
        if refused:
            raise ValueError(
                f"{router.prefix or '/'}: not made by controlplane.http.api_router "
                f"({', '.join(refused)})"
            )
        app.router.routes.extend(router.routes)


# What a router made by api_router holds as its lifespan: FastAPI's stand-in for none.
_NO_LIFESPAN = type(api_router(tag="_").lifespan_context)


async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


async def readyz(request: Request) -> ORJSONResponse:
    """Readiness: storage (and Redis, when configured) answer."""
    checks = await run_in_threadpool(_readiness, request.app)
    ok = all(v == "ok" for v in checks.values())
    return ORJSONResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks},
        status_code=200 if ok else 503,
    )


METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _methods_of(request: Request) -> list[str]:
    """Every method some route of the app answers on the request's path (HEAD where GET is:
    HeadAsGet)."""
    routes = request.app.router.routes
    return [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": "GET" if method == "HEAD" else method})[0]
            is Match.FULL
            for route in routes
        )
    ]


def _validation_error(error: Any) -> str:
    if error.get("type") == "json_invalid":
        position = error["loc"][-1]
        return f"body: not valid JSON ({error.get('ctx', {}).get('error')} at character {position})"
    where = ".".join(field_path(error["loc"]))
    message = error["msg"].removeprefix("Value error, ")
    if error["loc"][0] in ("path", "query") and error.get("type") != "missing":
        # A parameter's value is short and the client typed it: say which was refused.
        return f"{where}: {message} (got {short_repr(error.get('input'), 80)})"
    return f"{where}: {message}"


# Any JSON value a body may hold where its shape is free (an output, a correction).
JSON_VALUE: dict[str, Any] = {
    "description": "Any JSON value; no string in it, nor any key, holds the NUL character.",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL_PATTERN},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": {"$ref": JSON_VALUE_REF},
        },
    ],
}
# Every route but the health checks needs a key, sent either way (controlplane.auth).
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <key>"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
}
OPEN_PATHS = {"/healthz", "/readyz"}
# The routes whose bodies may reach SHADOWPLANE_MAX_BODY_BYTES: each reads its body after
# the key (results, configs) or off the event loop (runs); every other route's body is held
# to SHADOWPLANE_MAX_SMALL_BODY_BYTES. Spelt with a trailing slash, each is redirected (307,
# its body unread) to the route: a client following it must not meet a 413 there first.
BULK_PATHS = re.compile(r"(?:/v1/results|/v1/tasks|/v1/evalsets/[^/]+/runs)/?")


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema, plus the models the ingest and config endpoints validate
    themselves (results, task configs),
    the keys every route but the health checks needs, and the body guard's rule (no NUL in
    any text) on every string."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        documented = (
            ("ResultIn", ResultIn),
            ("ResultBatch", ResultBatch),
            ("TaskConfig", TaskConfig),
            ("RunIn", RunIn),
        )
        for name, model in documented:
            document = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
            components.update(document.pop("$defs", {}))
            components[name] = document
        # Each item of a batch is judged alone and answered (stored, or in `rejected` with
        # its reasons), so the batch takes any item; ResultIn says what is stored.
        components["ResultBatch"]["properties"]["results"].update(
            maxItems=app.state.settings.max_batch_items,
            items={"anyOf": [{"$ref": "#/components/schemas/ResultIn"}, {}]},
        )
        components["JsonValue"] = JSON_VALUE
        schema["components"]["securitySchemes"] = SECURITY_SCHEMES
        for path, item in schema["paths"].items():
            for operation in item.values():
                if path not in OPEN_PATHS:
                    operation["security"] = [{name: []} for name in SECURITY_SCHEMES]
        _without_nul(schema)
        app.openapi_schema = schema
    return app.openapi_schema


def _without_nul(node: Any) -> None:
    """Every free string of the document, parameters and bodies, and every key of a free
    mapping, holds no NUL: the body guard refuses it in a path, a query and a JSON body."""
    if isinstance(node, list):
        for inner in node:
            _without_nul(inner)
        return
    if not isinstance(node, dict):
        return
    if node.get(JSON_VALUE_MARK):
        node.clear()
        node["$ref"] = JSON_VALUE_REF
        return
    free = not {"pattern", "enum", "const", "format"} & node.keys()
    if node.get("type") == "string" and free:
        node["pattern"] = NO_NUL_PATTERN
    if node.get("additionalProperties") not in (None, False):
        node.setdefault("propertyNames", {"pattern": NO_NUL_PATTERN})
        if node["additionalProperties"] is True:
            node["additionalProperties"] = {"$ref": JSON_VALUE_REF}
    for key, inner in node.items():
        if key not in ("examples", "example", "default", "const", "enum"):
            _without_nul(inner)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    _freeze_startup_objects()
    settings: Settings = app.state.settings
    logging.getLogger("shadowplane").info(
        '{"event": "startup", "text_reader": "%s"} reading texts with %s',
        "native" if native.ACTIVE else "python",
        native.reader_name(),
    )
    flag_copy: FlagCopy = app.state.flag_copy
    await run_in_threadpool(flag_copy.start)
    scheduler = None
    if settings.redis_url is None and settings.tick_seconds > 0:
        # The embedded default has no Celery: this process runs the periodic pass itself.
        scheduler = InProcessScheduler(
            app.state.engine, settings.tick_seconds, veto=settings.error_cost_veto
        )
        scheduler.start()
    app.state.scheduler = scheduler
    # Webhooks leave through the outbox: a commit that wrote events kicks the runner.
    webhooks: DeliveryThread | None = None
    remove_kicker: Callable[[], None] | None = None
    if settings.webhook_url_list and settings.redis_url is not None:
        # The Celery job delivers; this process only wakes it after its own commits.
        remove_kicker = add_kicker(celery_kicker(settings.redis_url))
    elif settings.webhook_url_list:
        # The embedded default: this process delivers, every second and when kicked.
        webhooks = DeliveryThread(app.state.engine, settings)
        webhooks.start()
    app.state.webhooks = webhooks
    yield
    await run_in_threadpool(flag_copy.stop)
    if remove_kicker is not None:
        remove_kicker()
    if webhooks is not None:
        await run_in_threadpool(webhooks.stop)
    if scheduler is not None:
        await run_in_threadpool(scheduler.stop)


_frozen = False


def _freeze_startup_objects() -> None:
    """A full collection walks every object the imports created (~250k, 50-300 ms here);
    left alone, those pauses land on requests as p99 spikes. What exists at the first
    start-up is frozen, so the collector only walks what requests allocate. Once per
    process: frozen objects are never freed, and a later app (the tests start many) must
    stay collectable after it stops."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


def _readiness(app: FastAPI) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        with app.state.engine.connect() as conn:
            current = current_revisions(conn)
        checks["database"] = "ok"
        # A replica started against an unmigrated (or older) schema must not take traffic.
        checks["schema"] = (
            "ok"
            if current == app.state.schema_heads
            else f"at {sorted(current) or 'nothing'}, code needs {sorted(app.state.schema_heads)}: "
            "run shadowplane migrate"
        )
    except Exception as exc:  # any failure means not ready; say which
        checks["database"] = f"error: {type(exc).__name__}"
    redis_url = app.state.settings.redis_url
    if redis_url:
        import redis

        try:
            redis.Redis.from_url(redis_url, socket_timeout=1, socket_connect_timeout=1).ping()
            checks["redis"] = "ok"
        except Exception as exc:  # any client failure means not ready; say which
            checks["redis"] = f"error: {type(exc).__name__}"
    return checks

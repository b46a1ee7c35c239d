"""Result ingest endpoints (thin: read the body, call the service, answer)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Path, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.convertors import Convertor, register_url_convertor

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.catalog.service import task_or_404
from controlplane.db import in_transaction, session_scope
from controlplane.errors import error_responses
from controlplane.http import ORJSONResponse, api_router, read_body
from controlplane.ingest import repository, scoring, service, validation
from controlplane.ingest.schemas import IngestReport, ResultOut
from controlplane.models.base import utcnow
from controlplane.params import TaskName

router = api_router("/v1/results", tag="results")


class _AnyText(Convertor[str]):
    """A request id is any text but NUL (a slash, a newline too): one path parameter that
    takes the rest of the path, whatever it holds (Starlette's `path` stops at a newline)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("request_id", _AnyText())


@router.post(
    "",
    # Documented, not re-validated: the endpoint returns the report already rendered.
    response_model=IngestReport,
    responses=error_responses(401, 403, 413, 422, 429, 503),
    # The body is read and validated by the service (per item, so a bad item never sinks
    # the good ones); this only documents its shape in the OpenAPI schema: a batch, or one
    # result, which names itself (`request_id`). Either is answered item by item.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "anyOf": [
                            {"$ref": "#/components/schemas/ResultBatch"},
                            {
                                "description": "One result.",
                                "allOf": [{"$ref": "#/components/schemas/ResultIn"}],
                                "not": {"required": ["results"]},
                            },
                            {
                                "description": "Any other object naming a request_id is one "
                                "result too, answered in `rejected` with its reasons.",
                                "type": "object",
                                "required": ["request_id"],
                                "not": {"required": ["results"]},
                            },
                        ]
                    }
                }
            },
        }
    },
)
async def post_results(
    request: Request, _: Annotated[Principal, Depends(require("ingest"))]
) -> ORJSONResponse:
    """Ingest one result or {"results": [...]} (at most 1000); every item is answered."""
    started = time.perf_counter()
    settings = request.app.state.settings
    counters = request.app.state.counters
    body = await read_body(request, settings.max_body_bytes)

    def store() -> ORJSONResponse:
        received_at = utcnow()  # the `ts` bounds hold relative to this
        try:
            valid, rejected = validation.validate_body(body, settings.max_batch_items)
            context = scoring.IngestContext(
                id_hash_key=_id_hash_key(request.app),
                max_backfill=settings.max_backfill,
                max_chars=settings.compare_max_chars,
            )
            report = in_transaction(
                request.app.state.engine,
                lambda session: service.ingest(
                    session, valid, list(rejected), received_at, context
                ),
            )
        except Exception as exc:
            # A failed batch is timed too, under the status it is answered: the slowest
            # requests are those the database gave up on (a lock or statement timeout).
            seconds = time.perf_counter() - started
            counters.add(accepted=0, duplicate=0, rejected=0, seconds=seconds, code=failed(exc))
            raise
        # `altered` is answered only when an item was stored otherwise than posted.
        response = ORJSONResponse(
            report.model_dump(exclude=None if report.altered else {"altered"})
        )
        counters.add(
            accepted=report.accepted,
            duplicate=report.duplicates,
            rejected=len(report.rejected),
            seconds=time.perf_counter() - started,
        )
        return response

    try:
        return await run_in_threadpool(store)
    except validation.BodyError as exc:
        raise HTTPException(422, str(exc)) from None


def failed(exc: Exception) -> Literal["422", "500", "503"]:
    """The status a batch that raised `exc` is answered with (the API's error handlers):
    422 for a body or a value refused whole, 503 when storage is unavailable or gave up
    (nothing was stored, retry), else 500."""
    if isinstance(exc, validation.BodyError | DataError | RecursionError):
        return "422"
    if isinstance(exc, OperationalError | PoolTimeout | psycopg.OperationalError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return "503"
    return "500"


def _id_hash_key(app: FastAPI) -> bytes:
    """The key that hashes session and user ids, read once per app (the configured secret,
    else the one kept in the database)."""
    key: bytes | None = getattr(app.state, "id_hash_key", None)
    if key is None:
        with session_scope(app.state.engine) as session:
            key = service.id_hash_key(session, app.state.settings.id_hash_secret)
        app.state.id_hash_key = key
    return key


@router.get(
    "/{task}/{request_id:request_id}",
    response_model=ResultOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def get_result(
    task: TaskName,
    request_id: Annotated[str, Path(description="Any text but NUL, slashes included.")],
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
) -> ORJSONResponse:
    """A stored result with its bucket, comparison and the payload its policy kept."""
    with session_scope(request.app.state.engine) as session:
        view = repository.result_view(session, task, request_id)
        if view is None:
            # An unknown task is answered as every door answers it; only then the result.
            task_or_404(session, task)
            raise HTTPException(404, f"no result {request_id!r} for task {task!r}")
    return ORJSONResponse(view)

"""OFREP, the OpenFeature Remote Evaluation Protocol, on the routing flags (docs/http-api.md,
"OFREP"): any OpenFeature SDK with its OFREP provider asks, per request, edge or cloud.

The value is the side that serves, the variant says whether the edge runs beside the cloud,
the reason is the routing rule's (`controlplane.client.routing.evaluate`, the one rule every
door applies) and the metadata are the flag's fields. Answers come from this process's copy
of the flags (`app.state.flag_copy`), never from the database.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import Annotated, Any, Literal

import orjson
from fastapi import Depends, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from controlplane.auth.dependencies import require
from controlplane.auth.service import Principal
from controlplane.client.routing import evaluate
from controlplane.compare.jsonutil import dumps, short_repr
from controlplane.errors import ErrorOut, error_responses
from controlplane.http import BodyRefused, BodyTooLarge, api_router, read_body
from controlplane.ingest.schemas import MAX_ID_LENGTH
from controlplane.params import INT4_MAX, JSON_VALUE_REF
from controlplane.rollout.flagcopy import FlagSnapshot, NoFlagsYet
from controlplane.rollout.flags import etag, matches

router = api_router("/ofrep/v1", tag="ofrep")

# When no copy of the flags was ever loaded and storage is down (nothing to answer from).
NO_FLAGS_RETRY_SECONDS = 5
STALE_HEADER = "X-Shadowplane-Stale"

# What one evaluation may cost the event loop every request shares. Parsing JSON holds the
# interpreter (a body at the API's 16 MiB limit takes about a second when it is all small
# attributes), and the sticky bucket is pure Python, linear in the key (seconds for a key
# of megabytes). So an evaluation body is held to 64 KiB, far above any context routing
# reads (which also bounds its attributes to a few thousand: no count is needed), and
# targetingKey, session_id and user_id to MAX_ID_LENGTH characters, the longest id ingest
# stores. A single evaluation is then one parse of at most 64 KiB and one hash of at most a
# few hundred bytes, done on the loop. The bulk one hashes once per canary task, as many as
# there are tasks, so it runs in the threadpool, where the loop keeps its turns.
MAX_EVALUATION_BODY_BYTES = 64 * 1024

MetadataValue = bool | int | float | str


class EvaluationSuccess(BaseModel):
    """One flag evaluated: `value` is the side that serves this request."""

    key: str = Field(description="The task.")
    value: Literal["edge", "cloud"]
    variant: Literal["edge", "cloud", "shadow"] = Field(
        description="edge: the edge serves; shadow: the cloud serves and the edge runs beside "
        "it at the flag's shadow_rate; cloud: the cloud serves and nothing runs beside it."
    )
    reason: Literal["STATIC", "TARGETING_MATCH", "SPLIT", "DISABLED", "STALE", "ERROR"]
    metadata: dict[str, MetadataValue] = Field(
        description="The flag's fields (version, stage, edge_percent, sticky_by, "
        "max_input_tokens when capped, shadow_rate, killed, default_route, repeat_rate (absent "
        "from flags stored before it: read it as 0), updated_at, reason)."
    )
    cacheable: bool = Field(
        False, description="Always false: a rollback must reach the next evaluation."
    )


class EvaluationFailure(BaseModel):
    """One flag not evaluated: the caller routes to the cloud (its default value)."""

    key: str
    errorCode: Literal["PARSE_ERROR", "TARGETING_KEY_MISSING", "INVALID_CONTEXT", "GENERAL"]
    errorDetails: str = Field(description="The field and the reason.")


class FlagNotFound(BaseModel):
    """No flag for this task: route it to the cloud."""

    key: str
    errorCode: Literal["FLAG_NOT_FOUND"]
    errorDetails: str


class BulkEvaluationSuccess(BaseModel):
    """Every task's flag evaluated for one context, sorted by task."""

    flags: list[EvaluationSuccess | EvaluationFailure]


class BulkEvaluationFailure(BaseModel):
    """The request as a whole cannot be evaluated (its body or its context)."""

    errorCode: Literal["PARSE_ERROR", "INVALID_CONTEXT"]
    errorDetails: str = Field(description="The field and the reason.")


# The body is read here, not by FastAPI (its 422 is not OFREP's 400); this documents it.
_CONTEXT_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "The evaluation context (null: none). Other attributes are ignored, and "
    "an attribute that is null or an empty string is read as absent.",
    "additionalProperties": {"$ref": JSON_VALUE_REF},
    "properties": {
        "targetingKey": {
            "type": ["string", "null"],
            "maxLength": MAX_ID_LENGTH,
            "description": "The sticky key: the session id, or the user id for a flag with "
            "sticky_by user. Needed in canary only.",
        },
        "session_id": {
            "type": ["string", "null"],
            "maxLength": MAX_ID_LENGTH,
            "description": "Used when targetingKey is absent.",
        },
        "user_id": {
            "type": ["string", "null"],
            "maxLength": MAX_ID_LENGTH,
            "description": "Used when targetingKey is absent.",
        },
        "input_tokens": {
            "type": ["integer", "null"],
            "minimum": 0,
            "maximum": INT4_MAX,
            "description": "The request's input tokens; missing means cloud.",
        },
        "eligible": {
            "type": ["boolean", "null"],
            "description": "The router's own verdict; false means cloud (default true).",
        },
        "decision": {
            "enum": ["edge", "cloud", None],
            "description": "The router's own verdict, as it reports it; cloud means cloud.",
        },
    },
}
_REQUEST_BODY = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"context": _CONTEXT_SCHEMA},
                    # Other members are ignored.
                    "additionalProperties": {"$ref": JSON_VALUE_REF},
                }
            }
        },
    }
}
_STALE: dict[str, Any] = {
    STALE_HEADER: {
        "description": "Only when storage cannot be reached: whole seconds since this process "
        "last confirmed its copy of the flags (the answer comes from that copy).",
        "schema": {"type": "string"},
    }
}
_ETAG: dict[str, Any] = {
    "ETag": {
        "description": "A hash of the canonical answer: the same on every replica.",
        "schema": {"type": "string"},
    }
}


def _responses(answers: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """`answers` (OFREP's own, with the stale header), then the refusals every route gives."""
    documented = {
        code: {**answer, "headers": {**answer.get("headers", {}), **_STALE}}
        for code, answer in answers.items()
    }
    return {
        **documented,
        **error_responses(401, 403, 413, 422),
        429: {
            "model": ErrorOut,
            "description": "Past the key's rate (or too many failed keys from this address); "
            "Retry-After is the date to retry at, as an HTTP-date.",
        },
        **error_responses(503),
    }


class EvaluationTooLarge(BodyRefused):
    status = 413


async def read_evaluation_body(request: Request) -> bytes:
    """The body of an evaluation request, refused (413) past MAX_EVALUATION_BODY_BYTES (or
    the API's own limit, when lower) before any of it is parsed."""
    limit = min(MAX_EVALUATION_BODY_BYTES, request.app.state.settings.max_body_bytes)
    try:
        return await read_body(request, limit)
    except BodyTooLarge:
        raise EvaluationTooLarge(
            f"body: larger than the {limit}-byte limit of an evaluation request; send the "
            f"context routing reads (targetingKey, session_id and user_id hold at most "
            f"{MAX_ID_LENGTH} characters each)"
        ) from None


class Refused(Exception):
    """A request that cannot be evaluated: an OFREP error code and the field and reason."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Context:
    """What routing reads from an OFREP evaluation context."""

    targeting_key: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    input_tokens: int | None = None
    eligible: bool = True


def read_context(body: bytes) -> Context:
    """The context of an evaluation request; `Refused` with PARSE_ERROR for a body that is
    not a JSON object, INVALID_CONTEXT naming every context value that cannot be read."""
    if not body.strip():
        return Context()
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Refused("PARSE_ERROR", f"body: not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise Refused(
            "PARSE_ERROR",
            f"body: must be a JSON object with an optional 'context' object "
            f"(got {short_repr(document, 60)})",
        )
    context = document.get("context")
    if context is None:
        return Context()
    if not isinstance(context, dict):
        raise Refused(
            "INVALID_CONTEXT", f"context: must be an object (got {short_repr(context, 60)})"
        )
    problems: list[str] = []

    def text(name: str) -> str | None:
        value = context.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            problems.append(f"context.{name}: must be a string (got {short_repr(value, 60)})")
            return None
        if len(value) > MAX_ID_LENGTH:
            problems.append(
                f"context.{name}: at most {MAX_ID_LENGTH} characters, the longest session or "
                f"user id ingest stores (got {len(value)})"
            )
            return None
        return value

    targeting_key = text("targetingKey")
    session_id = text("session_id")
    user_id = text("user_id")
    tokens = context.get("input_tokens")
    input_tokens: int | None = None
    if tokens is not None:
        whole = (
            isinstance(tokens, int | float)
            and not isinstance(tokens, bool)
            and math.isfinite(tokens)
            and tokens == int(tokens)
            and tokens >= 0
        )
        if whole and tokens <= INT4_MAX:
            input_tokens = int(tokens)
        elif whole:
            problems.append(
                f"context.input_tokens: at most {INT4_MAX}, the most tokens a result counts "
                f"(got {short_repr(tokens, 60)})"
            )
        else:
            problems.append(
                "context.input_tokens: must be a whole number of tokens, 0 or more "
                f"(got {short_repr(tokens, 60)})"
            )
    eligible = True
    flag = context.get("eligible")
    if flag is not None:
        if isinstance(flag, bool):
            eligible = flag
        else:
            problems.append(f"context.eligible: must be true or false (got {short_repr(flag, 60)})")
    decision = context.get("decision")
    if decision is not None:
        if decision in ("edge", "cloud"):
            # Either verdict saying cloud keeps the request on the cloud.
            eligible = eligible and decision == "edge"
        else:
            problems.append(
                f"context.decision: must be 'edge' or 'cloud' (got {short_repr(decision, 60)})"
            )
    if problems:
        raise Refused("INVALID_CONTEXT", "; ".join(problems))
    return Context(targeting_key, session_id, user_id, input_tokens, eligible)


def metadata(flag: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """The flag's fields as OFREP metadata, whose values are booleans, numbers or strings:
    null fields are left out (no `max_input_tokens`: no cap), nested objects flattened with
    dotted names, anything else written as JSON text."""
    out: dict[str, MetadataValue] = {}

    def put(name: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool | int | str) or (
            isinstance(value, float) and math.isfinite(value)
        ):
            out[name] = value
        elif isinstance(value, Mapping):
            for key, inner in value.items():
                put(f"{name}.{key}", inner)
        else:
            out[name] = dumps(value, sort_keys=True).decode()

    for key, value in flag.items():
        put(str(key), value)
    return out


# How old this process's copy of the flags may be (storage unreachable) before OFREP
# answers cloud: the Python client's own bound (FlagClient's max_staleness). OFREP providers
# do not read X-Shadowplane-Stale, so the bound is kept here for them.
MAX_STALE_SECONDS = 600.0


def evaluate_flag(
    task: str, flag: Mapping[str, Any], context: Context, stale_seconds: float | None = None
) -> dict[str, Any]:
    """One flag for one context: an evaluation, or TARGETING_KEY_MISSING for a canary
    that needs a sticky key the context does not hold. From a copy older than
    MAX_STALE_SECONDS, cloud (reason STALE): a rollback or kill made since may not be in it."""
    if stale_seconds is not None and stale_seconds > MAX_STALE_SECONDS:
        return {
            "key": task,
            "value": "cloud",
            "variant": "cloud",
            "reason": "STALE",
            "metadata": metadata(flag),
            "cacheable": False,
        }
    result = evaluate(
        flag,
        task,
        session_id=context.session_id,
        user_id=context.user_id,
        input_tokens=context.input_tokens,
        eligible=context.eligible,
        key=context.targeting_key,
    )
    if result.key_missing:
        by = "user" if flag.get("sticky_by") == "user" else "session"
        return {
            "key": task,
            "errorCode": "TARGETING_KEY_MISSING",
            "errorDetails": f"context.targetingKey: missing; task {task!r} is in canary at "
            f"edge_percent {flag.get('edge_percent')} and splits requests by their {by} id: "
            f"send it as targetingKey (or context.{by}_id). Without one, route to the cloud",
        }
    return {
        "key": task,
        "value": result.served,
        "variant": result.variant,
        "reason": result.reason,
        "metadata": metadata(flag),
        "cacheable": False,
    }


_flags_read = require("flags:read")


async def _ofrep_reader(request: Request) -> Principal:
    """`flags:read` (Bearer or X-API-Key), with OFREP's Retry-After on a 429: the date to
    retry at, as an HTTP-date (the one date form HTTP clients and the OFREP providers read)."""
    try:
        return await _flags_read(request)
    except HTTPException as exc:
        if exc.status_code != 429 or not exc.headers or "Retry-After" not in exc.headers:
            raise
        seconds = int(exc.headers["Retry-After"])
        headers = {**exc.headers, "Retry-After": retry_at(seconds)}
        raise HTTPException(429, exc.detail, headers=headers) from None


def retry_at(seconds: float, now: float | None = None) -> str:
    """`Retry-After` as a date: `seconds` from now, rounded up to the whole second."""
    moment = math.ceil((time.time() if now is None else now) + seconds)
    return formatdate(moment, usegmt=True)


def _snapshot(request: Request) -> FlagSnapshot:
    try:
        snapshot: FlagSnapshot = request.app.state.flag_copy.snapshot()
    except NoFlagsYet:
        raise HTTPException(
            503,
            "flags: none loaded yet and storage unreachable; route everything to the cloud",
            headers={"Retry-After": retry_at(NO_FLAGS_RETRY_SECONDS)},
        ) from None
    return snapshot


def _headers(snapshot: FlagSnapshot) -> dict[str, str]:
    headers = {"Cache-Control": "no-cache"}
    if snapshot.stale_seconds is not None:
        # Storage is unreachable: the last copy still answers, and says how old it is.
        headers[STALE_HEADER] = str(int(snapshot.stale_seconds))
    return headers


def _json(document: Any, status: int, headers: dict[str, str]) -> Response:
    return Response(
        dumps(document, sort_keys=True),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


@router.post(
    "/evaluate/flags/{key}",
    response_model=EvaluationSuccess,
    responses=_responses(
        {
            200: {},
            400: {
                "model": EvaluationFailure,
                "description": "PARSE_ERROR (the body), INVALID_CONTEXT (a context value) or "
                "TARGETING_KEY_MISSING (a canary needs a sticky key).",
            },
            404: {"model": FlagNotFound, "description": "FLAG_NOT_FOUND: route to the cloud."},
        }
    ),
    openapi_extra=_REQUEST_BODY,
)
async def evaluate_one(
    key: str, request: Request, _: Annotated[Principal, Depends(_ofrep_reader)]
) -> Response:
    """OFREP single evaluation: edge or cloud for one task and one request's context."""
    body = await read_evaluation_body(request)
    snapshot = _snapshot(request)
    headers = _headers(snapshot)
    try:
        context = read_context(body)
    except Refused as exc:
        return _json({"key": key, "errorCode": exc.code, "errorDetails": exc.details}, 400, headers)
    flag = snapshot.flags.get(key)
    if flag is None:
        details = f"flag {key!r}: no task of that name has a flag; route it to the cloud"
        return _json(
            {"key": key, "errorCode": "FLAG_NOT_FOUND", "errorDetails": details}, 404, headers
        )
    answer = evaluate_flag(key, flag, context, snapshot.stale_seconds)
    return _json(answer, 400 if "errorCode" in answer else 200, headers)


@router.post(
    "/evaluate/flags",
    response_model=BulkEvaluationSuccess,
    responses=_responses(
        {
            200: {"headers": _ETAG},
            304: {
                "description": "Unchanged since the ETag sent in If-None-Match (no body).",
                "headers": _ETAG,
            },
            400: {
                "model": BulkEvaluationFailure,
                "description": "PARSE_ERROR (the body) or INVALID_CONTEXT (a context value).",
            },
        }
    ),
    openapi_extra=_REQUEST_BODY,
)
async def evaluate_all(
    request: Request, _: Annotated[Principal, Depends(_ofrep_reader)]
) -> Response:
    """OFREP bulk evaluation: every task for one context; ETag, and 304 for If-None-Match."""
    body = await read_evaluation_body(request)
    snapshot = _snapshot(request)
    headers = _headers(snapshot)
    try:
        context = read_context(body)
    except Refused as exc:
        return _json({"errorCode": exc.code, "errorDetails": exc.details}, 400, headers)
    # Off the event loop: its work grows with the number of tasks (MAX_EVALUATION_BODY_BYTES).
    answer = await run_in_threadpool(evaluate_every_flag, snapshot, context)
    headers["ETag"] = etag(answer)
    if matches(request.headers.get("if-none-match"), headers["ETag"]):
        return Response(status_code=304, headers=headers)
    return Response(answer, media_type="application/json", headers=headers)


def evaluate_every_flag(snapshot: FlagSnapshot, context: Context) -> bytes:
    """The canonical bulk answer: the same flags and context give the same bytes (and so
    the same ETag) on every replica."""
    stale = snapshot.stale_seconds
    flags = [
        evaluate_flag(task, snapshot.flags[task], context, stale) for task in sorted(snapshot.flags)
    ]
    return dumps({"flags": flags}, sort_keys=True)

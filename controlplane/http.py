"""HTTP plumbing shared by every router: the JSON response class, the body guard (size
limit before authentication, and bodies too deep or unreadable to parse), the one-line JSON
request log, and mapping storage outages to 503."""

from __future__ import annotations

import asyncio
import codecs
import email.message
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.dependencies.utils import request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.compare.jsonutil import dumps

log = logging.getLogger("shadowplane.http")

# Deeper than any config, label or action body needs, and far below the depth at which
# Python's parsers, pydantic or json.dumps raise RecursionError (about 1000).
MAX_BODY_DEPTH = 64


class ORJSONResponse(JSONResponse):
    """JSON via orjson (datetimes as ISO 8601)."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def api_router(prefix: str = "", *, tag: str) -> APIRouter:
    """A router of the API. Its routes answer with ORJSONResponse unless they say otherwise,
    as they are built here, at import: create_app adds them to each app as they are
    (controlplane.api), where FastAPI's include_router would build every route anew for
    each app on its first request. The app serving a request is found at request time, so
    its `dependency_overrides` still apply (SERVING_APP)."""
    return APIRouter(
        prefix=prefix,
        tags=[tag],
        default_response_class=ORJSONResponse,
        dependency_overrides_provider=SERVING_APP,
    )


class _ServingApp:
    """The dependency overrides of the app serving the current request: a route built once
    is shared by every app of the process, so it cannot hold one app as include_router's
    copies did. RequestLog, every app's outermost middleware, notes the app."""

    current: ContextVar[Any] = ContextVar("shadowplane_serving_app", default=None)

    @property
    def dependency_overrides(self) -> dict[Any, Any]:
        app = self.current.get()
        return app.dependency_overrides if app is not None else {}


SERVING_APP = _ServingApp()


class BodyRefused(Exception):
    """A body the guard stopped reading; `status` and `detail` are the answer."""

    status = 422

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BodyTooLarge(BodyRefused):
    status = 413

    def __init__(self, limit: int, detail: str | None = None) -> None:
        super().__init__(detail or too_large_detail(limit))
        self.limit = limit


class BodyStalled(BodyRefused):
    """A body whose next bytes did not come within the guard's idle time: a client that
    sends headers and part of a body, then nothing, held its connection (and the request
    its slot) for good."""

    status = 408

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"body: no bytes of it for {seconds:g} s; send the body whole (the connection "
            "is closed)"
        )


class EncodingRefused(BodyRefused):
    """A body sent under a content coding (gzip...): read as sent, it would be refused as
    bytes that are not JSON, naming neither the header nor the coding."""

    status = 415

    def __init__(self, coding: str) -> None:
        super().__init__(
            f"content-encoding: {coding[:40]!r} is not read: bodies are taken as sent; send "
            "the body uncompressed, without Content-Encoding (or as identity)"
        )


def too_large_detail(limit: int) -> str:
    return f"body: larger than the {limit}-byte limit (SHADOWPLANE_MAX_BODY_BYTES); split the batch"


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) as soon as it passes `limit` bytes, chunked or not.

    BodyGuard already holds every route to the same limit; this keeps an endpoint safe when
    the app is mounted without it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


Model = TypeVar("Model", bound=BaseModel)


def json_body(model: type[Model]) -> Callable[[Request], Awaitable[Model]]:
    """A dependency giving the body as `model`, read as FastAPI reads a body parameter (JSON
    under the content types FastAPI reads as JSON, `_reads_json`; the same 422 and 400
    answers), but only once the dependencies declared before it have passed, and parsed and
    validated in a worker thread.

    For bodies of megabytes (a run of 100,000 lines): FastAPI reads, parses and validates a
    body parameter on the event loop before any dependency runs, so one such body, even
    without a key, held every other request of its process (flag polls too) for as long as
    that took: 3.7 s for 800,000 unknown fields. Declare it after the key's dependency and
    document the body with `openapi_extra` (FastAPI no longer sees it)."""

    async def body(request: Request) -> Model:
        raw = await read_body(request, request.app.state.settings.max_body_bytes)
        try:
            return await run_in_threadpool(_validated, model, raw, _reads_json(request))
        except RequestValidationError as exc:
            # FastAPI validates the path before a body parameter, and names both: this
            # dependency runs before the path's, so it names the path's problems too.
            raise RequestValidationError([*_path_errors(request), *exc.errors()]) from None

    return body


def _path_errors(request: Request) -> list[Any]:
    """The route's path parameters' refusals, as FastAPI words them ([] when they hold)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None or not dependant.path_params:
        return []
    _, errors = request_params_to_args(dependant.path_params, request.path_params)
    return list(errors)


def _reads_json(request: Request) -> bool:
    """Whether FastAPI parses this request's body as JSON: under `application/json` or an
    `application/…+json` type; without a content type only where the route is not strict
    about it (`strict_content_type`, on by default in the FastAPI versions that have it).
    Any other body is validated as the bytes it is (and refused: not an object)."""
    content_type = request.headers.get("content-type")
    if not content_type:
        strict = getattr(request.scope.get("route"), "strict_content_type", False)
        return not getattr(strict, "value", strict)  # FastAPI's DefaultPlaceholder holds it
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


# Python reads no integer of more than 4300 digits (a guard against slow conversion), and
# no field of this API takes one: a 422 naming it, where FastAPI answers 400 "There was an
# error parsing the body" (controlplane.api maps that answer to this one).
TOO_MANY_DIGITS = {
    "type": "value_error",
    "loc": ("body",),
    "msg": "holds a number of more than 4300 digits, more than any field takes",
    "input": None,
}


def too_many_digits(exc: BaseException | None) -> bool:
    """Whether a parse failed on an integer past Python's 4300 digits."""
    return isinstance(exc, ValueError) and "integer string conversion" in str(exc)


def _validated(model: type[Model], raw: bytes, reads_json: bool) -> Model:
    if not raw:
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        raise RequestValidationError([missing])
    value: Any = raw
    if reads_json:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            error = {
                "type": "json_invalid",
                "loc": ("body", exc.pos),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": exc.msg},
            }
            raise RequestValidationError([error]) from None
        except ValueError as exc:
            if too_many_digits(exc):
                raise RequestValidationError([TOO_MANY_DIGITS]) from None
            # What FastAPI answers to a body its parse fails on otherwise.
            raise HTTPException(400, "There was an error parsing the body") from None
    try:
        # As FastAPI validates a body parameter (its refusals read the same).
        return model.model_validate(value, from_attributes=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


# How long a body may send nothing before the request is answered 408 and closed.
BODY_IDLE_SECONDS = 30.0


class BodyGuard:
    """Pure ASGI middleware in front of routing and authentication.

    Every request body is counted as the app pulls it: a `Content-Length` past `max_bytes`
    is answered 413 without reading a byte, a chunked body as soon as its running total
    passes the limit, and the rest is never read (the connection is closed). JSON bodies
    are also checked chunk by chunk, without buffering, for what would make a parser or
    the database fail rather than answer: nesting deeper than MAX_BODY_DEPTH, bytes that are
    not UTF-8, `\\u0000` and unpaired surrogates (422 naming the reason). A body that sends
    nothing for `idle_seconds` while it is read is answered 408 and its connection closed.

    `unchecked_paths` skip that JSON check (never the size limit): the ingest endpoint
    reads its own body item by item and is the hot path, so it is not scanned twice.

    Only the paths `bulk_paths` matches take bodies up to `max_bytes`; every other route
    (labels, actions, backfills) up to `small_bytes`. A body is read and parsed before its
    key is looked at, on the event loop, so without a key 15 MB to any such route held
    every other request of the process (flag polls too) for 0.35 s.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        *,
        max_depth: int = MAX_BODY_DEPTH,
        unchecked_paths: Iterable[str] = (),
        small_bytes: int | None = None,
        bulk_paths: re.Pattern[str] | None = None,
        idle_seconds: float = BODY_IDLE_SECONDS,
    ) -> None:
        self.app = app
        self.idle_seconds = idle_seconds
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.unchecked_paths = frozenset(unchecked_paths)
        self.small_bytes = small_bytes
        self.bulk_paths = bulk_paths

    def _limit(self, path: str) -> tuple[int, str | None]:
        """The body limit of a path, and the refusal's detail when it is not the usual."""
        small = self.small_bytes
        if small is None or small >= self.max_bytes:
            return self.max_bytes, None
        if self.bulk_paths is not None and self.bulk_paths.fullmatch(path):
            return self.max_bytes, None
        return small, (
            f"body: larger than the {small}-byte limit of this route "
            "(SHADOWPLANE_MAX_SMALL_BODY_BYTES); only results, task configs and eval-set "
            "runs take larger bodies"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope["path"] or b"%00" in scope["query_string"]:
            # PostgreSQL cannot hold NUL in text: a lookup by such a name would fail in the
            # database (a 500) instead of finding nothing.
            await _refuse(
                send, BodyRefused("path or query: must not contain the NUL character"), close=True
            )
            return
        declared: int | None = None
        chunked = False
        content_type = b""
        content_types = 0
        coding = b""
        for name, value in scope["headers"]:
            if name == b"content-encoding":
                # Every coding of every such header (a list, or the header repeated): one
                # that is not identity is refused, wherever it stands.
                for token in value.lower().split(b","):
                    if token.strip() not in (b"", b"identity") and not coding:
                        coding = token.strip()
            elif name == b"content-length":
                declared = int(value) if value.isdigit() else None
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"content-type":
                content_type = value.lower()
                content_types += 1
        limit, too_large = self._limit(scope["path"])
        if coding not in (b"", b"identity"):
            await _refuse(send, EncodingRefused(coding.decode("latin-1")), close=True)
            return
        if declared is not None and declared > limit:
            await _refuse(send, BodyTooLarge(limit, too_large), close=True)
            return
        if content_types > 1:
            # The check below reads one header and the framework another: a JSON body
            # under a second, non-JSON type would pass unchecked and reach the database.
            await _refuse(
                send,
                BodyRefused(f"content-type: sent {content_types} times; send it once"),
                close=True,
            )
            return
        finished = not chunked and not declared
        check_shape = (
            not finished and scope["path"] not in self.unchecked_paths and is_json(content_type)
        )
        shape: JsonShape | None = None
        received = 0
        refused: BodyRefused | None = None
        started = False

        async def guarded_receive() -> Message:
            nonlocal received, finished, refused, shape
            if refused is not None:
                raise refused
            if finished:
                # The body is read: what is awaited now is the client going away (a
                # stream's whole life), never timed.
                message = await receive()
            else:
                try:
                    async with asyncio.timeout(self.idle_seconds):
                        message = await receive()
                except TimeoutError:
                    refused = BodyStalled(self.idle_seconds)
                    raise refused from None
            if message["type"] != "http.request":
                return message
            chunk: bytes = message.get("body", b"")
            finished = not message.get("more_body", False)
            received += len(chunk)
            if received > limit:
                refused = BodyTooLarge(limit, too_large)
            elif check_shape:
                shape = shape or JsonShape(self.max_depth)
                problem = shape.feed(chunk, final=finished)
                if problem is not None:
                    refused = BodyRefused(problem)
            if refused is not None:
                raise refused
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused is not None and not started:
                # The app's own answer to the interrupted read (FastAPI makes a 400 of it)
                # is dropped: ours goes out once the app returns.
                return
            if message["type"] == "http.response.start" and not finished:
                # Answered before the body was read (401, 403, 404...): close rather than
                # let the server drain what may be the limit's worth of bytes.
                message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
            started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if refused is None or started:
                raise
        if refused is not None and not started:
            await _refuse(send, refused, close=not finished)


_CLOSE = (b"connection", b"close")


def is_json(content_type: bytes) -> bool:
    # No content type: FastAPI and the endpoints read the body as JSON.
    if not content_type:
        return True
    media = content_type.split(b";", 1)[0].strip()
    return media == b"application/json" or media.endswith(b"+json")


async def _refuse(send: Send, refused: BodyRefused, *, close: bool) -> None:
    detail: str | list[str] = refused.detail if refused.status == 413 else [refused.detail]
    body = orjson.dumps({"detail": detail})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        # The rest of the body is never read: uvicorn closes the connection after this
        # answer instead of draining (or waiting for) what the client still sends.
        headers.append(_CLOSE)
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_STRUCTURE = re.compile(rb'[\[\]{}"]')
_STRING_END_OR_ESCAPE = re.compile(rb'["\\]')
_HEX4 = re.compile(rb"[0-9a-fA-F]{4}")
# The longest escape to read whole: a surrogate pair, \uD83D\uDE00.
_LONGEST_ESCAPE = 12


class JsonShape:
    """An incremental check of a JSON body's nesting and strings, fed chunk by chunk.

    It does not parse: it tracks the depth outside strings and reads escapes inside them,
    in time linear in the body (each step jumps to the next bracket, quote or backslash).
    Malformed JSON is left to the parser, which rejects it without recursing.
    """

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.depth = 0
        self.in_string = False
        self.offset = 0  # bytes fed so far
        self._carry = b""  # an escape cut by the chunk boundary
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def feed(self, chunk: bytes, *, final: bool) -> str | None:
        """None while the body may be read; else why it cannot (a sentence for a 422)."""
        try:
            self._utf8.decode(chunk, final)
        except UnicodeDecodeError as exc:
            return f"body: not valid UTF-8 (byte {self.offset + exc.start})"
        self.offset += len(chunk)
        data = self._carry + chunk if self._carry else chunk
        self._carry = b""
        pos, end = 0, len(data)
        while pos < end:
            if not self.in_string:
                match = _STRUCTURE.search(data, pos)
                if match is None:
                    break
                pos = match.end()
                char = data[pos - 1]
                if char == 0x22:  # "
                    self.in_string = True
                elif char in b"[{":
                    self.depth += 1
                    if self.depth > self.max_depth:
                        return f"body: nested deeper than {self.max_depth} levels"
                elif self.depth > 0:
                    self.depth -= 1
                continue
            match = _STRING_END_OR_ESCAPE.search(data, pos)
            if match is None:
                break
            at = match.start()
            if data[at] == 0x22:
                self.in_string = False
                pos = at + 1
                continue
            if end - at < _LONGEST_ESCAPE and not final:
                self._carry = data[at:]
                break
            problem, pos = _escape(data, at)
            if problem is not None:
                return problem
        return None


def _escape(data: bytes, at: int) -> tuple[str | None, int]:
    """Read the escape at `data[at]` (a backslash): a problem or None, and where to go on."""
    if data[at + 1 : at + 2] != b"u" or not _HEX4.fullmatch(data, at + 2, at + 6):
        return None, at + 2
    code = int(data[at + 2 : at + 6], 16)
    if code == 0:
        return "body: text holds \\u0000, which storage cannot keep", at + 6
    if 0xD800 <= code <= 0xDBFF:
        low = data[at + 6 : at + 12]
        if low[:2] == b"\\u" and _HEX4.fullmatch(low, 2) and 0xDC00 <= int(low[2:], 16) <= 0xDFFF:
            return None, at + 12
    if 0xD800 <= code <= 0xDFFF:
        return f"body: text holds an unpaired surrogate (\\u{code:04x}), which is not text", at + 6
    return None, at + 6


class RequestLog:
    """Pure ASGI middleware: one JSON line per request with method, path, status, duration
    and the key's name. Never the key itself, never a body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        SERVING_APP.current.set(scope.get("app"))

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if log.isEnabledFor(logging.INFO):
                state = scope.get("state") or {}
                log.info(
                    orjson.dumps(
                        {
                            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                            "method": scope["method"],
                            "path": scope["path"],
                            "status": status,
                            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                            "key": state.get("key_name"),
                        }
                    ).decode()
                )


# Where HeadAsGet marks a HEAD request it passes on as a GET.
HEAD_MARK = "shadowplane.head"


class HeadAsGet:
    """Pure ASGI middleware: HEAD is answered wherever GET is (RFC 9110 9.3.2), as that GET
    with the same authentication, status and headers, and no body. Load balancers and uptime
    checks probe with HEAD. A streaming answer is told the client left once its headers are
    sent, so it stops."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        started = False
        ended = False

        async def head_receive() -> Message:
            if started:
                return {"type": "http.disconnect"}
            return await receive()

        async def head_send(message: Message) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
                await send(message)
            elif message["type"] == "http.response.body" and not ended:
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET", HEAD_MARK: True}, head_receive, head_send)

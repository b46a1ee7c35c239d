"""HTTP plumbing shared by every router: the JSON response class, the body limit, the
one-line JSON request log, and mapping storage outages to 503."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.jsonutil import dumps

log = logging.getLogger("shadowplane.http")


class ORJSONResponse(JSONResponse):
    """JSON via orjson (datetimes as ISO 8601)."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.limit = limit


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) as soon as it passes `limit` bytes, chunked or not."""
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


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("shadowplane")
    if not logger.handlers:
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False

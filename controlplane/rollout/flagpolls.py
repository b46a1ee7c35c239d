"""Conditional flag polls answered before routing: `GET /v1/flags` and `GET /v1/flags/{task}`
whose If-None-Match names the current ETag get their 304 from a pure ASGI middleware, with
the key, its scope and its rate checked in memory exactly as the route's dependency checks
them. Whatever it cannot decide that way goes on to the route untouched, which answers as
it always has: this only skips routing, dependency solving and the Request object."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.auth.dependencies import bearer_token
from controlplane.auth.ratelimit import RateLimiter
from controlplane.auth.scopes import grants
from controlplane.auth.service import KeyCache
from controlplane.rollout.flagcopy import FlagCopy, FlagSnapshot, NoFlagsYet
from controlplane.rollout.flags import matches

PREFIX = "/v1/flags"
SCOPE = "flags:read"
# Paths under the prefix that are routes of their own, not a task's flag.
_OTHER_ROUTES = frozenset({"stream"})
_TASK_AT = len(PREFIX) + 1


def cache_headers(tag: str, stale: float | None) -> dict[str, str]:
    """The headers of a flag answer, 200 or 304: its ETag, revalidate on every use, and how
    stale the copy is when storage could not confirm it lately."""
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if stale is not None:
        headers["X-Shadowplane-Stale"] = str(int(stale))
    return headers


def raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """`headers` as Starlette sends those of `Response(status_code=304, headers=headers)`:
    the route's 304, byte for byte."""
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]


@dataclass(frozen=True, slots=True)
class Poll:
    """What a request says, when it may be a conditional flag poll: the task (None: every
    flag), the token and the If-None-Match header."""

    task: str | None
    token: str
    if_none_match: str


def read_poll(scope: Scope) -> Poll | None:
    """The poll `scope` asks for, or None when it is anything the route must see: another
    method or path, a query string, a body (or a header announcing one, or its coding), no
    key, no If-None-Match, or FastAPI's OpenTelemetry watching the request (it names the
    matched route in its spans and metrics: the route is matched for it). Header values are read as
    Starlette reads them: the first of each name, as latin-1."""
    if (
        scope["method"] != "GET"
        or scope["query_string"]
        or scope.get("root_path")
        or scope.get("fastapi.telemetry") is not None
    ):
        return None
    path: str = scope["path"]
    if path == PREFIX:
        task = None
    elif path.startswith(PREFIX + "/"):
        task = path[_TASK_AT:]
        if not task or "/" in task or "\x00" in task or task in _OTHER_ROUTES:
            return None
    else:
        return None
    authorization = api_key = if_none_match = None
    for name, value in scope["headers"]:
        if name == b"if-none-match":
            if if_none_match is None:
                if_none_match = value
        elif name == b"authorization":
            if authorization is None:
                authorization = value
        elif name == b"x-api-key":
            if api_key is None:
                api_key = value
        elif name == b"content-length":
            if value != b"0":
                return None
        elif name in (b"transfer-encoding", b"content-type", b"content-encoding"):
            # What the body guard reads: the route's path keeps its answers to them.
            return None
    if if_none_match is None:
        return None
    token = bearer_token(
        None if authorization is None else authorization.decode("latin-1"),
        None if api_key is None else api_key.decode("latin-1"),
    )
    if token is None:
        return None
    return Poll(task, token, if_none_match.decode("latin-1"))


def not_modified(poll: Poll, snapshot: FlagSnapshot) -> tuple[str, float | None] | None:
    """(ETag, stale seconds) of a 304 when the poll names the current ETag of what it asks
    for; None when the route must answer (a 200 with the body, or a 404)."""
    if poll.task is None:
        tag = snapshot.etag
    else:
        found = snapshot.tasks.get(poll.task)
        if found is None:
            return None
        tag = found[1]
    if not matches(poll.if_none_match, tag):
        return None
    return tag, snapshot.stale_seconds


@dataclass(slots=True)
class FastPolls:
    """How many polls the fast path answered itself (its 304s): tests and benchmarks read
    it to see the path taken."""

    answered: int = 0


class FlagPolls:
    """Pure ASGI middleware, inside the request log and before the body guard, routing and
    authentication: a conditional poll of the current ETag, by a key the process's key
    snapshot holds with the `flags:read` scope, within a rate the limiter decides in
    memory, is answered 304 here. The limiter takes its token exactly once, here or in the
    route: here only once everything else allows the 304, so a request that goes on to
    the route was not counted. An over-limit key also goes on (no token is taken from an
    empty bucket), and the route's check refuses it with today's 429."""

    def __init__(self, app: ASGIApp, counts: FastPolls) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            poll = read_poll(scope)
            if poll is not None:
                answer = self._decide(scope, poll)
                if answer is not None:
                    await send({"type": "http.response.start", "status": 304, "headers": answer})
                    await send({"type": "http.response.body", "body": b""})
                    self.counts.answered += 1
                    return
        await self.app(scope, receive, send)

    def _decide(self, scope: Scope, poll: Poll) -> list[tuple[bytes, bytes]] | None:
        """The 304's raw headers, or None to let the route answer; sets the key's name for
        the request log, as the route's dependency does."""
        state = scope["app"].state
        keys: KeyCache = state.keys
        principal = keys.known(poll.token)
        if principal is None or not grants(principal.scopes, SCOPE):
            return None
        copy: FlagCopy = state.flag_copy
        try:
            snapshot = copy.snapshot()
        except NoFlagsYet:
            return None
        found = not_modified(poll, snapshot)
        if found is None:
            return None
        limiter: RateLimiter = state.limiter
        decided, refusal = limiter.check_key_in_memory(principal.key_id, principal.name, SCOPE)
        if not decided or refusal is not None:
            return None
        scope.setdefault("state", {})["key_name"] = principal.name
        return raw_headers(cache_headers(*found))

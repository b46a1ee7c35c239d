"""FastAPI dependencies that authenticate a request's key, check its scope and its rate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.exc import SQLAlchemyError

from controlplane.auth.ratelimit import RateLimiter, Refusal
from controlplane.auth.scopes import grants
from controlplane.auth.service import MISS_REFRESH_SECONDS, KeyCache, Principal

# The bucket of endpoints open to any valid key (/metrics): the read rate.
ANY_KEY_BUCKET = "read"


def bearer_token(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request sends: `Authorization: Bearer <key>`, else `X-API-Key: <key>`."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    return api_key or None


def _bearer(request: Request) -> str | None:
    headers = request.headers
    return bearer_token(headers.get("authorization"), headers.get("x-api-key"))


def still_allowed(request: Request, scope: str) -> Callable[[], Awaitable[bool]]:
    """For a response that outlives its request (the flag stream): whether the request's key
    is still a key holding `scope`, as this process's snapshot of keys says now (read again
    in a worker thread when due). Checked when the snapshot is due (`key_check_due`), a
    revoked key stops within the snapshot's age, as a poll does; while the database cannot
    be read, the last snapshot answers."""
    key = _bearer(request)
    cache: KeyCache = request.app.state.keys

    async def allowed() -> bool:
        if key is None:
            return False
        principal = cache.known(key)
        if principal is None:
            try:
                principal = await run_in_threadpool(cache.authenticate, key)
            except SQLAlchemyError:
                return False  # not in the last snapshot, and the database cannot say more
        return principal is not None and grants(principal.scopes, scope)

    return allowed


# How long after the key snapshot is due a stream checks its key: the read a check then
# makes (or another request's) has landed.
KEY_CHECK_SLACK_SECONDS = 0.05


def key_check_due(request: Request) -> Callable[[], float]:
    """Seconds until a long response should check its key again: when this process's key
    snapshot is next read (a revocation made before that read is then seen); while the
    snapshot is overdue (a read under way, or failing: the database is down), a second,
    as a request's own miss waits."""
    cache: KeyCache = request.app.state.keys

    def due() -> float:
        left = cache.due_in()
        return (left if left > 0 else MISS_REFRESH_SECONDS) + KEY_CHECK_SLACK_SECONDS

    return due


def _too_many(refusal: Refusal) -> HTTPException:
    return HTTPException(429, refusal.detail, headers={"Retry-After": str(refusal.retry_after)})


def _bucket(held: frozenset[str], scopes: tuple[str, ...] | None) -> str | None:
    """The rate bucket of a key holding `held` on an endpoint needing one of `scopes`: the
    first of them the key's scopes grant (the read bucket for any key when None); None when
    the key may not call it."""
    if scopes is None:
        return ANY_KEY_BUCKET
    return next((s for s in scopes if grants(held, s)), None)


def require(scope: str | tuple[str, ...] | None) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: 401 without a valid key, 403 when the key lacks `scope` (None: any key;
    a tuple: any one of them, the first one held being the rate's bucket), 429 past the
    key's rate for the scope, or for an invalid key after too many failed keys from the
    address (a valid key is never refused for that).

    A key this process knows, within a rate it can check in memory, is answered on the
    event loop; anything that may need a query or Redis goes to a worker thread."""
    scopes = (scope,) if isinstance(scope, str) else scope

    async def dependency(request: Request) -> Principal:
        key = _bearer(request)
        if key is not None:
            principal = request.app.state.keys.known(key)
            bucket = None if principal is None else _bucket(principal.scopes, scopes)
            if principal is not None and bucket is not None:
                limiter: RateLimiter = request.app.state.limiter
                decided, refusal = limiter.check_key_in_memory(
                    principal.key_id, principal.name, bucket
                )
                if decided:
                    request.state.key_name = principal.name
                    if refusal is not None:
                        raise _too_many(refusal)
                    return principal
        return await run_in_threadpool(checked, request)

    def checked(request: Request) -> Principal:
        key = _bearer(request)
        if key is None:
            raise HTTPException(
                401,
                "missing API key: send 'Authorization: Bearer <key>' (or 'X-API-Key: <key>')",
                headers={"WWW-Authenticate": "Bearer"},
            )
        cache: KeyCache = request.app.state.keys
        limiter: RateLimiter = request.app.state.limiter
        # The peer's address. X-Forwarded-For is not trusted: anyone can write it.
        address = request.client.host if request.client else "unknown"
        # The key first: a valid key is never refused for other people's bad tokens (behind
        # a proxy every client has its address). A made-up token costs a dictionary lookup
        # (the cache reads the key table at most once a second for unknown tokens); the
        # address's budget of failures only turns floods of them into cheap 429s.
        try:
            principal = cache.authenticate(key)
        except SQLAlchemyError:
            # The database is down and the token is not a key this process knows.
            blocked = limiter.blocked(address)
            if blocked is not None:
                raise _too_many(blocked) from None
            raise
        if principal is None:
            blocked = limiter.blocked(address)
            if blocked is not None:
                raise _too_many(blocked)
            limiter.failed(address)
            raise HTTPException(
                401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.key_name = principal.name
        bucket = _bucket(principal.scopes, scopes)
        if bucket is None:
            wanted = " or ".join(repr(s) for s in scopes or ())
            raise HTTPException(
                403,
                f"key {principal.name!r} lacks the {wanted} scope "
                f"(it has: {', '.join(sorted(principal.scopes))})",
            )
        refusal = limiter.check_key(principal.key_id, principal.name, bucket)
        if refusal is not None:
            raise _too_many(refusal)
        return principal

    return dependency

"""FastAPI dependencies that authenticate a request's key and check its scope."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import HTTPException, Request

from controlplane.auth.scopes import grants
from controlplane.auth.service import KeyCache, Principal


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    return request.headers.get("x-api-key") or None


def require(scope: str | None) -> Callable[[Request], Principal]:
    """A dependency: 401 without a valid key, 403 when the key lacks `scope` (None: any key)."""

    def dependency(request: Request) -> Principal:
        key = _bearer(request)
        if key is None:
            raise HTTPException(
                401,
                "missing API key: send 'Authorization: Bearer <key>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        cache: KeyCache = request.app.state.keys
        principal = cache.authenticate(key)
        if principal is None:
            raise HTTPException(
                401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.key_name = principal.name
        if scope is not None and not grants(principal.scopes, scope):
            raise HTTPException(
                403,
                f"key {principal.name!r} lacks the {scope!r} scope "
                f"(it has: {', '.join(sorted(principal.scopes))})",
            )
        return principal

    return dependency

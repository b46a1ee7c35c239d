"""Turning validation failures into sentences that name the field, the value and the reason."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from controlplane.compare.jsonutil import short_repr


def describe_errors(
    exc: ValidationError, *, skip_loc: Iterable[Any] = (), root: str = "(config)"
) -> list[str]:
    """One sentence per pydantic error: `field.path: reason (got value)`."""
    skip = set(skip_loc)
    messages = []
    for err in exc.errors(include_url=False):
        parts = [str(p) for p in err["loc"] if p not in skip]
        loc = ".".join(parts) or root
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            messages.append(f"{loc}: field required")
        elif err["type"] == "extra_forbidden":
            messages.append(f"{loc}: unknown field")
        elif not parts:
            messages.append(f"{loc}: {msg}")
        else:
            messages.append(f"{loc}: {msg} (got {short_repr(err.get('input'))})")
    return messages


class ActionError(Exception):
    """An action that cannot be done: `status` is the HTTP answer a door gives, `detail` why.

    Raised by the action functions (rollout, alerts, auth, catalog); the API maps it to its
    status, the CLI prints the detail and exits 1."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(detail if isinstance(detail, str) else short_repr(detail, 2000))
        self.status = status
        self.detail = detail


class ErrorOut(BaseModel):
    """Every refusal the API gives: `{"detail": ...}` — a sentence, a list of sentences (one
    per invalid field), or for a blocked promotion `{"gate": verdict}` / `{"veto": sentence}`."""

    detail: str | list[str] | dict[str, Any]


ERROR_DESCRIPTIONS: dict[int, str] = {
    401: "No API key, or an invalid or revoked one (WWW-Authenticate: Bearer).",
    403: "The key lacks the scope this endpoint needs.",
    404: "Not found.",
    409: "The action cannot be done in the current state.",
    413: "The body is larger than SHADOWPLANE_MAX_BODY_BYTES.",
    422: "Invalid parameters or body: one sentence per problem.",
    429: "Past the key's rate (or too many failed keys from this address); Retry-After says when.",
    503: "Storage unavailable; nothing was stored. Retry-After says when to retry.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entries of an endpoint's error answers, each with the ErrorOut body."""
    return {code: {"model": ErrorOut, "description": ERROR_DESCRIPTIONS[code]} for code in codes}

"""Turning validation failures into sentences that name the field, the value and the reason."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from controlplane.compare.jsonutil import short_repr

# A refusal names at most this many problems, then counts the rest: a body of a million bad
# values gets a short answer, not one a few times its own size.
MAX_PROBLEMS = 20
# A key quoted in a field's path is cut to this many characters (the last one "…").
MAX_KEY_CHARS = 60


def first_problems(sentences: list[str], total: int | None = None) -> list[str]:
    """The first MAX_PROBLEMS sentences, and `… and N more problems` when there were more
    (`total`: how many there were, when only the first were described)."""
    total = len(sentences) if total is None else total
    kept = sentences[:MAX_PROBLEMS]
    if total > len(kept):
        more = total - len(kept)
        kept.append(f"… and {more} more problem{'s' if more > 1 else ''}")
    return kept


def field_path(loc: Iterable[Any], skip: Iterable[Any] = ()) -> list[str]:
    """The parts of an error's location, each key cut to MAX_KEY_CHARS."""
    skipped = set(skip)
    return [short_key(str(p)) for p in loc if p not in skipped]


class StrictBody(BaseModel):
    """A request body that refuses unknown fields: each named, as pydantic does, up to
    MAX_PROBLEMS of them; past that, all in one sentence, before pydantic reads any.

    pydantic builds an error for every unknown field, in one call that holds the GIL (an
    API process answers nothing else meanwhile): 800,000 of them in a 11 MB body held the
    flag polls beside it for 1.5 s."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _few_unknown(cls, value: Any) -> Any:
        if type(value) is not dict:
            return value
        known = _known_fields(cls)
        if len(value) <= len(known) + MAX_PROBLEMS:
            return value  # at most MAX_PROBLEMS unknown: pydantic names each
        present = sum(1 for name in known if name in value)
        first = []
        for key in value:
            if key not in known:
                first.append(short_key(str(key)))
                if len(first) == 3:
                    break
        raise PydanticCustomError(
            "unknown_fields",
            "{n} unknown fields ({first}, …); known: {known}",
            {
                "n": len(value) - present,
                "first": ", ".join(first),
                "known": ", ".join(sorted(known)),
            },
        )


@cache
def _known_fields(model: type[BaseModel]) -> frozenset[str]:
    fields = model.model_fields
    return frozenset([*fields, *(f.alias for f in fields.values() if f.alias)])


def short_key(part: str) -> str:
    """A key (or a name) as a refusal quotes it: cut to MAX_KEY_CHARS, the last one "…"."""
    return part if len(part) <= MAX_KEY_CHARS else part[: MAX_KEY_CHARS - 1] + "…"


def describe_errors(
    exc: ValidationError,
    *,
    skip_loc: Iterable[Any] = (),
    root: str = "(config)",
    errors: list[ErrorDetails] | None = None,
) -> list[str]:
    """One sentence per pydantic error, `field.path: reason (got value)`, for the first
    MAX_PROBLEMS errors, then how many more there were. `errors`: exc.errors(include_url=
    False) when the caller has them (for a million errors, each call takes seconds)."""
    messages = []
    every = exc.errors(include_url=False) if errors is None else errors
    for err in every[:MAX_PROBLEMS]:
        parts = field_path(err["loc"], skip_loc)
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
    return first_problems(messages, exc.error_count())


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

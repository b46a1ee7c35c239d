"""Turning validation failures into sentences that name the field, the value and the reason."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

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

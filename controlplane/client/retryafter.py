"""A server's `Retry-After` in both its forms (RFC 9110, section 10.2.3): whole seconds, or
the HTTP-date to retry at (what a proxy or load balancer may send, and the API's OFREP
routes do)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC
from email.utils import parsedate_to_datetime


def retry_after_seconds(
    value: str, *, limit: float, now: Callable[[], float] = time.time
) -> float | None:
    """The seconds to wait, from now; None for a value that is neither form, or that is
    negative, not finite or `limit` seconds or more."""
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            # An HTTP-date is in GMT: the IMF and RFC 850 forms say so; asctime's (no
            # comma: "Sun Nov  6 08:49:37 1994") never does, and is GMT all the same.
            if "," in value:
                return None
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, when.timestamp() - now())
    return seconds if math.isfinite(seconds) and 0 <= seconds < limit else None

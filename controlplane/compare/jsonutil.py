"""JSON encoding for values that came from outside: orjson when it can, the standard
library when it cannot (orjson refuses integers beyond 64 bits, which JSON allows)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime, time
from typing import Any

import orjson


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    try:
        return orjson.dumps(
            value,
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
            if sort_keys
            else orjson.OPT_NON_STR_KEYS,
            default=str,
        )
    except TypeError:
        text = json.dumps(
            value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, default=_text
        )
        return text.encode()


def _text(value: Any) -> str:
    # As orjson writes them: a time in ISO 8601 (RFC 3339), whichever encoder wrote it.
    return value.isoformat() if isinstance(value, datetime | date | time) else str(value)


def short_repr(value: Any, limit: int = 120) -> str:
    """A value as compact JSON, cut to `limit` characters."""
    text = dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def loads(data: bytes | str, *, parse_int: Callable[[str], Any] | None = None) -> Any:
    """Parse JSON exactly; raises ValueError when it is not JSON.

    The standard library, not orjson: orjson turns integers beyond 64 bits into floats
    without a word, and a stored number must be the number that was sent."""
    return json.loads(data, parse_int=parse_int)

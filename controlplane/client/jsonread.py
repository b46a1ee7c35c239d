"""`loads`: JSON read as `json.loads` reads it, where a value nested past the recursion limit
(a few hundred KiB of `[`) is refused as any unreadable JSON (ValueError), not with the
RecursionError that would end the thread reading it."""

from __future__ import annotations

import json
from typing import Any


def loads(data: str | bytes | bytearray) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None

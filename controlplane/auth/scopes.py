"""Scopes (docs/http-api.md, "Keys, scopes, limits") and the one rule deciding whether a
key's scopes grant a request.

`admin` includes every scope. `review` does NOT include `read`: a reviewer sees results
only through the blind review queue, never which side was the edge.
"""

from __future__ import annotations

from collections.abc import Iterable

SCOPES = ("ingest", "flags:read", "read", "review", "admin")


def grants(held: Iterable[str], required: str) -> bool:
    held = set(held)
    return "admin" in held or required in held

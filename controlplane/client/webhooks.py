"""Checking a Shadowplane webhook on the receiving side (standard library only).

    X-Shadowplane-Delivery: <uuid>           dedupe on it: a delivery may arrive twice
    X-Shadowplane-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}." + body)>

`verify_signature` answers True or False and never raises on what a sender controls, so
a receiver answers 401 on False and nothing else can go wrong. It refuses a timestamp
more than `tolerance` seconds away from now (replays), and a delivery header that is not
the body's `delivery_id` (the body is signed, the header is not).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

from .jsonread import loads

DELIVERY_HEADER = "X-Shadowplane-Delivery"
SIGNATURE_HEADER = "X-Shadowplane-Signature"


def verify_signature(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    tolerance: float = 300,
    now: float | None = None,
) -> bool:
    """True when `body` (the raw request body, before any JSON parsing) was signed with
    `secret` at most `tolerance` seconds from `now` (unix seconds; default: the clock)."""
    if not secret:
        raise ValueError("verify_signature needs the webhook secret (SHADOWPLANE_WEBHOOK_SECRET)")
    raw = body.encode() if isinstance(body, str) else bytes(body)
    header = _header(headers, SIGNATURE_HEADER)
    if header is None:
        return False
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, c.strip().lower()) for c in candidates):
        return False
    delivery = _header(headers, DELIVERY_HEADER)
    if delivery is not None:
        try:
            document = loads(raw)
        except ValueError:
            return False
        if not isinstance(document, dict) or document.get("delivery_id") != delivery:
            return False
    return True


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value

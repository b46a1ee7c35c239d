"""The webhook signature (docs/http-api.md, "Webhooks"), as the sender writes it.

`X-Shadowplane-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}." + body)>`;
receivers check it with `controlplane.client.verify_signature`, which refuses old times.
"""

from __future__ import annotations

import hashlib
import hmac

DELIVERY_HEADER = "X-Shadowplane-Delivery"
SIGNATURE_HEADER = "X-Shadowplane-Signature"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value for `body` sent at `timestamp` (unix seconds)."""
    if not secret:
        raise ValueError("webhooks are signed: the secret must not be empty")
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"

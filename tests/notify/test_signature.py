"""Receivers check webhooks with `controlplane.client.verify_signature`: the HMAC of
`t.body` under the shared secret, a timestamp within the tolerance, and the delivery id
of the header equal to the one in the (signed) body."""

from __future__ import annotations

import hashlib
import hmac
import json

from controlplane.client import verify_signature
from controlplane.db import get_engine, session_scope
from controlplane.notify.delivery import deliver_pending
from controlplane.notify.documents import decision_document
from controlplane.notify.outbox import add_event
from controlplane.notify.signing import signature
from tests.notify.conftest import SECRET, webhook_settings
from tests.notify.receiver import Receiver

DECISION = {
    "id": 7,
    "task": "ticket_classify",
    "action": "rollback",
    "actor": "policy",
    "reason": "agreement fell",
    "rule": "agreement >= 0.9 per bucket",
    "bucket": "2048+",
    "flag_version_before": 3,
    "flag_version_after": 4,
    "evidence": {"explanation": "rolled back: agreement fell", "windows": [], "models": ["m@1"]},
}


def _timestamp(header: str) -> int:
    parts = dict(part.split("=", 1) for part in header.split(","))
    return int(parts["t"])


def test_a_receiver_gets_signed_webhooks_that_verify_signature_accepts(
    sqlite_url: str, receiver: Receiver
) -> None:
    engine = get_engine(sqlite_url)
    with session_scope(engine) as session:
        event_id = add_event(
            session, kind="decision", task="ticket_classify", document=decision_document(DECISION)
        )
    report = deliver_pending(engine, webhook_settings(sqlite_url, receiver))
    assert (report.delivered, report.retrying, report.failed) == (1, 0, 0)
    [got] = receiver.wait(1)
    assert got.headers["Content-Type"] == "application/json"
    header = got.headers["X-Shadowplane-Signature"]
    t = _timestamp(header)
    # The format docs/http-api.md ("Webhooks") gives, computed here by hand.
    expected = hmac.new(SECRET.encode(), f"{t}.".encode() + got.body, hashlib.sha256).hexdigest()
    assert header == f"t={t},v1={expected}"
    assert verify_signature(SECRET, got.headers, got.body, now=t)
    assert verify_signature(SECRET, got.headers, got.body.decode(), now=t + 300)
    # Header names are case-insensitive, as HTTP frameworks hand them over.
    assert verify_signature(SECRET, {k.lower(): v for k, v in got.headers.items()}, got.body, now=t)

    document = got.document
    assert document["delivery_id"] == got.delivery_id and document["event_id"] == event_id
    assert (document["kind"], document["task"], document["action"]) == (
        "decision",
        "ticket_classify",
        "rollback",
    )
    assert document["links"]["task"] == "https://shadowplane.example/v1/tasks/ticket_classify"

    # Refused: a tampered body, a wrong secret, an old (replayed) or a future timestamp.
    tampered = got.body.replace(b'"rollback"', b'"promote"')
    assert tampered != got.body
    assert not verify_signature(SECRET, got.headers, tampered, now=t)
    assert not verify_signature("another-secret", got.headers, got.body, now=t)
    assert not verify_signature(SECRET, got.headers, got.body, now=t + 301)
    assert not verify_signature(SECRET, got.headers, got.body, now=t - 301)
    assert not verify_signature(SECRET, got.headers, got.body, tolerance=10, now=t + 11)
    # A delivery id header other than the signed body's (a replay under a fresh id).
    other = {**got.headers, "X-Shadowplane-Delivery": "00000000-0000-0000-0000-000000000000"}
    assert not verify_signature(SECRET, other, got.body, now=t)
    # No signature, or a mangled one.
    unsigned = {k: v for k, v in got.headers.items() if k != "X-Shadowplane-Signature"}
    assert not verify_signature(SECRET, unsigned, got.body, now=t)
    for mangled in (f"v1={expected}", f"t={t}", f"t=soon,v1={expected}", "", "garbage"):
        assert not verify_signature(
            SECRET, {**got.headers, "X-Shadowplane-Signature": mangled}, got.body, now=t
        )


def test_the_sender_and_verify_signature_agree_and_a_second_v1_is_accepted() -> None:
    body = json.dumps({"delivery_id": "d-1", "kind": "alert"}).encode()
    header = signature(SECRET, 1_800_000_000, body)
    headers = {"X-Shadowplane-Signature": header, "X-Shadowplane-Delivery": "d-1"}
    assert verify_signature(SECRET, headers, body, now=1_800_000_000)
    # Several v1 values (a receiver mid-rotation of the secret): any match is enough.
    rotated = signature("old-secret", 1_800_000_000, body).split(",")[1]
    both = {**headers, "X-Shadowplane-Signature": f"{header},{rotated}"}
    assert verify_signature(SECRET, both, body, now=1_800_000_000)
    assert verify_signature("old-secret", both, body, now=1_800_000_000)
    # The delivery header is checked against the body only when it is sent.
    assert verify_signature(SECRET, {"X-Shadowplane-Signature": header}, body, now=1_800_000_000)
    assert not verify_signature(
        SECRET, {**headers, "X-Shadowplane-Delivery": "d-2"}, body, now=1_800_000_000
    )

"""Webhooks on every decision and alert (DESIGN §4): a signed JSON POST to each configured URL.

The body names the task, the action, the rule, one sentence of explanation, an evidence
summary and links built on `SHADOWPLANE_PUBLIC_URL`; the header
`X-Shadowplane-Signature: sha256=<hex HMAC-SHA256 of the raw body>` uses
`SHADOWPLANE_WEBHOOK_SECRET`. Delivery never blocks a decision: with Redis it is a Celery
job with retries and backoff; without, a background thread retries a few times. A
failing webhook is logged, never raised.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from typing import Any

import httpx

from controlplane.compare.jsonutil import dumps
from controlplane.models.base import utcnow
from controlplane.settings import Settings

log = logging.getLogger("shadowplane.webhooks")
SIGNATURE_HEADER = "X-Shadowplane-Signature"
ATTEMPTS = 4


class WebhookFailed(RuntimeError):
    pass


def sign(body: bytes, secret: str | None) -> str:
    return "sha256=" + hmac.new((secret or "").encode(), body, hashlib.sha256).hexdigest()


def decision_document(decision: dict[str, Any], public_url: str) -> dict[str, Any]:
    evidence = decision.get("evidence") or {}
    windows = evidence.get("windows") or []
    task = decision.get("task")
    return {
        "kind": "decision",
        "task": task,
        "action": decision["action"],
        "actor": decision["actor"],
        "rule": decision.get("rule"),
        "bucket": decision.get("bucket"),
        "explanation": evidence.get("explanation") or decision["reason"],
        "evidence": {
            "windows": len(windows),
            "last_window": windows[-1] if windows else None,
            "models": evidence.get("models", []),
            "examples": evidence.get("examples", [])[:5],
            "flag_version_before": decision.get("flag_version_before"),
            "flag_version_after": decision.get("flag_version_after"),
        },
        "links": _links(public_url, task, decision_id=decision["id"]),
        "sent_at": utcnow().isoformat(),
    }


def alert_document(event: Any, public_url: str) -> dict[str, Any]:
    return {
        "kind": "alert",
        "task": event.task,
        "action": f"alert_{event.change}",
        "rule": event.kind,
        "explanation": event.message,
        "evidence": {"alert": event.alert_id},
        "links": _links(public_url, event.task),
        "sent_at": utcnow().isoformat(),
    }


def _links(public_url: str, task: str | None, decision_id: int | None = None) -> dict[str, str]:
    base = public_url.rstrip("/")
    links = {"decisions": f"{base}/v1/decisions" + (f"?task={task}" if task else "")}
    if task:
        links.update(
            task=f"{base}/v1/tasks/{task}",
            windows=f"{base}/v1/tasks/{task}/windows",
            alerts=f"{base}/v1/alerts?task={task}",
        )
    return links


def deliver(url: str, body: bytes, secret: str | None, timeout: float = 5.0) -> None:
    """One POST; raises WebhookFailed (or httpx.HTTPError) unless the receiver answers 2xx."""
    response = httpx.post(
        url,
        content=body,
        headers={"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, secret)},
        timeout=timeout,
    )
    if not response.is_success:
        raise WebhookFailed(f"{url} answered {response.status_code}")


class Notifier:
    """Sends documents to every configured URL, off the caller's path."""

    def __init__(self, settings: Settings) -> None:
        self.urls = [u.strip() for u in settings.webhook_urls.split(",") if u.strip()]
        self.secret = settings.webhook_secret
        self.public_url = settings.public_url
        self.use_celery = bool(settings.redis_url)

    def announce(self, documents: list[dict[str, Any]]) -> None:
        for document in documents:
            body = dumps(document)
            for url in self.urls:
                if self.use_celery:
                    self._enqueue(url, body)
                else:
                    threading.Thread(target=self._send, args=(url, body), daemon=True).start()

    def decisions(self, decisions: list[dict[str, Any]]) -> None:
        self.announce([decision_document(d, self.public_url) for d in decisions])

    def alerts(self, events: list[Any]) -> None:
        self.announce([alert_document(e, self.public_url) for e in events])

    def _enqueue(self, url: str, body: bytes) -> None:
        try:
            from workers.app import app

            app.send_task("webhooks.deliver", args=[url, body.decode()])
        except Exception as exc:  # the broker is down: send from here instead
            log.warning("webhook not queued (%s); sending in-process", exc)
            threading.Thread(target=self._send, args=(url, body), daemon=True).start()

    def _send(self, url: str, body: bytes) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                deliver(url, body, self.secret)
                return
            except (httpx.HTTPError, WebhookFailed) as exc:
                log.warning(
                    "webhook to %s failed (attempt %d of %d): %s", url, attempt, ATTEMPTS, exc
                )
                time.sleep(min(30, 2**attempt))

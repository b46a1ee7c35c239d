"""Webhook documents: what a decision, an alert or a notice announces.

Writers store the document with the event (`outbox.add_event`); the links, the event and
delivery ids and `sent_at` are added when it is sent (`webhook_body`), so writers need no
settings and every attempt of one delivery carries the same ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol


class AlertLike(Protocol):
    """An alert event (`controlplane.alerts.service.AlertEvent`); notify does not import alerts."""

    @property
    def alert_id(self) -> int: ...
    @property
    def task(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def change(self) -> str: ...
    @property
    def message(self) -> str: ...


def decision_document(decision: dict[str, Any]) -> dict[str, Any]:
    """A decision view (`id`, `task`, `action`, `actor`, `reason`, `evidence`, …) to announce."""
    evidence = decision.get("evidence") or {}
    # The windows of the firing's run: a CUSUM's steps, else the verdicts.
    windows = evidence.get("steps") or evidence.get("windows") or []
    return {
        "kind": "decision",
        "task": decision.get("task"),
        "decision_id": decision.get("id"),
        "action": decision["action"],
        "actor": decision["actor"],
        "rule": decision.get("rule"),
        "bucket": decision.get("bucket"),
        "stage_before": decision.get("stage_before"),
        "stage_after": decision.get("stage_after"),
        "explanation": evidence.get("explanation") or decision["reason"],
        "evidence": {
            "windows": len(windows),
            "last_window": windows[-1] if windows else None,
            "models": evidence.get("models", []),
            "examples": evidence.get("examples", [])[:5],
            "flag_version_before": decision.get("flag_version_before"),
            "flag_version_after": decision.get("flag_version_after"),
            # A span rule's components (net_savings: money and per 1k; input_shift: both
            # histograms and the index), as the decision keeps them.
            **({"span": evidence["span"]} if evidence.get("span") else {}),
        },
    }


def alert_document(event: AlertLike) -> dict[str, Any]:
    """An alert opened or resolved."""
    return {
        "kind": "alert",
        "task": event.task,
        "action": f"alert_{event.change}",
        "rule": event.kind,
        "explanation": event.message,
        "evidence": {"alert": event.alert_id},
    }


def notice_document(notice: dict[str, Any]) -> dict[str, Any]:
    """A rule in notify mode that would have acted (`task`, `rule`, `bucket`, `window_end`:
    the end of the window at which it fired, `explanation`); announced once per firing."""
    return {
        "kind": "notice",
        "task": notice.get("task"),
        "action": notice.get("action", "notify"),
        "rule": notice.get("rule"),
        "bucket": notice.get("bucket"),
        "window_end": notice.get("window_end"),
        "explanation": notice.get("explanation"),
        # A span rule's notice carries the components its sentence is computed from.
        **({"evidence": notice["evidence"]} if notice.get("evidence") else {}),
    }


def change_document(
    *, action: str, task: str | None, actor: str, explanation: str, details: dict[str, Any]
) -> dict[str, Any]:
    """A change that is no decision: a task config applied, a model unblocked, a key created
    or revoked (`action` as in the audit log). Announced, so a receiver hears every change."""
    return {
        "kind": "change",
        "task": task,
        "action": action,
        "actor": actor,
        "explanation": explanation,
        "details": details,
    }


def links(public_url: str, task: str | None) -> dict[str, str]:
    base = public_url.rstrip("/")
    out = {"decisions": f"{base}/v1/decisions" + (f"?task={task}" if task else "")}
    if task:
        out.update(
            task=f"{base}/v1/tasks/{task}",
            windows=f"{base}/v1/tasks/{task}/windows",
            alerts=f"{base}/v1/alerts?task={task}",
        )
    return out


def webhook_body(
    document: dict[str, Any],
    *,
    public_url: str,
    event_id: int,
    delivery_id: str,
    sent_at: datetime,
) -> dict[str, Any]:
    """The JSON body of one attempt: the stored document, its links, and the ids receivers
    dedupe on (the delivery id is also the `X-Shadowplane-Delivery` header, and being in
    the body it is covered by the signature)."""
    return {
        **document,
        "links": links(public_url, document.get("task")),
        "event_id": event_id,
        "delivery_id": delivery_id,
        "sent_at": sent_at.isoformat(),
    }

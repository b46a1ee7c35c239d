"""People's actions on alerts: acknowledge (audited, announced), whichever door calls it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.alerts import service
from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.notify.documents import alert_document
from controlplane.notify.outbox import add_event

# The longest note an acknowledgement keeps (as the API's body allows).
MAX_NOTE = 2000


def acknowledge(
    engine: Engine, alert_id: int, *, actor: str, note: str | None = None
) -> dict[str, Any]:
    """Acknowledge an open alert: audit entry and outbox event in one transaction. An alert
    already acknowledged or resolved is answered as it is (nothing written). 404 when none;
    422 for a note longer than MAX_NOTE, whichever door it comes through."""
    if note is not None and len(note) > MAX_NOTE:
        raise ActionError(422, f"note: at most {MAX_NOTE} characters, got {len(note)}")

    def work(session: Session) -> dict[str, Any]:
        try:
            view, event = service.acknowledge(session, alert_id, actor=actor, note=note)
        except service.AlertNotFound as exc:
            raise ActionError(404, str(exc)) from None
        if event is not None:
            add_event(session, kind="alert", task=event.task, document=alert_document(event))
        return view

    return in_transaction(engine, work)

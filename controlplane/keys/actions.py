"""Key actions (create, revoke): validation, one transaction, the audit entry and the
announcement (a change event in the outbox: who created or revoked which key, never the key)."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.keys import service
from controlplane.models import ApiKey
from controlplane.notify.documents import change_document
from controlplane.notify.outbox import add_event


def _announce(session: Session, *, action: str, actor: str, key: ApiKey) -> None:
    verb = "created" if action == "key.create" else "revoked"
    add_event(
        session,
        kind="change",
        task=None,
        document=change_document(
            action=action,
            task=None,
            actor=actor,
            explanation=f"key {key.name!r} ({', '.join(key.scopes)}) {verb} by {actor}",
            details={"name": key.name, "scopes": list(key.scopes)},
        ),
    )


def create_key(engine: Engine, *, name: str, scopes: list[str], actor: str) -> tuple[ApiKey, str]:
    """A new key and its plaintext (shown once, never stored)."""

    def work(session: Session) -> tuple[ApiKey, str]:
        key, plaintext = service.create_key(session, name=name, scopes=scopes, actor=actor)
        _announce(session, action="key.create", actor=actor, key=key)
        return key, plaintext

    try:
        return in_transaction(engine, work)
    except service.KeyCommandError as exc:
        raise ActionError(exc.status, str(exc)) from None


def revoke_key(engine: Engine, *, name: str, actor: str) -> ApiKey:
    """Revoke a key (idempotent: revoking again announces nothing); every API process stops
    accepting it within 5 seconds."""

    def work(session: Session) -> ApiKey:
        already = service.is_revoked(session, name)
        key = service.revoke_key(session, name=name, actor=actor)
        if not already:
            _announce(session, action="key.revoke", actor=actor, key=key)
        return key

    try:
        return in_transaction(engine, work)
    except service.KeyCommandError as exc:
        raise ActionError(exc.status, str(exc)) from None

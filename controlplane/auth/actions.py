"""Key actions (create, revoke): validation, one transaction, the audit entry."""

from __future__ import annotations

from sqlalchemy import Engine

from controlplane.auth import service
from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.models import ApiKey


def create_key(engine: Engine, *, name: str, scopes: list[str], actor: str) -> tuple[ApiKey, str]:
    """A new key and its plaintext (shown once, never stored)."""
    try:
        return in_transaction(
            engine, lambda s: service.create_key(s, name=name, scopes=scopes, actor=actor)
        )
    except service.KeyCommandError as exc:
        raise ActionError(exc.status, str(exc)) from None


def revoke_key(engine: Engine, *, name: str, actor: str) -> ApiKey:
    """Revoke a key (idempotent); every API process stops accepting it within 5 seconds."""
    try:
        return in_transaction(engine, lambda s: service.revoke_key(s, name=name, actor=actor))
    except service.KeyCommandError as exc:
        raise ActionError(exc.status, str(exc)) from None

"""Creating, listing and revoking API keys; each change is recorded in the audit log.

Keys are 32 random bytes (`sp_` + URL-safe base64); only their SHA-256 is stored.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.auth.scopes import SCOPES
from controlplane.auth.service import hash_key
from controlplane.models import ApiKey
from controlplane.models.base import utcnow

KEY_PREFIX = "sp_"


class KeyCommandError(ValueError):
    """A key command that cannot be done (unknown scope, duplicate name, unknown key);
    `status` is the HTTP answer it would be."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(session: Session, *, name: str, scopes: list[str], actor: str) -> tuple[ApiKey, str]:
    """A new key; the plaintext is returned once and never stored."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise KeyCommandError(
            f"scope: {unknown or scopes} not allowed; choose from {', '.join(SCOPES)}"
        )
    if not name.strip() or len(name) > 100:
        raise KeyCommandError("name: must be 1 to 100 characters")
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        raise KeyCommandError(f"name: a key named {name!r} already exists", 409)
    plaintext = generate_key()
    key = ApiKey(
        name=name,
        key_hash=hash_key(plaintext),
        prefix=plaintext[:10],
        scopes=sorted(set(scopes)),
    )
    session.add(key)
    session.flush()
    record(
        session,
        actor=actor,
        action="key.create",
        task=None,
        details={"name": name, "scopes": key.scopes},
    )
    return key, plaintext


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.id)))


def is_revoked(session: Session, name: str) -> bool:
    """Whether the key named `name` exists and is already revoked."""
    revoked = session.scalar(select(ApiKey.revoked_at).where(ApiKey.name == name))
    return revoked is not None


def revoke_key(session: Session, *, name: str, actor: str) -> ApiKey:
    key = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if key is None:
        raise KeyCommandError(f"name: no key named {name!r}", 404)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
        record(session, actor=actor, action="key.revoke", task=None, details={"name": name})
    return key

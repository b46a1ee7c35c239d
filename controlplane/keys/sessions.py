"""The dashboard's sessions: a person signs in once with a key, and the browser holds a
random token (never the key) that stands for it until the session expires, the person
signs out, or the key is revoked.

Only the token's SHA-256 is stored. Every check reads the session with its key, so a
revoked key's sessions end at their next check. Ended and expired sessions are deleted
when someone signs in, so the table holds little more than the live ones.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, or_, select, update
from sqlalchemy.orm import Session

from controlplane.auth.service import Principal, hash_key
from controlplane.db import in_transaction, session_scope
from controlplane.models import ApiKey, DashboardSession

# The scopes people sign in with; routing services' keys are refused, saying why.
PEOPLE_SCOPES = ("read", "review", "admin")
REFUSED = {
    "ingest": "it is a routing service's key for posting results",
    "flags:read": "it is a routing service's key for reading flags",
}
UNKNOWN = "That key is not known, or it was revoked."


class SignInRefused(ValueError):
    """A key that cannot sign in to the dashboard; the message says why."""


def refusal(principal: Principal) -> str | None:
    """Why this key cannot sign in to the dashboard, or None when it can."""
    if any(s in principal.scopes for s in PEOPLE_SCOPES):
        return None
    held = sorted(principal.scopes)
    why = "; ".join(f"{s}: {REFUSED[s]}" for s in held if s in REFUSED) or "no scope"
    return (
        f"The key {principal.name!r} cannot sign in to the dashboard ({why}). "
        "Sign in with a key of scope read, review or admin."
    )


def _principal(key: ApiKey) -> Principal:
    # As controlplane.auth.service.KeyCache gives it, so both doors name a key alike.
    return Principal(name=key.name, scopes=frozenset(key.scopes), key_id=key.key_hash[:16])


def start(engine: Engine, key: str, *, now: datetime, lasts: timedelta) -> tuple[str, Principal]:
    """A new session for `key` until `now + lasts`: its token (for the browser's cookie)
    and the key's principal. SignInRefused for an unknown or revoked key, and for a key of
    no person's scope."""

    def work(session: Session) -> tuple[str, Principal]:
        found = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key.strip())))
        if found is None or found.revoked_at is not None:
            raise SignInRefused(UNKNOWN)
        principal = _principal(found)
        why = refusal(principal)
        if why is not None:
            raise SignInRefused(why)
        session.execute(
            delete(DashboardSession).where(
                or_(DashboardSession.ended_at.is_not(None), DashboardSession.expires_at <= now)
            )
        )
        token = secrets.token_urlsafe(32)
        session.add(
            DashboardSession(
                token_hash=hash_key(token), key_id=found.id, created_at=now, expires_at=now + lasts
            )
        )
        session.flush()
        return token, principal

    return in_transaction(engine, work)


def principal(engine: Engine, token: str, *, now: datetime) -> Principal | None:
    """The principal of a live session (not ended, not expired, its key not revoked and
    still a person's key), or None."""
    with session_scope(engine) as session:
        found = session.scalar(
            select(ApiKey)
            .join(DashboardSession, DashboardSession.key_id == ApiKey.id)
            .where(
                DashboardSession.token_hash == hash_key(token),
                DashboardSession.ended_at.is_(None),
                DashboardSession.expires_at > now,
                ApiKey.revoked_at.is_(None),
            )
        )
        if found is None:
            return None
        signed_in = _principal(found)
    return signed_in if refusal(signed_in) is None else None


def end(engine: Engine, token: str, *, now: datetime) -> bool:
    """Sign out: the session ends for every tab holding its token; whether one was live."""

    def work(session: Session) -> bool:
        ended = session.execute(
            update(DashboardSession)
            .where(
                DashboardSession.token_hash == hash_key(token),
                DashboardSession.ended_at.is_(None),
            )
            .values(ended_at=now)
        )
        return bool(getattr(ended, "rowcount", 0))

    return in_transaction(engine, work)

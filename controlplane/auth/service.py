"""Creating, listing, revoking and checking API keys.

Keys are 32 random bytes (`sp_` + URL-safe base64). Only their SHA-256 is stored; a
request's key is hashed and looked up by the unique index (no slow hash on the request
path), then compared in constant time. Each process caches a key's record for
`key_cache_seconds` (5 s), so a revoked key stops within 5 s, and known keys keep working
while the database is down.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.audit.service import record
from controlplane.auth.scopes import SCOPES
from controlplane.models import ApiKey
from controlplane.models.base import utcnow

KEY_PREFIX = "sp_"
# Each process remembers at most this many valid keys, and apart from them at most
# MAX_CACHED_UNKNOWN_KEYS made-up or revoked ones: a flood of junk tokens only ever pushes
# out other junk, never a key that must keep working through a database outage.
MAX_CACHED_KEYS = 10_000
MAX_CACHED_UNKNOWN_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    scopes: frozenset[str]
    # A short, stable id of the key (the head of its hash) for rate-limit buckets.
    key_id: str = ""


class KeyCommandError(ValueError):
    """A key command that cannot be done (unknown scope, duplicate name, unknown key);
    `status` is the HTTP answer it would be."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


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


def revoke_key(session: Session, *, name: str, actor: str) -> ApiKey:
    key = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if key is None:
        raise KeyCommandError(f"name: no key named {name!r}", 404)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
        record(session, actor=actor, action="key.revoke", task=None, details={"name": name})
    return key


@dataclass(slots=True)
class _Cached:
    principal: Principal | None  # None: no such key, or revoked
    fetched_at: float


class KeyCache:
    """Per-process cache of key records, keyed by the key's hash, least recently used out.

    Valid keys and unknown (or revoked) ones are kept in two separate LRUs, so made-up
    tokens evict each other and never a valid key.
    """

    def __init__(self, sessions: sessionmaker[Session], ttl_seconds: float = 5.0) -> None:
        self._sessions = sessions
        self._ttl = ttl_seconds
        self._valid: OrderedDict[str, _Cached] = OrderedDict()
        self._unknown: OrderedDict[str, _Cached] = OrderedDict()
        self._lock = threading.Lock()

    def authenticate(self, key: str) -> Principal | None:
        """The key's principal, or None for an unknown or revoked key.

        Raises SQLAlchemyError only when the database is unreachable and the key was never
        seen by this process (a known key is served from the stale record instead).
        """
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._lookup(digest)
        if cached is not None and now - cached.fetched_at < self._ttl:
            return cached.principal
        try:
            principal = self._load(digest)
        except SQLAlchemyError:
            if cached is not None:
                return cached.principal
            raise
        self._store(digest, _Cached(principal, now))
        return principal

    def knows(self, key: str) -> bool:
        """Whether this process holds `key` as valid (fresh or stale), without any query."""
        digest = hash_key(key)
        with self._lock:
            return digest in self._valid

    def _lookup(self, digest: str) -> _Cached | None:
        with self._lock:
            for entries in (self._valid, self._unknown):
                cached = entries.get(digest)
                if cached is not None:
                    entries.move_to_end(digest)
                    return cached
        return None

    def _store(self, digest: str, entry: _Cached) -> None:
        entries, other, limit = (
            (self._valid, self._unknown, MAX_CACHED_KEYS)
            if entry.principal is not None
            else (self._unknown, self._valid, MAX_CACHED_UNKNOWN_KEYS)
        )
        with self._lock:
            other.pop(digest, None)  # a key revoked (or created) since it was cached
            entries[digest] = entry
            entries.move_to_end(digest)
            while len(entries) > limit:
                entries.popitem(last=False)

    def _load(self, digest: str) -> Principal | None:
        with self._sessions() as session:
            row = session.execute(
                select(ApiKey.name, ApiKey.key_hash, ApiKey.scopes, ApiKey.revoked_at).where(
                    ApiKey.key_hash == digest
                )
            ).first()
        if row is None or not hmac.compare_digest(row.key_hash, digest):
            return None
        revoked: datetime | None = row.revoked_at
        if revoked is not None:
            return None
        return Principal(name=row.name, scopes=frozenset(row.scopes), key_id=digest[:16])

"""Checking API keys: hashing a request's key and the process's snapshot of active keys.

A request's key is hashed (no slow hash on the request path) and looked up in the process's
snapshot of all active keys (KeyCache), read again every `key_cache_seconds` (5 s), so a
revoked key stops within 5 s, a new key works within about a second, a made-up token costs
no query, and known keys keep working while the database is down.
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.models import ApiKey

# A token this process does not know reads the key table again at most this often: a key
# created a moment ago works within about a second, and a flood of made-up tokens costs at
# most one query a second per process.
MISS_REFRESH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    scopes: frozenset[str]
    # A short, stable id of the key (the head of its hash) for rate-limit buckets.
    key_id: str = ""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyCache:
    """This process's snapshot of every active key: its hash → its principal.

    The key table is small, so the whole of it is read at once and kept:

    - a token whose hash is in the snapshot is served from memory;
    - the snapshot is read again once it is `ttl_seconds` old (a revoked key stops within
      that), by the first request after that;
    - a token not in the snapshot reads it again at most once every `miss_refresh_seconds`
      (a key created since is picked up within about a second), and is otherwise refused
      without any query: a flood of made-up tokens costs one query a second per process,
      however many addresses it comes from;
    - while the database cannot be read, the last snapshot keeps serving the keys it holds
      (known keys keep working through an outage); a token it does not hold cannot be
      checked, and the database error is raised (the API answers 503). A failed read is
      tried again at most once every `miss_refresh_seconds`.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        ttl_seconds: float = 5.0,
        *,
        miss_refresh_seconds: float = MISS_REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._ttl = ttl_seconds
        self._miss_refresh = miss_refresh_seconds
        self._clock = clock
        # (hash → principal, when it was read): replaced whole, so one read sees both.
        self._snapshot: tuple[dict[str, Principal], float] = ({}, -math.inf)
        self._tried_at = -math.inf  # the last read, successful or not
        self._error: SQLAlchemyError | None = None  # the last read's error; None if it worked
        # One read at a time: requests that need one meanwhile take its outcome.
        self._reading = threading.Lock()

    def authenticate(self, key: str) -> Principal | None:
        """The key's principal, or None for an unknown or revoked key.

        Raises SQLAlchemyError only when the database cannot be read and the key is not in
        the last snapshot (a key it holds is served from it instead).
        """
        digest = hash_key(key)
        now = self._clock()
        tried_at, error = self._tried_at, self._error
        keys, loaded_at = self._snapshot
        # A lookup by the hash of a random 32-byte key: its timing tells nothing usable.
        principal = keys.get(digest)
        recently_tried = now - tried_at < self._miss_refresh
        if now - loaded_at < self._ttl and (principal is not None or recently_tried):
            return principal
        if error is not None and recently_tried:
            # The database failed a moment ago: do not ask it again yet.
            if principal is not None:
                return principal
            raise copy.copy(error)  # a copy: re-raising one object grows its traceback
        try:
            # A known key does not wait behind another request's read: it is served as is.
            read = self._read(tried_at, wait=principal is None)
        except SQLAlchemyError:
            if principal is not None:
                return principal
            raise
        return principal if read is None else read.get(digest)

    def due_in(self) -> float:
        """Seconds until the snapshot is read again (0 when it is due now): a check of a key
        made then sees every revocation made before the last read."""
        return max(0.0, self._ttl - (self._clock() - self._snapshot[1]))

    def known(self, key: str) -> Principal | None:
        """The key's principal when the current snapshot holds it, without any query (None:
        unknown to the snapshot, or the snapshot is due to be read again)."""
        keys, loaded_at = self._snapshot
        if self._clock() - loaded_at >= self._ttl:
            return None
        return keys.get(hash_key(key))

    def _read(self, tried_at: float, *, wait: bool) -> dict[str, Principal] | None:
        """The snapshot read again, or as another request read it since `tried_at` (the
        last read the caller saw); None without `wait` while another request is reading."""
        if not self._reading.acquire(blocking=wait):
            return None
        try:
            if self._tried_at != tried_at:  # read by another request meanwhile
                if self._error is not None:
                    raise copy.copy(self._error)
                return self._snapshot[0]
            self._tried_at = started = self._clock()
            try:
                keys = self._load()
            except SQLAlchemyError as exc:
                self._error = exc
                raise
            self._snapshot, self._error = (keys, started), None
            return keys
        finally:
            self._reading.release()

    def _load(self) -> dict[str, Principal]:
        """Every key that is not revoked, by its hash."""
        with self._sessions() as session:
            rows = session.execute(
                select(ApiKey.name, ApiKey.key_hash, ApiKey.scopes).where(
                    ApiKey.revoked_at.is_(None)
                )
            ).all()
        return {
            row.key_hash: Principal(
                name=row.name, scopes=frozenset(row.scopes), key_id=row.key_hash[:16]
            )
            for row in rows
        }

"""Announcing a new flag revision once the transaction that made it has committed.

`controlplane.rollout.flags` marks the session (`mark`) when it stores a flag version; after
that session commits, every process-local listener hears the revision (the API's in-process
copy reloads at once), and with Redis configured the revision is written to a key and
published on a channel, so every other API process reloads too. Announcing is best effort
and never fails the commit: a process that misses it still finds the change on its next
check (controlplane.rollout.flagcopy).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from controlplane.logs import REDIS
from controlplane.settings import get_settings

log = logging.getLogger("shadowplane.flags")

# One deployment per Redis (like the rate-limit buckets): the revision every writer set last,
# and the channel every API process listens on.
CHANNEL = "shadowplane:flags"
KEY = "shadowplane:flags:revision"
REDIS_TIMEOUT_SECONDS = 0.25
REDIS_RETRY_SECONDS = 5.0

_PENDING = "shadowplane.flags.revision"
Listener = Callable[[Engine, int], None]
_listeners: list[Listener] = []
_redis_urls: list[str] = []
_lock = threading.Lock()


def mark(session: Session, revision: int) -> None:
    """Announce `revision` once this session's transaction commits (never if it rolls back)."""
    session.info[_PENDING] = max(revision, session.info.get(_PENDING, revision))


def add_listener(listener: Listener) -> Callable[[], None]:
    """Call `listener(engine, revision)` in this process after every commit that made a new
    revision; returns the function that removes it."""
    with _lock:
        _listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


def add_redis(url: str) -> Callable[[], None]:
    """Publish revisions to the Redis at `url` too (the API's own setting, which may differ
    from the environment's in tests); returns the function that removes it."""
    with _lock:
        _redis_urls.append(url)

    def remove() -> None:
        with _lock:
            if url in _redis_urls:
                _redis_urls.remove(url)

    return remove


class Publisher:
    """Writes the revision to `KEY` and publishes it on `CHANNEL`, in one round trip. After a
    failure Redis is left alone for a few seconds (readers fall back to the database then)."""

    def __init__(self, url: str) -> None:
        import redis

        # Any exception out of the client is a Redis failure (redis-py also raises
        # AttributeError when a connection is torn down under a call).
        self._errors: tuple[type[Exception], ...] = (Exception,)
        self._client: Any = redis.Redis.from_url(
            url,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
            socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        )
        self._down_until = 0.0

    def publish(self, revision: int) -> bool:
        if time.monotonic() < self._down_until:
            return False
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.set(KEY, revision)
            pipe.publish(CHANNEL, revision)
            pipe.execute()
        except self._errors as exc:
            self._down_until = time.monotonic() + REDIS_RETRY_SECONDS
            REDIS.failed(exc)
            log.info(
                '{"event": "flag_revision_not_published", "revision": %d, "error": "%s", '
                '"effect": "API processes find it on their next database check"}',
                revision,
                type(exc).__name__,
            )
            return False
        self._down_until = 0.0
        REDIS.answered()
        return True


_publishers: dict[str, Publisher] = {}


def publisher(url: str) -> Publisher:
    with _lock:
        found = _publishers.get(url)
        if found is None:
            found = _publishers[url] = Publisher(url)
        return found


def _configured_redis() -> str | None:
    try:
        return get_settings().redis_url
    except Exception:  # settings that do not parse fail the process elsewhere, loudly
        return None


def announce(engine: Engine, revision: int) -> None:
    """Tell this process's listeners and every configured Redis; never raises."""
    with _lock:
        listeners = list(_listeners)
        urls = list(dict.fromkeys([*_redis_urls, _configured_redis()]))
    for listener in listeners:
        try:
            listener(engine, revision)
        except Exception as exc:
            log.warning("flag listener failed (%s: %s)", type(exc).__name__, exc)
    for url in urls:
        if url:
            publisher(url).publish(revision)


@event.listens_for(Session, "after_commit")
def _announce_after_commit(session: Session) -> None:
    revision = session.info.pop(_PENDING, None)
    if revision is None:
        return
    bind = session.get_bind()
    announce(bind if isinstance(bind, Engine) else bind.engine, revision)


@event.listens_for(Session, "after_rollback")
def _rolled_back(session: Session) -> None:
    session.info.pop(_PENDING, None)

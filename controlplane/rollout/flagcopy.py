"""The in-process copy of the flags every API process answers from (docs/http-api.md, "Flags").

`snapshot()` hands out bytes built once per revision, so a poll never touches storage. The
copy follows the global revision (this process's commits, Redis messages and the revision
key, the database as a backstop); when neither can be reached the last copy is served with
its `stale_seconds`, and only a process that never loaded one answers 503.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Engine, select

from controlplane.compare.jsonutil import dumps
from controlplane.db import session_scope
from controlplane.logs import DATABASE, REDIS, noticed
from controlplane.models import FlagState
from controlplane.rollout import flagbus, flags
from controlplane.rollout.flags import etag

log = logging.getLogger("shadowplane.flags")

# With Redis, the database is still read this often: a revision a writer failed to publish
# (Redis blinked between its commit and its publish) is found within this time.
DB_BACKSTOP_SECONDS = 10.0
# The copy counts as stale once its last confirmation is older than this many check
# intervals (at least STALE_FLOOR_SECONDS), even before a check has failed: a check stuck
# on an unanswering network is as good as a failed one.
STALE_CHECKS = 3
STALE_FLOOR_SECONDS = 5.0


class NoFlagsYet(Exception):
    """No copy was ever loaded and storage cannot be reached: answer 503."""

    def __init__(self) -> None:
        super().__init__(
            "flags: this process has not loaded the flags yet and storage is unreachable; "
            "retry (routers route to the cloud meanwhile)"
        )


@dataclass(frozen=True, slots=True)
class FlagSnapshot:
    """One revision of the flags, rendered: treat every field as read-only."""

    revision: int
    flags: Mapping[str, dict[str, Any]]
    # The canonical `{"flags": ..., "revision": ...}` and its ETag.
    body: bytes
    etag: str
    # task → (canonical flag body, its ETag)
    tasks: Mapping[str, tuple[bytes, str]] = field(repr=False)
    # None while the copy is confirmed; else seconds since it was last confirmed.
    stale_seconds: float | None = None

    def task_body(self, task: str) -> bytes | None:
        found = self.tasks.get(task)
        return found[0] if found is not None else None

    def task_etag(self, task: str) -> str | None:
        found = self.tasks.get(task)
        return found[1] if found is not None else None


def build(document: Mapping[str, Any]) -> FlagSnapshot:
    """Render `{"revision": n, "flags": {task: flag}}` once: bodies and ETags."""
    body = dumps(document, sort_keys=True)
    tasks = {}
    for name, flag in document["flags"].items():
        task_body = dumps(flag, sort_keys=True)
        tasks[name] = (task_body, etag(task_body))
    return FlagSnapshot(
        revision=int(document["revision"]),
        flags=dict(document["flags"]),
        body=body,
        etag=etag(body),
        tasks=tasks,
    )


def load(engine: Engine) -> FlagSnapshot:
    """Read every flag once (the revision first: a change committed in between makes the
    next check reload, never hides it)."""
    with session_scope(engine) as session:
        return build(flags.flags_document(session))


def db_revision(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(FlagState.revision).where(FlagState.id == 1)) or 0)


class FlagCopy:
    """One API process's copy of the flags; `start()` loads it and starts following."""

    def __init__(
        self, engine: Engine, *, redis_url: str | None = None, check_seconds: float = 1.0
    ) -> None:
        self._engine = engine
        self._redis_url = redis_url
        self._check_seconds = check_seconds
        self._stale_after = max(STALE_FLOOR_SECONDS, STALE_CHECKS * check_seconds)
        self._current: FlagSnapshot | None = None
        self._confirmed_at = 0.0
        self._failing = False
        self._lock = threading.Lock()
        # Loads that end out of order (this thread's and a committing request's) never
        # replace a newer read with an older one: each load takes a ticket when it starts.
        self._tickets = 0
        self._applied = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._removers: list[Any] = []
        # One future per event loop that waits for a change (streams), done at the next one.
        self._waiters: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}
        self._redis: Any = None
        self._redis_errors: tuple[type[Exception], ...] = ()
        self._redis_down_until = 0.0
        self._last_db_check = 0.0
        self.closed = False

    # --- the request path: memory only ---------------------------------------------------

    def snapshot(self) -> FlagSnapshot:
        """The current copy (marked stale when it could not be confirmed lately)."""
        current = self._current
        if current is None:
            raise NoFlagsYet()
        age = time.monotonic() - self._confirmed_at
        if self._failing or age > self._stale_after:
            return replace(current, stale_seconds=age)
        return current

    def next_change(self) -> asyncio.Future[None]:
        """A future of the running loop, done at the copy's next change (or when it stops).
        Shared by every waiter of the loop: await it through `asyncio.wait`, never cancel it.
        Take it before looking at `snapshot()`, so no change falls between the two."""
        loop = asyncio.get_running_loop()
        with self._lock:
            change = self._waiters.get(loop)
            if change is None or change.done():
                change = self._waiters[loop] = loop.create_future()
        return change

    async def wait_changed(self, after_revision: int, timeout: float) -> FlagSnapshot:
        """The copy once its revision is not `after_revision` any more, or after `timeout`
        seconds (or when the copy stops), whichever comes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            change = self.next_change()
            current = self.snapshot()
            remaining = deadline - loop.time()
            if current.revision != after_revision or self.closed or remaining <= 0:
                return current
            await asyncio.wait((change,), timeout=remaining)

    # --- following the revision ----------------------------------------------------------

    def start(self) -> None:
        """Load the copy (a failure is retried every check) and start following."""
        self._removers.append(flagbus.add_listener(self._committed))
        if self._redis_url:
            import redis

            # Any exception out of the client is a Redis failure: redis-py also raises
            # AttributeError when a connection is torn down under a read.
            self._redis_errors = (Exception,)
            self._redis = redis.Redis.from_url(
                self._redis_url,
                socket_timeout=flagbus.REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=flagbus.REDIS_TIMEOUT_SECONDS,
            )
            self._removers.append(flagbus.add_redis(self._redis_url))
        self._check(hint=None, use_key=False)
        self._thread = threading.Thread(target=self._run, name="shadowplane-flags", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.closed = True
        self._stop.set()
        for remove in self._removers:
            remove()
        self._removers.clear()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._notify()

    def reload(self) -> FlagSnapshot:
        """Read the flags now (raises when storage cannot be reached)."""
        with self._lock:
            ticket = self._tickets
            self._tickets += 1
        fresh = load(self._engine)
        with self._lock:
            current = self._current
            if ticket > self._applied:
                self._applied = ticket
                self._current = fresh
            self._last_db_check = time.monotonic()
        self._confirmed(self._last_db_check, by_database=True)
        if current is None or (fresh.revision, fresh.etag) != (current.revision, current.etag):
            self._notify()
        return self.snapshot()

    def _committed(self, engine: Engine, revision: int) -> None:
        # A commit in this process: read it back at once, so this process answers its own
        # change on the next request (the thread would find it within a check).
        if engine.url != self._engine.url or self.closed:
            return
        current = self._current
        if current is not None and current.revision == revision:
            return
        try:
            self.reload()
        except Exception as exc:
            if not noticed(exc):
                log.warning("flag copy not reloaded after a commit (%s)", type(exc).__name__)

    def _notify(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, {}
        for loop, change in waiters.items():
            try:
                loop.call_soon_threadsafe(_resolve, change)
            except RuntimeError:  # that loop has closed: nobody waits on it any more
                pass

    def _run(self) -> None:
        # The copy must keep following whatever happens: an unexpected error is logged,
        # and the loop starts again a check later (never dies silently, never spins).
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as exc:
                if not noticed(exc):
                    log.exception('{"event": "flags_follower_error", "effect": "restarting"}')
                self._stop.wait(self._check_seconds)

    def _follow(self) -> None:
        pubsub: Any = None
        next_check = time.monotonic() + self._check_seconds
        while not self._stop.is_set():
            hint: int | None = None
            wait = max(0.0, next_check - time.monotonic())
            if self._redis is not None and pubsub is None and self._redis_up():
                pubsub = self._subscribe()
                if pubsub is not None:
                    hint = -1  # messages may have been missed before: check now
            if hint is None and pubsub is not None:
                try:
                    # At most a second at a time, so stop() is not kept waiting.
                    message = pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=min(wait, 1.0)
                    )
                    if message is not None and message.get("type") == "message":
                        hint = int(message["data"])
                except self._redis_errors as exc:
                    self._redis_failed(exc)
                    pubsub = self._close(pubsub)
            elif hint is None:
                self._stop.wait(wait)
            if self._stop.is_set():
                break
            current = self._current
            if hint is not None and current is not None and hint == current.revision:
                continue  # our own publish, or one we loaded already
            if hint is not None or time.monotonic() >= next_check:
                self._check(hint=hint, use_key=hint is None)
                next_check = time.monotonic() + self._check_seconds
                if pubsub is not None and not self._redis_up():
                    pubsub = self._close(pubsub)
        self._close(pubsub)

    def _check(self, *, hint: int | None, use_key: bool) -> None:
        """Confirm the copy or reload it: the Redis key when it can say so, else the
        database. A failure of both marks the copy stale (it is kept and served)."""
        now = time.monotonic()
        key: int | None = None
        key_read = False
        if use_key and self._redis is not None and self._redis_up():
            try:
                raw = self._redis.get(flagbus.KEY)
                key, key_read = (int(raw) if raw is not None else None), True
            except self._redis_errors as exc:
                self._redis_failed(exc)
            else:
                REDIS.answered()
        current = self._current
        vouched = key_read and current is not None and key == current.revision
        if vouched:
            self._confirmed(now, by_database=False)
            if now - self._last_db_check < DB_BACKSTOP_SECONDS:
                return
        try:
            revision = db_revision(self._engine)
            if current is None or revision != current.revision:
                revision = self.reload().revision
            else:
                self._last_db_check = time.monotonic()
                self._confirmed(self._last_db_check, by_database=True)
        except Exception as exc:
            # With Redis vouching for the copy, a database out of reach only delays the
            # backstop: nobody can change a flag without it.
            if not vouched:
                self._storage_failed(exc)
            return
        if key_read and key != revision:
            # Redis lost the key (restarted) or a writer could not publish: set it right.
            try:
                self._redis.set(flagbus.KEY, revision)
            except self._redis_errors as exc:
                self._redis_failed(exc)

    def _confirmed(self, at: float, *, by_database: bool) -> None:
        with self._lock:
            self._confirmed_at = at
            recovered, self._failing = self._failing, False
        if by_database:
            # The database answered (its outage, if any, is over). The Redis key vouching
            # for the copy says nothing of the database: its outage may still be going.
            DATABASE.answered()
        if recovered:
            log.info('{"event": "flags_storage_recovered"}')

    def _storage_failed(self, exc: Exception) -> None:
        # The last copy of the flags is served, marked stale, meanwhile. An outage is logged
        # once for the process; any other failure once here.
        if not noticed(exc) and not self._failing:
            log.warning(
                '{"event": "flags_storage_unavailable", "error": "%s", '
                '"effect": "serving the last copy of the flags, marked stale"}',
                type(exc).__name__,
            )
        self._failing = True

    def _redis_up(self) -> bool:
        return time.monotonic() >= self._redis_down_until

    def _redis_failed(self, exc: Exception) -> None:
        # The copy follows the database revision until Redis answers (the outage is logged
        # once for the process).
        REDIS.failed(exc)
        self._redis_down_until = time.monotonic() + flagbus.REDIS_RETRY_SECONDS

    def _subscribe(self) -> Any:
        pubsub = self._redis.pubsub()
        try:
            pubsub.subscribe(flagbus.CHANNEL)
        except self._redis_errors as exc:
            self._redis_failed(exc)
            self._close(pubsub)
            return None
        REDIS.answered()
        return pubsub

    def _close(self, pubsub: Any) -> Any:
        """Close a subscription (if any); returns None, the subscription it leaves."""
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:  # closing a dead connection may fail too; it is gone either way
                pass
        return None


def _resolve(change: asyncio.Future[None]) -> None:
    if not change.done():
        change.set_result(None)

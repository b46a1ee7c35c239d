"""`GET /v1/flags/stream`: the flags pushed as Server-Sent Events (docs/http-api.md, "Streaming").

Each event is the whole document of one revision, so a router that misses revisions loses
nothing; heartbeats (no `id:`) say which revision the process holds and how stale it is.
A stream reads only the in-process copy: open streams hold no database connection and
never slow polling down.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from controlplane.rollout.flagcopy import FlagCopy, FlagSnapshot

# A client that has not read an event in this many seconds is dropped (its socket is full).
SEND_TIMEOUT_SECONDS = 30.0
# How long a stream waits before it looks at the copy again (it is woken by every change
# and by shutdown; this only bounds a wait).
WAIT_SLICE_SECONDS = 60.0
# On shutdown, how long a stream may take to end by itself before it is cancelled.
SHUTDOWN_GRACE_SECONDS = 2.0
# What a refused stream is told to wait: streams end only when routers close them.
BUSY_RETRY_SECONDS = 10


def event(snapshot: FlagSnapshot) -> bytes:
    return b"id: %d\nevent: flags\ndata: %s\n\n" % (snapshot.revision, snapshot.body)


def heartbeat(snapshot: FlagSnapshot) -> ServerSentEvent:
    stale = snapshot.stale_seconds
    seconds = "null" if stale is None else str(int(stale))
    data = f'{{"revision":{snapshot.revision},"stale_seconds":{seconds}}}'
    return ServerSentEvent(data=data, event="heartbeat", sep="\n")


def _heartbeats(copy: FlagCopy) -> Callable[[], ServerSentEvent]:
    return lambda: heartbeat(copy.snapshot())


async def events(
    copy: FlagCopy,
    first: FlagSnapshot,
    last_event_id: str | None,
    stopping: anyio.Event,
    allowed: Callable[[], Awaitable[bool]] | None = None,
    check_due: Callable[[], float] | None = None,
) -> AsyncIterator[bytes]:
    """The document now (unless the client has it), then one event per new revision, until
    the server shuts down (`stopping`): then the stream ends with a complete response. With
    `allowed`, the stream's key is checked again before each event and whenever
    `check_due` (seconds from now) says: once it is revoked, the stream ends (its router
    reconnects, and is refused as its polls are)."""
    current = first
    if last_event_id is None or last_event_id.strip() != str(current.revision):
        yield event(current)
    if current.stale_seconds is not None:
        # A copy that could not be confirmed lately says so at once, not a heartbeat later.
        yield heartbeat(current).encode()
    # One task per stream, for its whole life; a change wakes it through the copy's shared
    # future, so a rollback fanned out to many streams creates no task per stream.
    shutdown = asyncio.ensure_future(stopping.wait())
    try:
        while not copy.closed and not stopping.is_set():
            change = copy.next_change()
            latest = copy.snapshot()
            if latest.revision != current.revision:
                if allowed is not None and not await allowed():
                    return
                yield event(latest)
                current = latest
                continue
            wait = WAIT_SLICE_SECONDS
            if check_due is not None:
                wait = min(wait, check_due())
            await asyncio.wait(
                (change, shutdown), timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            if allowed is not None and not change.done() and not await allowed():
                return
    finally:
        shutdown.cancel()


class StreamSlots:
    """Open streams per key, in one process: at most `per_key` each."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str) -> bool:
        with self._lock:
            held = self._open.get(key, 0)
            if held >= self.per_key:
                return False
            self._open[key] = held + 1
            return True

    def release(self, key: str) -> None:
        with self._lock:
            held = self._open.get(key, 0) - 1
            if held > 0:
                self._open[key] = held
            else:
                self._open.pop(key, None)

    def held(self, key: str) -> int:
        with self._lock:
            return self._open.get(key, 0)


class FlagStream(EventSourceResponse):
    """The event stream of `events`; `release` runs when it ends, however it ends (the
    client left, the server shuts down, a send timed out)."""

    def __init__(
        self,
        copy: FlagCopy,
        first: FlagSnapshot,
        last_event_id: str | None,
        *,
        heartbeat: float,
        release: Callable[[], None],
        allowed: Callable[[], Awaitable[bool]] | None = None,
        check_due: Callable[[], float] | None = None,
    ) -> None:
        stopping = anyio.Event()
        super().__init__(
            events(copy, first, last_event_id, stopping, allowed, check_due),
            ping=heartbeat,
            ping_message_factory=_heartbeats(copy),
            sep="\n",
            send_timeout=SEND_TIMEOUT_SECONDS,
            headers={"Cache-Control": "no-cache"},
            # On shutdown the library sets `stopping`; the generator returns at once and
            # the response ends complete (cancelled only if that takes longer than this).
            shutdown_event=stopping,
            shutdown_grace_period=SHUTDOWN_GRACE_SECONDS,
        )
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()

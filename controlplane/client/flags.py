"""`FlagClient`: a router's copy of the flags, kept current by one daemon thread.

The stream when the server has it, else ETag polls; `route` only reads memory. When in
doubt, cloud: an unknown task, a copy past `max_staleness`, a document that cannot be read.
The copy never goes back to a lower revision. README.md ("With the Python client") says
what each setting does and when the copy counts as confirmed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from . import forks
from .jsonread import loads
from .retryafter import retry_after_seconds
from .routing import Route, route
from .sse import COMMENT, Event, EventReader, StreamTooLarge
from .tls import default_tls

log = logging.getLogger("shadowplane.client")

FLAGS_PATH = "/v1/flags"
STREAM_PATH = "/v1/flags/stream"
# The server sends a heartbeat every 15 s: a stream with no complete event or heartbeat
# for three of them is dead (silent, or trickling bytes that never finish an event).
STREAM_READ_TIMEOUT = 45.0
# The flags document of hundreds of tasks is a few hundred KiB: anything far larger is not
# the API's answer, and must not fill the router's memory.
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
# A server without the stream (404, 405, 501) is asked again this much later.
NO_STREAM_RETRY = 600.0
CACHE_FORMAT = 1
# Polls come every `poll_interval` (by default POLL_INTERVAL) spread by ±POLL_JITTER of it,
# so routers started together do not poll together.
POLL_INTERVAL = 10.0
POLL_JITTER = 0.1


@dataclass(frozen=True)
class FlagStatus:
    """What the client knows and how it keeps up, for health checks and logs."""

    # starting (nothing yet) | ok | stale (every task routes to the cloud) | stopped (401/403)
    state: str
    # stream | polling | stopped
    mode: str
    revision: int | None
    # Seconds since the copy was last confirmed current; None before any copy.
    age_seconds: float | None
    tasks: int
    # The last problem, None once a fetch succeeded after it.
    error: str | None
    # server | cache (loaded from cache_path and not confirmed by the server since)
    source: str | None

    @property
    def stale(self) -> bool:
        return self.state != "ok"


class _Halt(Exception):
    """401 or 403: this key will not read flags; stop asking."""


class FlagClient:
    """The flags of every task, for `route(task, ...)` on the request path.

    ``with FlagClient(url, key) as flags: flags.route("ticket_classify", session_id=...)``
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        stream: bool = True,
        poll_interval: float = POLL_INTERVAL,
        max_staleness: float = 600.0,
        cache_path: str | os.PathLike[str] | None = None,
        timeout: float = 5.0,
        max_backoff: float = 120.0,
        stream_retry: float = 30.0,
        stream_read_timeout: float = STREAM_READ_TIMEOUT,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval: must be positive seconds, got {poll_interval!r}")
        if max_staleness <= 0:
            raise ValueError(f"max_staleness: must be positive seconds, got {max_staleness!r}")
        if max_document_bytes < 1024:
            raise ValueError(
                f"max_document_bytes: must be at least 1024, got {max_document_bytes!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.stream = stream
        self.poll_interval = poll_interval
        self.max_staleness = max_staleness
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.timeout = timeout
        self.max_backoff = max(max_backoff, poll_interval)
        self.stream_retry = stream_retry
        self.stream_read_timeout = stream_read_timeout
        self.max_document_bytes = max_document_bytes
        self._rng = rng or random.Random()
        self._rng_given = rng is not None
        self._clock = clock
        # How the thread waits between fetches: by default a wait `close()` cuts short;
        # tests pass their own to see the waits asked for without spending them.
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "shadowplane-client"},
            timeout=timeout,
            verify=default_tls(),
        )
        self._lock = threading.Lock()
        # Replaced whole, never mutated: `route` reads it without the lock.
        self._flags: dict[str, dict[str, Any]] = {}
        self._revision: int | None = None
        self._etag: str | None = None
        self._confirmed_at: float | None = None  # self._clock() time
        self._source: str | None = None
        self._error: str | None = None
        self._mode = "polling"
        self._halted = False
        self._failures = 0
        self._stream_failures = 0
        self._next_stream_try = 0.0  # time.monotonic()
        self._saved_at = 0.0  # time.monotonic() of the last cache write
        self._stop = threading.Event()
        self._first_attempt = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: httpx.Response | None = None
        # In a child forked while the thread ran: start one at the first use (`_resume`).
        self._start_when_used = False
        self._load_cache()
        forks.follow(self)

    # -- the request path -------------------------------------------------------------

    def route(
        self,
        task: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        input_tokens: int | None = None,
        eligible: bool = True,
    ) -> Route:
        """The served side, whether the other side runs beside it, and the flag version:
        the routing rule (`routing.route`) on this client's copy, with a random draw.
        Cloud for a task the copy lacks, and for every task once the copy is stale."""
        if self._start_when_used:
            self._resume()
        age = self._age()
        if age is None or age > self.max_staleness:
            return Route("cloud", False, None, "STALE", "cloud")
        return route(
            self._flags.get(task),
            task,
            draw=self._rng.random(),
            session_id=session_id,
            user_id=user_id,
            input_tokens=input_tokens,
            eligible=eligible,
        )

    def flag(self, task: str) -> dict[str, Any] | None:
        """A copy of the task's flag, or None when unknown or when the copy is stale."""
        if self._start_when_used:
            self._resume()
        age = self._age()
        if age is None or age > self.max_staleness:
            return None
        flag = self._flags.get(task)
        return dict(flag) if flag is not None else None

    def status(self) -> FlagStatus:
        if self._start_when_used:
            self._resume()
        with self._lock:
            age = self._age()
            if self._halted:
                state = "stopped"
            elif age is None:
                state = "starting"
            elif age > self.max_staleness:
                state = "stale"
            else:
                state = "ok"
            return FlagStatus(
                state=state,
                mode="stopped" if self._halted else self._mode,
                revision=self._revision,
                age_seconds=age,
                tasks=len(self._flags),
                error=self._error,
                source=self._source,
            )

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> FlagClient:
        """Start the background thread (the first fetch happens at once)."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="shadowplane-flags", daemon=True)
            self._thread.start()
        return self

    def _forked(self) -> None:
        """In a child forked from this process (gunicorn `--preload`, README's module-level
        client): the parent's thread is not there, and its connections and locks are not
        the child's. The copy is kept (its age goes on counting), and a client that was
        started gets a thread of its own at the child's first use of it (a child that never
        routes, such as a pool's worker process, opens no connection), which fetches at
        once."""
        # Started (in this process, or in the parent this one was forked from, unused here
        # yet: a daemon's double fork) and not closed.
        running = (self._thread is not None or self._start_when_used) and not self._stop.is_set()
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=dict(self._http.headers),
            timeout=self.timeout,
            verify=default_tls(),
        )
        self._lock = threading.Lock()
        stopped, self._stop = self._stop.is_set(), threading.Event()
        if stopped:
            self._stop.set()
        attempted, self._first_attempt = self._first_attempt.is_set(), threading.Event()
        if attempted:
            self._first_attempt.set()
        self._response = None
        self._thread = None
        if not self._rng_given:  # the workers of one parent do not draw alike
            self._rng = random.Random()
        self._start_when_used = running

    def _resume(self) -> None:
        """The thread of a client forked while it ran, started at the child's first use."""
        with self._lock:
            due, self._start_when_used = self._start_when_used, False
        if due:
            self.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the first fetch has been tried; True when the copy is usable (fresh)."""
        if self._start_when_used:
            self._resume()
        self._first_attempt.wait(timeout)
        return self.status().state == "ok"

    def close(self) -> None:
        self._stop.set()
        self._abort_stream()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.timeout + 1)
        self._http.close()

    def __enter__(self) -> FlagClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    delay = self._turn()
                except _Halt:
                    return
                except Exception:
                    # A bug here must not end the thread: the copy ages toward the cloud
                    # (`max_staleness`) while it fails, and follows the server again after.
                    log.exception(
                        "flags: a fetch failed unexpectedly; trying again in %.0f s, routing "
                        "to the cloud after max_staleness meanwhile",
                        self.max_backoff,
                    )
                    self._set_error("a fetch failed unexpectedly (see the log)")
                    self._first_attempt.set()
                    delay = self.max_backoff
                if self._wait(delay):
                    return
        finally:
            self._first_attempt.set()

    def _turn(self) -> float:
        """The stream when due, then a poll: the seconds until the next turn."""
        if self.stream and time.monotonic() >= self._next_stream_try:
            self._follow_stream()
            if self._stop.is_set():
                return 0.0
        delay = self._poll()
        self._first_attempt.set()
        if self.stream:  # the stream is tried again when due, between polls
            delay = min(delay, max(0.0, self._next_stream_try - time.monotonic()))
        return delay

    def _wait(self, seconds: float) -> bool:
        """Wait `seconds` before the next fetch; True once the client is closing."""
        if self._sleep is None:
            return self._stop.wait(seconds)
        self._sleep(seconds)
        return self._stop.is_set()

    def _poll(self) -> float:
        """One `GET /v1/flags`; the seconds until the next one."""
        headers = {"If-None-Match": self._etag} if self._etag else {}
        # One read waits at most `timeout`; the whole body at most three times that.
        deadline = time.monotonic() + 3 * self.timeout
        try:
            with self._http.stream("GET", FLAGS_PATH, headers=headers) as response:
                code = response.status_code
                if code in (401, 403):
                    self._halt(code, FLAGS_PATH, _detail(response))
                if code == 304:
                    if self._revision is None:
                        # Nothing held to be "not modified" (a cache in between answering
                        # for someone else?): no flags, so nothing is confirmed.
                        return self._failed(
                            f"GET {FLAGS_PATH}: HTTP 304 to a poll holding no flags"
                        )
                    self._confirm(_stale_seconds(response))
                    return self._next_poll()
                if code == 200:
                    body = _read_capped(response, self.max_document_bytes, deadline)
                    etag = response.headers.get("etag")
                    problem = self._accept(body, etag, _stale_seconds(response))
                    if problem is None:
                        return self._next_poll()
                    return self._failed(f"GET {FLAGS_PATH}: {problem}")
                return self._failed(
                    f"GET {FLAGS_PATH}: HTTP {code}", retry_after=_retry_after(response)
                )
        except _BodyProblem as exc:
            return self._failed(f"GET {FLAGS_PATH}: {exc}")
        except httpx.HTTPError as exc:
            return self._failed(f"GET {FLAGS_PATH}: {type(exc).__name__}: {exc}")

    def _follow_stream(self) -> None:
        """Listen to the stream until it ends; then poll until `_next_stream_try`."""
        headers = {
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            "Cache-Control": "no-cache",
        }
        if self._revision is not None:
            headers["Last-Event-ID"] = str(self._revision)
        timeout = httpx.Timeout(self.timeout, read=self.stream_read_timeout)
        delivered = False
        try:
            with self._http.stream("GET", STREAM_PATH, headers=headers, timeout=timeout) as r:
                code = r.status_code
                if code in (401, 403):
                    self._halt(code, STREAM_PATH, _detail(r))
                kind = r.headers.get("content-type", "")
                if code in (404, 405, 501) or (code == 200 and "text/event-stream" not in kind):
                    self._stream_ended(
                        f"GET {STREAM_PATH}: HTTP {code}, no stream here", delay=NO_STREAM_RETRY
                    )
                    return
                if code != 200:
                    retry_after = _retry_after(r)
                    self._stream_ended(
                        f"GET {STREAM_PATH}: HTTP {code}",
                        delay=None if retry_after is None else self._honoured(retry_after),
                    )
                    return
                self._response = r
                with self._lock:
                    self._mode = "stream"
                if self._stop.is_set():
                    return
                # Connecting confirms nothing: only the server's word on its copy's age does.
                # The document sent on connect is as old as the response says.
                stale = _stale_seconds(r)
                reader = EventReader(
                    max_line=self.max_document_bytes + 64, max_event=self.max_document_bytes
                )
                heard = time.monotonic()
                for chunk in r.iter_bytes():
                    if self._stop.is_set():
                        return
                    for event in reader.feed(chunk):
                        heard = time.monotonic()
                        problem = self._on_event(event, stale)
                        if problem is not None:
                            self._stream_ended(f"GET {STREAM_PATH}: {problem}", delivered=delivered)
                            return
                        if event.event == "flags":
                            stale = 0.0  # a later document is a change the server just read
                            delivered = True
                            self._stream_failures = 0
                    if time.monotonic() - heard > self.stream_read_timeout:
                        self._stream_ended(
                            f"GET {STREAM_PATH}: no complete event or heartbeat in "
                            f"{self.stream_read_timeout:g} s",
                            delivered=delivered,
                        )
                        return
                if not self._stop.is_set():
                    retry = reader.retry
                    self._stream_ended(
                        f"GET {STREAM_PATH}: the server closed the stream",
                        delivered=delivered,
                        # The server's `retry:`, within 1 s and max_backoff.
                        delay=None
                        if retry is None
                        else min(max(retry / 1000, 1.0), self.max_backoff),
                    )
        except StreamTooLarge as exc:
            self._stream_ended(
                f"GET {STREAM_PATH}: {exc}, larger than max_document_bytes allows",
                delivered=delivered,
            )
        except httpx.HTTPError as exc:
            if not self._stop.is_set():
                self._stream_ended(
                    f"GET {STREAM_PATH}: {type(exc).__name__}: {exc}", delivered=delivered
                )
        finally:
            self._response = None
            with self._lock:
                self._mode = "polling"

    def _on_event(self, event: Event, stale: float | None) -> str | None:
        """Act on one stream event; a problem string ends the stream."""
        if event.event == "flags":
            return self._accept(event.data.encode(), None, stale)
        if event.event == "heartbeat":
            beat = _heartbeat(event.data)
            if beat is None:
                return "a heartbeat event that is not {revision: int, stale_seconds: int | null}"
            revision, stale_seconds = beat
            held = self._revision
            if held is None or revision > held:
                self._poll()  # the server has a revision we never heard of: fetch it
            elif revision < held:
                return (
                    f"the stream's server is at revision {revision}, behind the held "
                    f"revision {held}"
                )
            else:
                self._confirm(stale_seconds)
            return None
        if event.event == COMMENT:
            # An older server's `: heartbeat` says nothing of its copy's age: it keeps the
            # connection open, and once the copy is due a poll, the poll (304 with
            # X-Shadowplane-Stale) confirms it.
            age = self._age()
            if age is None or age >= min(self.poll_interval, self.max_staleness / 3):
                self._poll()
        return None

    def _stream_ended(
        self, why: str, *, delay: float | None = None, delivered: bool = False
    ) -> None:
        if not delivered:
            self._stream_failures += 1
        failures = 1 if delivered else self._stream_failures
        wait = delay if delay is not None else self._backoff(self.stream_retry, failures)
        self._next_stream_try = time.monotonic() + wait
        log.warning(
            "flags: %s; polling every %.3g s, the stream again in %.0f s",
            why,
            self.poll_interval,
            wait,
        )
        self._set_error(why)

    # -- state --------------------------------------------------------------------------

    def _accept(self, body: bytes, etag: str | None, stale_seconds: float | None) -> str | None:
        """Take a flags document; a problem string when it cannot be read or is older than
        the copy held (nothing changes then, and nothing is confirmed)."""
        try:
            document = loads(body)
        except ValueError:
            return "the flags document is not JSON"
        flags = document.get("flags") if isinstance(document, dict) else None
        revision = document.get("revision") if isinstance(document, dict) else None
        if not isinstance(flags, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in flags.items()
        ):
            return "the flags document has no 'flags' object of flag objects"
        if isinstance(revision, bool) or not isinstance(revision, int):
            return "the flags document has no integer 'revision'"
        with self._lock:
            held = self._revision
            behind = held is not None and revision < held
            if not behind:
                changed = revision != held or flags != self._flags
                self._flags, self._revision, self._etag = flags, revision, etag
        if behind:
            return (
                f"revision {revision} is older than the held revision {held} (a server "
                f"behind the others?); keeping {held}, not confirmed"
            )
        if changed:
            log.info("flags: revision %d, %d tasks", revision, len(flags))
        self._confirm(stale_seconds, changed=changed)
        return None

    def _confirm(self, stale_seconds: float | None, *, changed: bool = False) -> None:
        """The server says our copy is its current one (which is `stale_seconds` old;
        None: it did not say in a form we read, so nothing is confirmed)."""
        if stale_seconds is None:
            self._set_error(
                "the server's age of its copy (X-Shadowplane-Stale) is unreadable; "
                "not counted as confirmed"
            )
            self._first_attempt.set()
            self._save_cache(force=changed)
            return
        with self._lock:
            self._confirmed_at = self._clock() - stale_seconds
            self._source = "server"
            recovered, self._error = self._error, None
            self._failures = 0
        if recovered:
            log.info("flags: current again (revision %s) after: %s", self._revision, recovered)
        self._first_attempt.set()
        self._save_cache(force=changed)

    def _honoured(self, retry_after: float) -> float:
        """A server's Retry-After as waited: at least 1 s (0 would ask again at once, in a
        loop), at most a third of `max_staleness` (or `max_backoff`, if longer): a front that
        says "an hour" must not keep a router from hearing a rollback, or send it to the
        cloud, long after the API answers again."""
        return min(max(retry_after, 1.0), max(self.max_backoff, self.max_staleness / 3))

    def _failed(self, why: str, retry_after: float | None = None) -> float:
        self._failures += 1
        delay = self._backoff(self.poll_interval, self._failures)
        if retry_after is not None:
            delay = max(delay, self._honoured(retry_after))
        if self._error != why:
            age = self._age()
            held = (
                f"keeping revision {self._revision} ({age:.0f} s old) until it is "
                f"{self.max_staleness:g} s old, then cloud"
                if age is not None
                else "no flags yet: every task routes to the cloud"
            )
            log.warning("flags: %s; retrying in %.1f s; %s", why, delay, held)
        self._set_error(why)
        return delay

    def _halt(self, code: int, path: str, detail: str) -> None:
        why = (
            f"GET {path}: HTTP {code} ({detail}): this key cannot read flags (it needs the "
            "flags:read scope); stopped asking"
        )
        with self._lock:
            self._halted = True
            self._error = why
        log.error(
            "flags: %s; routing from the copy held until it is %g s old, then cloud",
            why,
            self.max_staleness,
        )
        raise _Halt(why)

    def _set_error(self, why: str) -> None:
        with self._lock:
            self._error = why

    def _age(self) -> float | None:
        """Seconds since the copy was confirmed; infinite when that cannot be told."""
        confirmed = self._confirmed_at
        if confirmed is None:
            return None
        age = self._clock() - confirmed
        return max(0.0, age) if math.isfinite(age) else math.inf

    def _next_poll(self) -> float:
        return self.poll_interval * self._rng.uniform(1 - POLL_JITTER, 1 + POLL_JITTER)

    def _backoff(self, base: float, failures: int) -> float:
        cap = max(self.max_backoff, base)
        return min(cap, base * 2 ** min(max(failures - 1, 0), 20)) * self._rng.uniform(0.75, 1.25)

    def _abort_stream(self) -> None:
        """Wake the thread out of a blocking stream read (closing alone does not)."""
        response = self._response
        stream = response.extensions.get("network_stream") if response is not None else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- the cache file -----------------------------------------------------------------

    def _save_cache(self, *, force: bool) -> None:
        # A confirmation only refreshes the file's age now and then; a new copy at once.
        if self.cache_path is None or (not force and time.monotonic() - self._saved_at < 30):
            return
        with self._lock:
            age = self._age()
            if age is None or not math.isfinite(age):
                return  # nothing the server confirmed: nothing to keep
            document = {
                "format": CACHE_FORMAT,
                "confirmed_at": time.time() - age,
                "revision": self._revision,
                "etag": self._etag,
                "flags": self._flags,
            }
        path = self.cache_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(document, f, separators=(",", ":"), sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            log.warning("flags: could not write cache_path %s: %s", path, exc)
            return
        self._saved_at = time.monotonic()

    def _load_cache(self) -> None:
        path = self.cache_path
        if path is None:
            return
        document: Any = None
        try:
            size = path.stat().st_size
            if size > self.max_document_bytes + 65536:
                problem: str | None = f"{size} bytes, larger than max_document_bytes allows"
            else:
                document = loads(path.read_text(encoding="utf-8"))
                problem = _cache_problem(document, time.time())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            problem = f"unreadable ({exc})"
        if problem is not None:
            # Its age cannot be told, so it cannot be routed by: the cloud until the server
            # answers.
            why = f"cache_path {path}: {problem}; started without it"
            log.warning("flags: %s", why)
            self._error = why
            return
        age = max(0.0, time.time() - document["confirmed_at"])
        self._flags = document["flags"]
        self._revision = document["revision"]
        self._etag = document.get("etag")
        self._confirmed_at = self._clock() - age
        self._source = "cache"
        log.info(
            "flags: revision %s from %s, %.0f s old%s",
            self._revision,
            path,
            age,
            " (stale: cloud until the server answers)" if age > self.max_staleness else "",
        )


def _cache_problem(document: Any, now: float) -> str | None:
    if not isinstance(document, dict) or document.get("format") != CACHE_FORMAT:
        return f"not a format {CACHE_FORMAT} flags cache"
    confirmed = document.get("confirmed_at")
    if isinstance(confirmed, bool) or not isinstance(confirmed, int | float):
        return "confirmed_at: not a number"
    try:
        finite = math.isfinite(confirmed)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        return "confirmed_at: not a finite number; its age is unknown"
    if confirmed > now + 1:
        return (
            f"confirmed_at: {confirmed - now:.0f} s in the future (a clock set back, or a "
            "damaged file); its age is unknown"
        )
    flags = document.get("flags")
    if not isinstance(flags, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in flags.items()
    ):
        return "flags: not an object of flag objects"
    revision = document.get("revision")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        return "revision: not a whole number"
    if document.get("etag") is not None and not isinstance(document.get("etag"), str):
        return "etag: neither a string nor null"
    return None


def _retry_after(response: httpx.Response) -> float | None:
    return retry_after_seconds(response.headers.get("retry-after", ""), limit=86_400)


def _stale_seconds(response: httpx.Response) -> float | None:
    """The server's own copy is this old (`X-Shadowplane-Stale`, when its storage is down);
    0 without the header, None when the header is unreadable."""
    value = response.headers.get("x-shadowplane-stale")
    if value is None:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _heartbeat(data: str) -> tuple[int, float] | None:
    """`{"revision": <int>, "stale_seconds": <int or null>}` as (revision, seconds old)."""
    try:
        beat = loads(data)
    except ValueError:
        return None
    if not isinstance(beat, dict):
        return None
    revision, stale = beat.get("revision"), beat.get("stale_seconds")
    if isinstance(revision, bool) or not isinstance(revision, int):
        return None
    if stale is None:
        return revision, 0.0
    if isinstance(stale, bool) or not isinstance(stale, int | float):
        return None
    try:
        seconds = float(stale)
    except OverflowError:
        return None
    return (revision, seconds) if math.isfinite(seconds) and seconds >= 0 else None


class _BodyProblem(Exception):
    """A response body too large or too slow to read."""


def _read_capped(response: httpx.Response, limit: int, deadline: float) -> bytes:
    """The body, read only while it stays within `limit` bytes and `deadline`."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _BodyProblem(
            f"the body is {declared} bytes, over the {limit}-byte cap (max_document_bytes); "
            "not read"
        )
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise _BodyProblem(
                f"the body is over the {limit}-byte cap (max_document_bytes); not read further"
            )
        if time.monotonic() > deadline:
            raise _BodyProblem("the body took too long to arrive (3 x timeout)")
    return bytes(body)


def _detail(response: httpx.Response) -> str:
    """The `detail` of an error answer, read with a small cap."""
    reason = response.reason_phrase or "no detail"
    try:
        body = loads(_read_capped(response, 65536, time.monotonic() + 5))
    except (_BodyProblem, httpx.HTTPError, ValueError):
        return reason
    detail = body.get("detail") if isinstance(body, Mapping) else None
    return str(detail)[:200] if detail else reason

"""`FlagClient`: a router's copy of the flags, kept current by one daemon thread.

The thread listens to `GET /v1/flags/stream` (Server-Sent Events) when the server has it
and falls back to polling `GET /v1/flags` with `If-None-Match` (every `poll_interval`
seconds, ±10%) when the stream is missing or breaks, trying the stream again later. Errors
back off exponentially with jitter (honouring `Retry-After`); 401 and 403 stop it for good,
in `status()` and in the log. `route` only reads memory: it never waits on the network.

When in doubt, cloud: a task the copy does not hold routes to the cloud, and once the copy
was last confirmed more than `max_staleness` seconds ago every task does. With
`cache_path` the copy is also kept in a file (written atomically) that the next start
reads back with its age, so a router restarted during an outage routes as before.
"""

from __future__ import annotations

import json
import logging
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

from .routing import Route, route
from .sse import COMMENT, events

log = logging.getLogger("shadowplane.client")

FLAGS_PATH = "/v1/flags"
STREAM_PATH = "/v1/flags/stream"
# The server sends a heartbeat every 15 s: a stream silent for this long is dead.
STREAM_READ_TIMEOUT = 45.0
# A server without the stream (404, 405, 501) is asked again this much later.
NO_STREAM_RETRY = 600.0
CACHE_FORMAT = 1


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
        poll_interval: float = 10.0,
        max_staleness: float = 600.0,
        cache_path: str | os.PathLike[str] | None = None,
        timeout: float = 5.0,
        max_backoff: float = 120.0,
        stream_retry: float = 30.0,
        stream_read_timeout: float = STREAM_READ_TIMEOUT,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval: must be positive seconds, got {poll_interval!r}")
        if max_staleness <= 0:
            raise ValueError(f"max_staleness: must be positive seconds, got {max_staleness!r}")
        self.base_url = base_url.rstrip("/")
        self.stream = stream
        self.poll_interval = poll_interval
        self.max_staleness = max_staleness
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.timeout = timeout
        self.max_backoff = max(max_backoff, poll_interval)
        self.stream_retry = stream_retry
        self.stream_read_timeout = stream_read_timeout
        self._rng = rng or random.Random()
        self._clock = clock
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "shadowplane-client"},
            timeout=timeout,
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
        self._load_cache()

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
        age = self._age()
        if age is None or age > self.max_staleness:
            return None
        flag = self._flags.get(task)
        return dict(flag) if flag is not None else None

    def status(self) -> FlagStatus:
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

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the first fetch has been tried; True when the copy is usable (fresh)."""
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
                if self.stream and time.monotonic() >= self._next_stream_try:
                    self._follow_stream()
                    if self._stop.is_set():
                        break
                delay = self._poll()
                self._first_attempt.set()
                if self.stream:  # the stream is tried again when due, between polls
                    delay = min(delay, max(0.0, self._next_stream_try - time.monotonic()))
                if self._stop.wait(delay):
                    break
        except _Halt:
            pass
        except Exception:  # a bug here must not leave routers on a copy they think is live
            log.exception(
                "flags: the background thread failed; routing to the cloud after max_staleness"
            )
            self._set_error("the background thread failed (see the log)")
        finally:
            self._first_attempt.set()

    def _poll(self) -> float:
        """One `GET /v1/flags`; the seconds until the next one."""
        headers = {"If-None-Match": self._etag} if self._etag else {}
        try:
            response = self._http.get(FLAGS_PATH, headers=headers)
        except httpx.HTTPError as exc:
            return self._failed(f"GET {FLAGS_PATH}: {type(exc).__name__}: {exc}")
        code = response.status_code
        if code in (401, 403):
            self._halt(code, FLAGS_PATH, response)
        if code == 304:
            self._confirm(_stale_seconds(response))
            return self._next_poll()
        if code == 200:
            etag = response.headers.get("etag")
            problem = self._accept(response.content, etag, _stale_seconds(response))
            if problem is None:
                return self._next_poll()
            return self._failed(f"GET {FLAGS_PATH}: {problem}")
        return self._failed(f"GET {FLAGS_PATH}: HTTP {code}", retry_after=_retry_after(response))

    def _follow_stream(self) -> None:
        """Listen to the stream until it ends; then poll until `_next_stream_try`."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self._revision is not None:
            headers["Last-Event-ID"] = str(self._revision)
        timeout = httpx.Timeout(self.timeout, read=self.stream_read_timeout)
        delivered = False
        try:
            with self._http.stream("GET", STREAM_PATH, headers=headers, timeout=timeout) as r:
                code = r.status_code
                if code in (401, 403):
                    r.read()
                    self._halt(code, STREAM_PATH, r)
                kind = r.headers.get("content-type", "")
                if code in (404, 405, 501) or (code == 200 and "text/event-stream" not in kind):
                    self._stream_ended(
                        f"GET {STREAM_PATH}: HTTP {code}, no stream here", delay=NO_STREAM_RETRY
                    )
                    return
                if code != 200:
                    self._stream_ended(f"GET {STREAM_PATH}: HTTP {code}", delay=_retry_after(r))
                    return
                self._response = r
                with self._lock:
                    self._mode = "stream"
                if self._stop.is_set():
                    return
                if "Last-Event-ID" in headers:
                    # The server sends the document at once unless we hold its revision.
                    self._confirm(0.0)
                for event in events(r.iter_lines()):
                    if event.event == COMMENT:
                        self._confirm(0.0)
                    elif event.event == "flags":
                        problem = self._accept(event.data.encode(), None, 0.0)
                        if problem is not None:
                            self._stream_ended(f"GET {STREAM_PATH}: {problem}")
                            return
                        delivered = True
                        self._stream_failures = 0
                if not self._stop.is_set():
                    self._stream_ended(
                        f"GET {STREAM_PATH}: the server closed the stream", delivered=delivered
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

    def _accept(self, body: bytes, etag: str | None, stale_seconds: float) -> str | None:
        """Take a flags document; a problem string when it cannot be read (nothing changes)."""
        try:
            document = json.loads(body)
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
            changed = revision != self._revision or flags != self._flags
            self._flags, self._revision, self._etag = flags, revision, etag
        if changed:
            log.info("flags: revision %d, %d tasks", revision, len(flags))
        self._confirm(stale_seconds, changed=changed)
        return None

    def _confirm(self, stale_seconds: float, *, changed: bool = False) -> None:
        """The server says our copy is its current one (which is `stale_seconds` old)."""
        with self._lock:
            self._confirmed_at = self._clock() - stale_seconds
            self._source = "server"
            recovered, self._error = self._error, None
            self._failures = 0
        if recovered:
            log.info("flags: current again (revision %s) after: %s", self._revision, recovered)
        self._first_attempt.set()
        self._save_cache(force=changed)

    def _failed(self, why: str, retry_after: float | None = None) -> float:
        self._failures += 1
        delay = self._backoff(self.poll_interval, self._failures)
        if retry_after is not None:
            delay = max(delay, retry_after)
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

    def _halt(self, code: int, path: str, response: httpx.Response) -> None:
        detail = _detail(response)
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
        confirmed = self._confirmed_at
        return None if confirmed is None else max(0.0, self._clock() - confirmed)

    def _next_poll(self) -> float:
        return self.poll_interval * self._rng.uniform(0.9, 1.1)

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
            document = {
                "format": CACHE_FORMAT,
                "confirmed_at": time.time() - (age or 0.0),
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
        if self.cache_path is None:
            return
        try:
            document = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning(
                "flags: cache_path %s unreadable (%s); starting without it", self.cache_path, exc
            )
            return
        problem = _cache_problem(document)
        if problem is not None:
            log.warning("flags: cache_path %s: %s; starting without it", self.cache_path, problem)
            return
        age = time.time() - document["confirmed_at"]
        if age < -300:  # written in the future: a clock that jumped; trust nothing
            log.warning(
                "flags: cache_path %s was written %.0f s in the future; ignoring it",
                self.cache_path,
                -age,
            )
            return
        self._flags = document["flags"]
        self._revision = document["revision"]
        self._etag = document["etag"] if isinstance(document["etag"], str) else None
        self._confirmed_at = self._clock() - max(age, 0.0)
        self._source = "cache"
        log.info(
            "flags: revision %s from %s, %.0f s old%s",
            self._revision,
            self.cache_path,
            age,
            " (stale: cloud until the server answers)" if age > self.max_staleness else "",
        )


def _cache_problem(document: Any) -> str | None:
    if not isinstance(document, dict) or document.get("format") != CACHE_FORMAT:
        return f"not a format {CACHE_FORMAT} flags cache"
    confirmed = document.get("confirmed_at")
    if isinstance(confirmed, bool) or not isinstance(confirmed, int | float):
        return "confirmed_at: not a number"
    flags = document.get("flags")
    if not isinstance(flags, dict) or not all(isinstance(v, dict) for v in flags.values()):
        return "flags: not an object of flag objects"
    revision = document.get("revision")
    if isinstance(revision, bool) or not isinstance(revision, int):
        return "revision: not an integer"
    return None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None


def _stale_seconds(response: httpx.Response) -> float:
    """The server's own copy is this old (`X-Shadowplane-Stale`, when its storage is down)."""
    try:
        return max(0.0, float(response.headers.get("x-shadowplane-stale", "0")))
    except ValueError:
        return 0.0


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase or "no detail"
    detail = body.get("detail") if isinstance(body, Mapping) else None
    return str(detail)[:200] if detail else response.reason_phrase or "no detail"

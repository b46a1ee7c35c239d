"""`ResultReporter`: results posted in the background, in batches, without ever blocking
or failing the request that produced them.

The caller pays one `json.dumps`; the bounded queue, the daemon thread's batches, what is
retried (the API stores each `(task, request_id)` once, so a resend is safe) and what is
dropped are in README.md ("With the Python client"). Given the cloud call and the flag's
`repeat_rate`, `report` asks the cloud a second time on the requests `wants_repeat` picks,
in `shadow_compare`'s pool beside, and queues the result with it (`cloud_repeat`).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import random
import sys
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from . import forks
from .retryafter import retry_after_seconds
from .shadow import HoldsResults, repeat_then_report
from .sticky import wants_repeat
from .tls import default_tls

log = logging.getLogger("shadowplane.client")

RESULTS_PATH = "/v1/results"
MAX_BATCH = 1000
# The API's default SHADOWPLANE_MAX_BODY_BYTES: a larger request is refused with 413.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_QUEUE_BYTES = 64 * 1024 * 1024
_ENVELOPE = len(b'{"results":[]}')
# The API's answer lists at most 1000 rejected items: anything far larger is not its answer.
ANSWER_BYTES = 4 * 1024 * 1024


class ResultReporter(HoldsResults):
    """``reporter.report(result)`` on the request path; ``reporter.close()`` at shutdown."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        batch_size: int = 200,
        flush_interval: float = 1.0,
        max_queue: int = 10_000,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_result_bytes: int | None = None,
        timeout: float = 10.0,
        max_backoff: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        # Made again from these in a child forked from this process (`_after_fork_in_child`).
        self._made_with: tuple[tuple[str, str], dict[str, Any]] = (
            (base_url, api_key),
            {
                "batch_size": batch_size,
                "flush_interval": flush_interval,
                "max_queue": max_queue,
                "max_queue_bytes": max_queue_bytes,
                "max_body_bytes": max_body_bytes,
                "max_result_bytes": max_result_bytes,
                "timeout": timeout,
                "max_backoff": max_backoff,
                "rng": rng,
            },
        )
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(
                f"batch_size: must be 1 to {MAX_BATCH} (the API takes at most {MAX_BATCH} "
                f"results per request), got {batch_size!r}"
            )
        if max_queue < 1:
            raise ValueError(f"max_queue: must be at least 1, got {max_queue!r}")
        if max_body_bytes <= _ENVELOPE:
            raise ValueError(f"max_body_bytes: must be over {_ENVELOPE}, got {max_body_bytes!r}")
        largest = max_body_bytes - _ENVELOPE
        if max_result_bytes is None:
            max_result_bytes = largest
        if not 1 <= max_result_bytes <= largest:
            raise ValueError(
                f"max_result_bytes: must be 1 to {largest} (one result must fit in a request "
                f"of max_body_bytes), got {max_result_bytes!r}"
            )
        if max_queue_bytes < 1:
            raise ValueError(f"max_queue_bytes: must be at least 1, got {max_queue_bytes!r}")
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_backoff = max_backoff
        self.max_queue = max_queue
        self.max_queue_bytes = max_queue_bytes
        self.max_body_bytes = max_body_bytes
        self.max_result_bytes = max_result_bytes
        # The serialised results waiting, and their size; guarded by `_ready`.
        self._items: deque[bytes] = deque()
        self._bytes = 0
        self._ready = threading.Condition(threading.Lock())
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {api_key}",
                "Content-Type": "application/json",
                "User-Agent": "shadowplane-client",
            },
            timeout=timeout,
            verify=default_tls(),
        )
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._accepted = 0
        self._duplicates = 0
        self._rejected = 0
        self._dropped = 0
        self._drop_reasons: Counter[str] = Counter()
        self._inflight = 0
        # Results handed over that come later (`hold`): waiting for the cloud's repeat
        # (`report(..., repeat=)`), or in `shadow_compare` for a side beside; guarded by it.
        self._held = 0
        self._holds: set[Held] = set()  # the holds not yet ended; guarded by `_held_done`
        self._held_done = threading.Condition(threading.Lock())
        self._last_error: str | None = None
        self._last_drop_log = 0.0
        # The API's reasons for the last rejected items: {"request_id": ..., "error": ...}.
        self.rejections: deque[dict[str, Any]] = deque(maxlen=20)
        self._closing = threading.Event()
        self._abort = threading.Event()
        # The first report or hold asks for a close() at the process's exit
        # (`_watch_exit`); a reporter never used registers nothing, and close() takes it
        # back. In a forked child (`_forked`), multiprocessing's exit runs it too.
        self._close_at_exit_due = True
        self._in_forked_child = False
        self._exit_hook: Callable[[], None] | None = None
        self._exit_finalizer: Any = None  # multiprocessing's, in its children
        self._at_exit = False
        self._thread = threading.Thread(target=self._run, name="shadowplane-results", daemon=True)
        self._thread.start()
        forks.follow(self)

    def _forked(self) -> None:
        """In a child forked from this process (gunicorn `--preload`): the parent's queue,
        counts, connections and thread are the parent's, which sends what it queued; the
        child's reporter starts empty, with a thread of its own. A closed one stays closed."""
        if self._closing.is_set():
            return
        args, kwargs = self._made_with
        # This class's own __init__: a subclass's may take other arguments.
        ResultReporter.__init__(self, *args, **kwargs)
        self._in_forked_child = True

    def _watch_exit(self) -> None:
        """At the first report or hold: the process's exit closes the reporter
        (`_close_at_exit`) if nothing has, for a process that ends without calling close()
        (a script, a forked child, a `multiprocessing` pool's worker): what it still holds
        is sent or counted and logged, never lost unsaid. A reporter never used registers
        nothing; close() takes the registration back."""
        if not self._close_at_exit_due:
            return
        with self._lock:
            due, self._close_at_exit_due = self._close_at_exit_due, False
        if not due:
            return
        # A reference that does not keep a closed reporter alive until the exit.
        hook = _closing_at_exit(weakref.ref(self))
        try:
            # An interpreter's own exit (a script's end, sys.exit, a child that returns).
            atexit.register(hook)
            self._exit_hook = hook
            # A multiprocessing child (a pool's worker, a Process; forked, or started by a
            # fork server) ends with os._exit after multiprocessing's exit function, which
            # runs the finalizers with an exit priority. Its registry is emptied at the
            # child's start, after the fork's hooks ran: so the finalizer is made here, at
            # the first use, for a reporter inherited through the fork or made in the child.
            mp_util = sys.modules.get("multiprocessing.util")
            if mp_util is not None and (self._in_forked_child or _in_multiprocessing_child()):
                self._exit_finalizer = mp_util.Finalize(None, hook, exitpriority=0)
        except Exception:  # the request goes on; its result is queued as any other
            log.exception("results: the reporter could not ask to be closed at the exit")

    def _close_at_exit(self) -> None:
        """`close()` at the process's exit, unless closed already (either hook may come
        first, or both): what it cannot deliver in the exit's wait is counted and logged.
        Every reporter of the process shares one wait (`EXIT_WAIT`), not one each; a Ctrl-C
        during it ends the wait, and what is still unsent is counted and logged then."""
        if self._closing.is_set():
            return
        self._at_exit = True
        try:
            self.close(_exit_wait_left())
        except Exception:  # the exit goes on
            log.exception("results: closing the reporter at the process's exit failed")
        except BaseException:  # KeyboardInterrupt: stop waiting, and count what is left
            try:
                self._stop_at_exit("the exit's wait was interrupted")
            except BaseException:  # a second Ctrl-C: the exit goes on, as asked
                pass

    def _stop_at_exit(self, why: str) -> None:
        """Stop now, and count what is left. Not close(): a join interrupted by a signal
        marks the sender as stopped while it runs (Python 3.11's threading), so close()
        would return at once, before the sender counts what it stops with, and the exit
        would end it unsaid."""
        self._abort.set()
        self._closing.set()
        with self._ready:
            self._ready.notify_all()
        with self._held_done:
            given_up, self._holds = self._holds, set()
            self._held = 0
        abandoned = sum(held.abandon() for held in given_up)
        deadline = time.monotonic() + 2.0
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.01)  # the sender counts and logs what it stops with
        left = self.pending + abandoned
        if left:
            self._drop(left, "closed", f"{left} results unsent: {why}")

    # -- the request path -------------------------------------------------------------

    def report(
        self,
        result: Mapping[str, Any],
        *,
        repeat: Callable[[], Any] | None = None,
        repeat_rate: float = 0.0,
        repeat_timeout: float = 60.0,
        repeat_fields: Mapping[str, Any] | None = None,
    ) -> bool:
        """Queue one result; False (counted in `dropped`) when it cannot be queued. Never
        blocks on the network and never raises; serialising the result is its only cost.

        `repeat` (the cloud call again, no arguments) with `repeat_rate` (the route's): when
        `wants_repeat(task, request_id, repeat_rate)` picks this result and its cloud side
        answered, `repeat()` runs in the pool beside (bounded by `repeat_timeout`) and the
        result is queued when it is done, with `cloud_repeat` (its output or error and
        `latency_ms`, with `repeat_fields`: by default the cloud side's `model` and
        `input_tokens`). True then means handed over: a later drop is counted as usual."""
        if repeat is not None:
            try:
                due = wants_repeat(
                    str(result.get("task")), result.get("request_id"), repeat_rate
                ) and _answered(result.get("cloud"))
                if due:
                    fields = _repeat_fields(result, repeat_fields)
                    held = self.hold()
                    try:
                        repeat_then_report(
                            held, result, repeat, timeout=repeat_timeout, fields=fields
                        )
                    except Exception:
                        held.release()
                        raise
                    return True
            except Exception as exc:  # the caller's request must never fail on reporting
                log.warning("results: the cloud's repeat was not started: %s", exc)
        return self._queue(result)

    def hold(self) -> Held:
        """A result that will come later (`shadow_compare` calls this when a side beside,
        or the cloud's repeat, is still running once the answer is given): the one report
        through the returned `Held` queues it. Until then it counts as `pending`, and
        `close()` waits for it, as for a repeat `report` asked for."""
        self._watch_exit()
        held = Held(self)
        with self._held_done:
            self._held += 1
            self._holds.add(held)
        return held

    def _release(self, held: Held) -> None:
        with self._held_done:
            if held in self._holds:
                self._holds.discard(held)
                self._held -= 1
            self._held_done.notify_all()

    def _queue(self, result: Mapping[str, Any]) -> bool:
        try:
            self._watch_exit()
            if self._closing.is_set():
                self._drop(1, "closed", "the reporter is closed")
                return False
            if not self._thread.is_alive():
                self._drop(1, "stopped", "the sending thread has stopped (see the log)")
                return False
            try:
                item = json.dumps(
                    result, separators=(",", ":"), ensure_ascii=False, allow_nan=False
                ).encode()
            except Exception as exc:  # TypeError, ValueError, RecursionError ...
                self._drop(1, "not_json", f"a result is not JSON ({exc})")
                return False
            size = len(item)
            if size > self.max_result_bytes:
                self._drop(
                    1,
                    "too_large",
                    f"a result of {size} bytes is over max_result_bytes ({self.max_result_bytes})",
                )
                return False
            with self._ready:
                if len(self._items) >= self.max_queue:
                    full = f"the queue is full ({len(self._items)} results waiting, max_queue)"
                elif self._bytes + size > self.max_queue_bytes:
                    full = (
                        f"the queue is full ({self._bytes} bytes waiting, max_queue_bytes "
                        f"{self.max_queue_bytes})"
                    )
                else:
                    full = None
                    self._items.append(item)
                    self._bytes += size
                    self._ready.notify()
            if full is not None:
                self._drop(1, "queue_full", full)
                return False
            return True
        except Exception as exc:  # the caller's request must never fail on reporting
            try:
                self._drop(1, "error", f"{type(exc).__name__}: {exc}")
            except Exception:
                pass
            return False

    # -- counts -----------------------------------------------------------------------------

    @property
    def accepted(self) -> int:
        """Results the API stored."""
        return self._accepted

    @property
    def duplicates(self) -> int:
        """Results the API already had (a resend after a lost answer)."""
        return self._duplicates

    @property
    def rejected(self) -> int:
        """Results the API refused one by one (reasons in `rejections`)."""
        return self._rejected

    @property
    def dropped(self) -> int:
        """Results never delivered: queue full, not JSON, too large, a refused batch, or
        unsent at close."""
        return self._dropped

    @property
    def drop_reasons(self) -> dict[str, int]:
        """`dropped` by reason: closed, stopped, not_json, too_large, queue_full, refused,
        failed (a batch the thread could not handle), unsent (at close), error."""
        with self._lock:
            return dict(self._drop_reasons)

    @property
    def pending(self) -> int:
        """Results queued or being sent, or held until a repeat or a side beside is in."""
        return len(self._items) + self._inflight + self._held

    @property
    def queued_bytes(self) -> int:
        """The size of the results waiting in the queue."""
        return self._bytes

    @property
    def last_error(self) -> str | None:
        return self._last_error

    # -- life cycle ---------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued, for up to `timeout` seconds (plus a request in flight), the
        results held included: those waiting for a repeat, and `shadow_compare`'s waiting
        for the side beside the served one (each waits at most its side's timeout, or its
        `repeat_timeout`); what is still unsent then is dropped and counted. True when
        everything queued reached the API (stored, duplicate, or rejected item by item)."""
        dropped_before = self._dropped
        deadline = time.monotonic() + timeout
        loop = _running_loop()
        if loop is not None:
            with self._held_done:
                on_it = sum(held.loop is loop for held in self._holds)
            if on_it:
                # Their sides run on this very loop, which waits with it.
                log.warning(
                    "results: close() on a running event loop's thread waits for %d result(s) "
                    "whose sides run on that loop; use `await reporter.aclose()`",
                    on_it,
                )
        with self._held_done:
            while self._held > 0 and (left := deadline - time.monotonic()) > 0:
                self._held_done.wait(left)
            # Those still out are given up on now, counted and said: the process may end
            # before they come (one that comes later is not counted again).
            given_up, self._holds = self._holds, set()
            self._held = 0
        # One whose report has begun is on its way: queued, or counted by `_queue` as closed.
        abandoned = sum(held.abandon() for held in given_up)
        if abandoned:
            self._drop(
                abandoned,
                "closed",
                f"{abandoned} result(s) still waiting for the cloud's repeat or a side beside "
                "when close() gave up",
            )
        self._closing.set()
        with self._ready:
            self._ready.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join(self._http.timeout.read or 10.0)
        self._http.close()
        hook, self._exit_hook = self._exit_hook, None
        finalizer, self._exit_finalizer = self._exit_finalizer, None
        if hook is not None and not self._at_exit:
            # Not from the hook itself: atexit would free the function it is running.
            atexit.unregister(hook)
            if finalizer is not None:
                finalizer.cancel()
        return self.pending == 0 and self._dropped == dropped_before

    async def aclose(self, timeout: float = 10.0) -> bool:
        """`close` for async code: it waits in a worker thread, so the event loop goes on
        running the sides beside (`async_shadow_compare`) it waits for."""
        return await asyncio.to_thread(self.close, timeout)

    def __enter__(self) -> ResultReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> ResultReporter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch = self._collect()
                if batch:
                    try:
                        self._send(batch)
                    except Exception as exc:  # one bad batch must not stop the reporting
                        log.exception("results: sending a batch failed")
                        with self._lock:
                            lost, self._inflight = self._inflight, 0
                        self._last_error = f"sending a batch failed: {type(exc).__name__}: {exc}"
                        self._drop(lost, "failed", self._last_error)
                elif self._closing.is_set():
                    break
        except BaseException:  # SystemExit from a hook, ...: the thread ends, and says so
            log.exception("results: the sender stopped; report() now answers False")
        finally:
            self._drain()

    def _collect(self) -> list[bytes]:
        """The next batch: waits for a first result, then up to `flush_interval` for more,
        within `batch_size` results and `max_body_bytes`."""
        batch: list[bytes] = []
        size = _ENVELOPE
        deadline = None
        with self._ready:
            while len(batch) < self.batch_size:
                if self._items:
                    item = self._items[0]
                    if batch and size + 1 + len(item) > self.max_body_bytes:
                        break
                    self._items.popleft()
                    self._bytes -= len(item)
                    with self._lock:  # `pending` counts it throughout
                        self._inflight += 1
                    batch.append(item)
                    size += len(item) + (1 if len(batch) > 1 else 0)
                    if deadline is None:
                        deadline = time.monotonic() + self.flush_interval
                    continue
                if self._closing.is_set():
                    break
                if deadline is None:
                    self._ready.wait(0.5)  # woken by report() and close()
                    continue
                wait = deadline - time.monotonic()
                if wait <= 0:
                    break
                self._ready.wait(wait)
        return batch

    def _send(self, batch: list[bytes]) -> None:
        failures = 0
        body = b'{"results":[' + b",".join(batch) + b"]}"
        while True:
            if self._abort.is_set():
                self._finish(batch, dropped=f"{len(batch)} results unsent at close", kind="unsent")
                return
            retry_after = None
            try:
                with self._http.stream("POST", RESULTS_PATH, content=body) as response:
                    code, answer = response.status_code, _read_answer(response)
            except httpx.HTTPError as exc:
                problem = f"POST {RESULTS_PATH}: {type(exc).__name__}: {exc}"
            else:
                text = answer.decode("utf-8", "replace")[:200]
                if code == 200 and self._counted(batch, answer):
                    return
                if code == 413 and len(batch) > 1:  # over the body limit: halves go alone
                    half = len(batch) // 2
                    self._send(batch[:half])
                    self._send(batch[half:])
                    return
                if code == 200:
                    problem = (
                        f"POST {RESULTS_PATH}: HTTP 200 with an answer that is not the API's: "
                        f"{text}"
                    )
                else:
                    problem = f"POST {RESULTS_PATH}: HTTP {code}: {text}"
                if code != 200 and code != 429 and code < 500:
                    self._finish(
                        batch, dropped=f"{len(batch)} results refused: {problem}", kind="refused"
                    )
                    return
                retry_after = _retry_after(response)
            failures += 1
            delay = min(self.max_backoff, 0.5 * 2 ** min(failures - 1, 20))
            delay *= self._rng.uniform(0.75, 1.25)
            if retry_after is not None:
                delay = max(delay, retry_after)
            if self._last_error != problem:
                log.warning(
                    "results: %s; %d results kept, retrying in %.1f s", problem, self.pending, delay
                )
            self._last_error = problem
            self._abort.wait(delay)

    def _counted(self, batch: list[bytes], body: bytes) -> bool:
        try:
            answer = json.loads(body)
            accepted, duplicates = _count(answer["accepted"]), _count(answer["duplicates"])
            rejected = answer["rejected"]
        except Exception:
            return False  # not the API's answer: send again (dedupe makes it safe)
        if accepted is None or duplicates is None or not isinstance(rejected, list):
            return False
        for item in rejected:
            if isinstance(item, Mapping):
                self.rejections.append(
                    {"request_id": item.get("request_id"), "error": item.get("error")}
                )
        if rejected:
            log.warning(
                "results: the API rejected %d of %d results, e.g. %.300s",
                len(rejected),
                len(batch),
                rejected[0],
            )
        with self._lock:
            self._accepted += accepted
            self._duplicates += duplicates
            self._rejected += len(rejected)
        self._finish(batch)
        if self._last_error is not None:
            log.info("results: delivering again after: %s", self._last_error)
            self._last_error = None
        return True

    def _finish(
        self, batch: list[bytes], dropped: str | None = None, kind: str = "refused"
    ) -> None:
        with self._lock:
            self._inflight = max(0, self._inflight - len(batch))
        if dropped is not None:
            self._last_error = dropped
            self._drop(len(batch), kind, dropped)

    def _drain(self) -> None:
        """At exit: whatever is still queued will never be sent."""
        with self._ready:
            left = len(self._items)
            self._items.clear()
            self._bytes = 0
        with self._lock:
            left += self._inflight
            self._inflight = 0
        if left:
            self._drop(left, "unsent", f"{left} results unsent at close")

    def _drop(self, n: int, kind: str, why: str) -> None:
        with self._lock:
            self._dropped += n
            self._drop_reasons[kind] += n
            dropped = self._dropped
            now = time.monotonic()
            loud = now - self._last_drop_log >= 10 or n > 1
            if loud:
                self._last_drop_log = now
        if loud:  # a full queue drops one by one: say so at most every 10 s
            log.warning("results: dropped %d (%d in all): %s", n, dropped, why)


class Held:
    """Where one held result comes back (`ResultReporter.hold`): its report queues it and
    ends the hold; a second report is queued as any would be, the hold ended once."""

    def __init__(self, owner: ResultReporter) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._ended = False
        self._reporting = False
        self._abandoned = False
        # The event loop of the thread that held it (async_shadow_compare's sides run on
        # it): close() on that loop cannot let them finish.
        self.loop = _running_loop()

    def report(self, result: Mapping[str, Any]) -> bool:
        with self._lock:
            if self._abandoned:
                return False  # counted as dropped when close() gave up on it
            self._reporting = True  # close() no longer gives up on it
        try:
            return self.owner.report(result)
        finally:
            self.release()

    def release(self) -> None:
        """End the hold without a report (the result will not come)."""
        with self._lock:
            ended, self._ended = self._ended, True
        if not ended:
            self.owner._release(self)

    def abandon(self) -> bool:
        """`close()` gives up on the result, which it then counts: True, and a later report
        is not sent; False when its report has begun (or it ended without one)."""
        with self._lock:
            if self._reporting or self._ended:
                return False
            self._abandoned = True
            return True


def _answered(cloud: Any) -> bool:
    """Whether a result's cloud side holds an answer to repeat."""
    return isinstance(cloud, Mapping) and cloud.get("error") is None and "output" in cloud


def _repeat_fields(result: Mapping[str, Any], given: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if given is not None:
        return given
    cloud = result.get("cloud")
    assert isinstance(cloud, Mapping)
    return {k: cloud[k] for k in ("model", "input_tokens") if cloud.get(k) is not None}


def _read_answer(response: httpx.Response) -> bytes:
    """The answer's body up to ANSWER_BYTES (the API's is far smaller); b"" past that."""
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > ANSWER_BYTES:
            return b""
    return bytes(body)


def _retry_after(response: httpx.Response) -> float | None:
    return retry_after_seconds(response.headers.get("retry-after", ""), limit=3600)


def _count(value: Any) -> int | None:
    """A count from the API's answer: a whole number from 0, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _closing_at_exit(ref: weakref.ReferenceType[ResultReporter]) -> Callable[[], None]:
    """The exit's hook for one reporter: closes it if it is still alive and open."""

    def close_at_exit() -> None:
        reporter = ref()
        if reporter is not None:
            reporter._close_at_exit()

    return close_at_exit


# How long the exit waits, in all, for the reporters a process did not close (close()'s
# own default): the first one closed at the exit starts it, the others share what is left.
EXIT_WAIT = 10.0
_exit_deadline: list[float] = []


def _exit_wait_left() -> float:
    now = time.monotonic()
    if not _exit_deadline:
        _exit_deadline.append(now + EXIT_WAIT)
    return max(0.0, _exit_deadline[0] - now)


def _in_multiprocessing_child() -> bool:
    """Whether this process was started by multiprocessing (it ends with os._exit)."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None

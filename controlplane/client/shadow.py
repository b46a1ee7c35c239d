"""`shadow_compare`: serve the side the flag chooses, run the other beside it, report the pair.

An edge failure never reaches the caller (the cloud answers, `degraded`); a cloud failure
on the serving path does, since there is nothing to fall back to. The pools never queue:
a hung sync edge keeps its thread (Python cannot stop one), so a full pool answers `busy`
or skips the side beside. On the share of requests the flag's `repeat_rate` picks
(`wants_repeat`), once the answer is decided and the cloud has answered, the cloud is asked
a second time beside it, reported as `cloud_repeat` (`_Pair`; `ResultReporter` starts one
through `repeat_then_report`). README.md ("With the Python client") has the whole contract.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

from .routing import Route, Side
from .sticky import wants_repeat

log = logging.getLogger("shadowplane.client")

P = TypeVar("P")
T = TypeVar("T")

# A side of a result: the two routed ones, and the cloud asked a second time.
SideName = Literal["edge", "cloud", "cloud_repeat"]
REPEAT: SideName = "cloud_repeat"


class Router(Protocol):
    """What `shadow_compare` needs from a flag client (`FlagClient` is one)."""

    def route(
        self,
        task: str,
        *,
        session_id: str | None = ...,
        user_id: str | None = ...,
        input_tokens: int | None = ...,
        eligible: bool = ...,
    ) -> Route: ...


class Reporter(Protocol):
    """What `shadow_compare` needs from a reporter (`ResultReporter` is one)."""

    def report(self, result: Mapping[str, Any]) -> bool: ...


class HoldsResults:
    """The base of a reporter that `shadow_compare` tells of each result it will report
    after the answer (a side beside, or the cloud's repeat, still running): `hold()` gives
    where that one result then goes, and the reporter counts it as pending until it comes
    (`ResultReporter`, whose `close()` waits for them). Only a reporter of this class is
    told: any other (a wrapper, a test double) gets every result through its own `report`,
    as it always has."""

    def hold(self) -> Reporter:
        raise NotImplementedError


@dataclass(frozen=True)
class _Raw:
    """What calling one side gave: its output or exception, and how long it took."""

    output: Any
    exc: BaseException | None
    latency_ms: float
    timed_out: bool = False


def _call(fn: Callable[[P], T], payload: P) -> _Raw:
    started = time.perf_counter()
    try:
        output = fn(payload)
    except BaseException as exc:  # in a pool thread: whatever it raised is the side's error
        return _Raw(None, exc, _ms(started))
    return _Raw(output, None, _ms(started))


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except Exception:  # TypeError, ValueError, RecursionError (nested too deeply), or
        return False  # whatever an odd value's own methods raise: not JSON either way
    return True


def _message(exc: BaseException) -> str:
    """`Type: message`, whatever the exception makes of its name and its message."""
    try:
        name = str.__str__(type(exc).__name__)
    except Exception:
        name = "(an exception whose type has no name)"
    try:
        text = str.__str__(str(exc))  # str.__str__: a str subclass's own format never runs
    except Exception:
        text = "(its message cannot be read)"
    return (name + ": " + text)[:500]


def _edge_side(raw: _Raw, validate: Callable[[Any], bool] | None) -> dict[str, Any]:
    if raw.timed_out:
        return _side(None, "timeout", f"no answer within {raw.latency_ms:g} ms", raw, valid=None)
    if raw.exc is not None:
        return _side(None, "exception", _message(raw.exc), raw, valid=None)
    problem = None
    if validate is not None:
        try:
            if validate(raw.output) is not True:
                problem = "validate refused the output"
        except Exception as exc:
            problem = f"validate raised {_message(exc)}"
    jsonable = _jsonable(raw.output)
    if problem is None and not jsonable:
        problem = f"the output is not JSON ({type(raw.output).__name__})"
    if problem is not None:
        return _side(raw.output if jsonable else None, "invalid", problem, raw, valid=False)
    return _side(raw.output, None, None, raw, valid=True if validate is not None else None)


def _cloud_side(raw: _Raw) -> dict[str, Any]:
    if raw.timed_out:
        return _side(None, "timeout", f"no answer within {raw.latency_ms:g} ms", raw)
    if raw.exc is not None:
        return _side(None, "exception", _message(raw.exc), raw)
    if not _jsonable(raw.output):
        message = f"the output is not JSON ({type(raw.output).__name__})"
        return _side(None, "invalid", message, raw)
    return _side(raw.output, None, None, raw)


def _side(
    output: Any, error: str | None, message: str | None, raw: _Raw, **extra: Any
) -> dict[str, Any]:
    side = {"output": output, "error": error, "error_message": message}
    side["latency_ms"] = raw.latency_ms
    side.update((k, v) for k, v in extra.items() if v is not None)
    return side


def _ok(side: dict[str, Any]) -> bool:
    return side["error"] is None


class _Pair:
    """One request's result: reported once, when the served side and the side beside it
    are both in (a side that timed out is in, as `error: timeout`), and the cloud's repeat
    too when one was started.

    `repeat`, when set, starts the cloud's second answer (`cloud_repeat`). It is called once,
    off the lock, as soon as the answer is decided and the cloud's side is in without an
    error (served, or beside the edge); the repeat is then waited for like a side beside,
    and reported with the cloud's `cloud_fields`."""

    def __init__(
        self,
        reporter: Reporter | None,
        base: dict[str, Any],
        edge_fields: Mapping[str, Any] | None,
        cloud_fields: Mapping[str, Any] | None,
    ) -> None:
        self.reporter = reporter
        self.result = base
        self.extra: dict[str, Mapping[str, Any]] = {
            "edge": edge_fields or {},
            "cloud": cloud_fields or {},
            REPEAT: cloud_fields or {},
        }
        self.waiting: set[str] = set()
        self.skipped: dict[str, str] = {}
        self.answered = False
        self.repeat: Callable[[_Pair], None] | None = None
        self.lock = threading.Lock()
        self.held = False

    def expect(self, side: SideName) -> None:
        with self.lock:
            self.waiting.add(side)

    def put(self, name: SideName, side: dict[str, Any]) -> None:
        """The first outcome of a side wins (its finish, or its timeout)."""
        with self.lock:
            if name not in self.waiting:
                return
            self.waiting.discard(name)
            self.result[name] = {**self.extra[name], **side}
            start = self._repeat_due()
            ready = self.answered and not self.waiting
        self._then(start, ready)

    def answer(self, served: Side, degraded: bool = False, reason: str | None = None) -> None:
        with self.lock:
            self.result.update(served=served, degraded=degraded, degrade_reason=reason)
            self.answered = True
            start = self._repeat_due()
            ready = not self.waiting
            if not ready:
                self._hold()
        self._then(start, ready)

    def answered_already(self) -> None:
        """The result came in whole, its answer long given (`repeat_then_report`)."""
        with self.lock:
            self.answered = True
            start = self._repeat_due()
            ready = not self.waiting
            if not ready:
                self._hold()
        self._then(start, ready)

    def _hold(self) -> None:
        """Under the lock, the answer given and the report to come later (a side beside or
        the repeat still running): a reporter that holds results (`HoldsResults`, as
        `ResultReporter`) counts this one as pending until it is reported, so its `close()`
        waits for it."""
        reporter = self.reporter
        if self.held or not isinstance(reporter, HoldsResults):
            return
        try:
            held = reporter.hold()
        except Exception:  # holding is the reporter's courtesy: the answer goes out anyway
            log.exception("shadow_compare: the reporter's hold raised")
            return
        self.reporter = held
        self.held = True

    def skip(self, name: SideName, why: str) -> None:
        """The side beside was not run (`why`); it is named under `skipped`."""
        with self.lock:
            self.skipped[name] = why

    def forget(self, name: SideName, why: str) -> None:
        """A side expected that will never come (`why`, under `skipped`); nothing for a
        side already in."""
        with self.lock:
            if name not in self.waiting:
                return
            self.skipped[name] = why
            self.waiting.discard(name)
            ready = self.answered and not self.waiting
        if ready:
            self._report()

    def _repeat_due(self) -> Callable[[_Pair], None] | None:
        """Under the lock: the repeat's starter when now is its time (taken: it runs once)."""
        if self.repeat is None or not self.answered or "cloud" in self.waiting:
            return None
        cloud = self.result.get("cloud")
        if not isinstance(cloud, Mapping) or cloud.get("error") is not None:
            return None  # no cloud answer to repeat
        start, self.repeat = self.repeat, None
        self.waiting.add(REPEAT)
        return start

    def _then(self, start: Callable[[_Pair], None] | None, ready: bool) -> None:
        if start is not None:
            try:
                start(self)
            except Exception as exc:  # starting it must never reach the caller's answer
                log.exception("shadow_compare: starting the cloud's repeat failed")
                self.forget(REPEAT, f"not run: {_message(exc)}")
        if ready:
            self._report()

    def _report(self) -> None:
        if self.reporter is None:
            return
        skipped = {k: v for k, v in self.skipped.items() if self.result.get(k) is None}
        if skipped:
            given = self.result.get("skipped")
            self.result["skipped"] = {**given, **skipped} if isinstance(given, dict) else skipped
        try:
            self.reporter.report(self.result)
        except Exception:  # a reporter must not raise; if one does, the answer still goes out
            log.exception("shadow_compare: the reporter raised")


def _start(
    router: Router,
    task: str,
    reporter: Reporter | None,
    input_tokens: int,
    session_id: str | None,
    user_id: str | None,
    eligible: bool,
    request_id: str | None,
    fields: Mapping[str, Any] | None,
    edge_fields: Mapping[str, Any] | None,
    cloud_fields: Mapping[str, Any] | None,
) -> tuple[Route, _Pair]:
    route = router.route(
        task,
        session_id=session_id,
        user_id=user_id,
        input_tokens=input_tokens,
        eligible=eligible,
    )
    base: dict[str, Any] = {
        **(fields or {}),
        "request_id": request_id or uuid.uuid4().hex,
        "task": task,
        "ts": datetime.now(UTC).isoformat(),
        "session_id": session_id,
        "user_id": user_id,
        "input_tokens": input_tokens,
        # The router's own verdict before the stage and the canary share gate it.
        "decision": "edge" if eligible else "cloud",
        "flag_version": route.flag_version,
        "served": route.served,
        "degraded": False,
        "degrade_reason": None,
        "edge": None,
        "cloud": None,
    }
    return route, _Pair(reporter, base, edge_fields, cloud_fields)


# -- sync ----------------------------------------------------------------------------------


class _Deadlines:
    """One daemon thread that runs callbacks at their time (the other side's timeouts),
    instead of a timer thread per request."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="shadowplane-deadlines", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def forked(self) -> None:
        """In a forked child: the parent's deadlines (its calls in flight) are not the
        child's, and its thread is not there."""
        self.__init__()  # type: ignore[misc]

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap:
                    self._cv.wait()
                when, _, fn = self._heap[0]
                wait = when - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                log.exception("shadow_compare: a timeout callback failed")


_deadlines = _Deadlines()

# Threads for edge calls on the serving path, and for the side run beside the served one.
SERVING_THREADS = 32
BESIDE_THREADS = 32


class _Gate:
    """A thread pool that never queues: with every thread held, a call is refused at once
    (a queued call would keep its payload until a hung call returns, i.e. maybe never)."""

    def __init__(self, prefix: str, threads: int) -> None:
        self.prefix = prefix
        self.threads = threads
        self._lock = threading.Lock()
        self._busy = 0
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[[P], T], payload: P) -> Future[_Raw] | None:
        with self._lock:
            if self._busy >= self.threads:
                return None
            self._busy += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.prefix)
            pool = self._pool
        try:
            future = pool.submit(self._run, fn, payload)
        except RuntimeError:  # the interpreter is shutting down
            self._release()
            return None
        future.add_done_callback(self._if_cancelled)
        return future

    def busy(self) -> str:
        return f"all {self.threads} {self.prefix} threads are held (hung calls?)"

    def forked(self) -> None:
        """In a forked child: the parent's pool counts threads (idle, or running the
        parent's calls) the child does not have; a call queued on it would wait for good."""
        self.__init__(self.prefix, self.threads)  # type: ignore[misc]

    @property
    def in_flight(self) -> int:
        return self._busy

    def _run(self, fn: Callable[[P], T], payload: P) -> _Raw:
        try:
            return _call(fn, payload)
        finally:
            self._release()

    def _if_cancelled(self, future: Future[_Raw]) -> None:
        if future.cancelled():  # taken back before it ran: `_run` never will
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._busy -= 1


class _Given:
    """The caller's executor: its queue and its threads are the caller's to bound."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def submit(self, fn: Callable[[P], T], payload: P) -> Future[_Raw] | None:
        return self.executor.submit(_call, fn, payload)

    def busy(self) -> str:
        return "the executor refused the call"


_serving = _Gate("shadowplane-edge", SERVING_THREADS)
_beside_pool = _Gate("shadowplane-side", BESIDE_THREADS)
# The caller's executors judged in this process: False for one whose threads are a parent
# process's (see _runs_here). Cleared in a forked child.
_executors: weakref.WeakKeyDictionary[Executor, bool] = weakref.WeakKeyDictionary()


def _runs_here(executor: Executor) -> bool:
    """Whether the caller's executor can run a call in this process. A `ThreadPoolExecutor`
    that ran calls before the process forked (made at import under gunicorn `--preload`)
    counts its threads idle at the fork, which the child does not have: the child's first
    calls (one per such thread) are queued with no thread to run them, and each request
    waits its whole `edge_timeout` to be served by the cloud. Such an executor is passed
    over for the client's own pools, with a warning once; one made in the child, or never
    used before the fork, is used."""
    try:
        usable = _executors.get(executor)
    except TypeError:  # not hashable, or not weakly referable: judged every time
        usable = None
    if usable is None:
        threads = getattr(executor, "_threads", None)
        usable = not (
            isinstance(executor, ThreadPoolExecutor)
            and isinstance(threads, set)
            and not getattr(executor, "_shutdown", False)
            and any(not thread.is_alive() for thread in list(threads))
        )
        try:
            _executors[executor] = usable
        except TypeError:  # not weakly referable, or not hashable: judged again next time
            pass
        if not usable:
            log.warning(
                "shadow_compare: the executor passed was used before this process forked "
                "and its threads are the parent's (calls queued on it would wait for none): "
                "the client's own pools run them here; make the executor after the fork "
                "(e.g. in gunicorn's post_fork) to use it"
            )
    return usable


_stats_lock = threading.Lock()
_stats: Counter[str] = Counter()
_last_busy_log = 0.0


def _after_fork_in_child() -> None:
    """A process forked after `shadow_compare` ran (gunicorn `--preload` warming the app up)
    has none of its threads: the pools, the deadline thread and their locks start anew."""
    global _stats_lock
    _stats_lock = threading.Lock()
    _stats.clear()
    _executors.clear()
    _deadlines.forked()
    _serving.forked()
    _beside_pool.forked()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def shadow_stats() -> dict[str, int]:
    """Calls refused because every thread of their default pool was held: `busy_serving`
    (the cloud answered at once instead of the edge), `skipped_beside` (the side beside
    was not run); and the calls running now (`serving_in_flight`, `beside_in_flight`)."""
    with _stats_lock:
        stats = {"busy_serving": _stats["busy_serving"], "skipped_beside": _stats["skipped_beside"]}
    stats["serving_in_flight"] = _serving.in_flight
    stats["beside_in_flight"] = _beside_pool.in_flight
    return stats


def _count_busy(kind: str, task: str, why: str) -> None:
    global _last_busy_log
    with _stats_lock:
        _stats[kind] += 1
        n = _stats[kind]
        now = time.monotonic()
        loud = now - _last_busy_log >= 10
        if loud:
            _last_busy_log = now
    if loud:
        log.warning("shadow_compare: %s (task %s); %s: %d so far", why, task, kind, n)


def _beside(
    pair: _Pair,
    name: SideName,
    future: Future[_Raw],
    deadline: float,
    timeout: float,
    to_side: Callable[[_Raw], dict[str, Any]],
) -> None:
    """Report the side not served when it finishes, or as a timeout at `deadline`; one
    its executor cancels before it ran (a shutdown) is left out, named under `skipped`."""
    expired_first = False  # set by `expired` before it takes the queued call back

    def finished(f: Future[_Raw]) -> None:
        if f.cancelled():
            if not expired_first:
                pair.forget(name, "not run: cancelled in its executor before it started")
            return
        try:
            side = to_side(f.result())
        except Exception as exc:  # else it would be reported as a timeout at its deadline
            log.exception("shadow_compare: reading the %s side failed", name)
            pair.forget(name, f"not reported: {_message(exc)}")
            return
        pair.put(name, side)

    future.add_done_callback(finished)

    def expired() -> None:
        nonlocal expired_first
        expired_first = True
        future.cancel()  # still queued behind hung calls: never start it
        pair.put(name, to_side(_Raw(None, None, round(timeout * 1000, 3), timed_out=True)))

    _deadlines.call_at(deadline, expired)


def _repeat_in(
    beside: _Gate | _Given, cloud_fn: Callable[[P], T], payload: P, task: str, timeout: float
) -> Callable[[_Pair], None]:
    """The starter of a sync repeat: the cloud called again in the pool of the sides beside,
    bounded by `timeout` from its start, and never queued (a full pool skips it)."""

    def start(pair: _Pair) -> None:
        future = beside.submit(cloud_fn, payload)
        if future is None:
            _count_busy("skipped_beside", task, beside.busy())
            pair.forget(REPEAT, f"not run: {beside.busy()}")
            return
        _beside(pair, REPEAT, future, time.monotonic() + timeout, timeout, _cloud_side)

    return start


def repeat_then_report(
    reporter: Reporter,
    result: Mapping[str, Any],
    repeat: Callable[[], Any],
    *,
    timeout: float = 60.0,
    fields: Mapping[str, Any] | None = None,
) -> None:
    """Ask the cloud again (`repeat()`) in the pool of the sides beside, then report
    `result` with its answer as `cloud_repeat` (with `fields`): at once, without one, when
    the result has no cloud answer or the pool is full (then named under `skipped`). The
    repeat is bounded by `timeout`; whatever it raises is its error, never the caller's."""
    pair = _Pair(reporter, dict(result), None, fields)
    pair.repeat = _repeat_in(_beside_pool, _call_repeat, repeat, str(result.get("task")), timeout)
    pair.answered_already()


def _call_repeat(repeat: Callable[[], T]) -> T:
    return repeat()


def shadow_compare(
    payload: P,
    edge_fn: Callable[[P], T],
    cloud_fn: Callable[[P], T],
    *,
    client: Router,
    task: str,
    input_tokens: int,
    reporter: Reporter | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
    eligible: bool = True,
    request_id: str | None = None,
    edge_timeout: float = 5.0,
    cloud_timeout: float = 60.0,
    validate: Callable[[T], bool] | None = None,
    fields: Mapping[str, Any] | None = None,
    edge_fields: Mapping[str, Any] | None = None,
    cloud_fields: Mapping[str, Any] | None = None,
    executor: Executor | None = None,
) -> T:
    """The answer for `payload` from the side `client.route` chooses for this request.

    `eligible` is the router's own verdict (reported as `decision`); `fields` are merged
    into the result (e.g. `{"input": {"text": ...}}`), `edge_fields` / `cloud_fields` into
    its sides (e.g. `{"model": "small@3"}`). `edge_timeout` bounds the edge on the serving
    path and beside it; `cloud_timeout` bounds only a cloud call running beside the edge
    (for its report) and the cloud's repeat. `validate(output)` must return True for an
    edge answer to be served. On the requests the flag's `repeat_rate` picks by request id
    (`wants_repeat`; the one generated when none is given), the cloud is asked again in the
    pool beside once the answer is decided, and the result waits for it (`cloud_repeat`).
    """
    route, pair = _start(
        client,
        task,
        reporter,
        input_tokens,
        session_id,
        user_id,
        eligible,
        request_id,
        fields,
        edge_fields,
        cloud_fields,
    )
    serving: _Gate | _Given = _serving
    beside: _Gate | _Given = _beside_pool
    if executor is not None and _runs_here(executor):
        serving = beside = _Given(executor)
    started = time.monotonic()
    if wants_repeat(task, pair.result["request_id"], route.repeat_rate):
        pair.repeat = _repeat_in(beside, cloud_fn, payload, task, cloud_timeout)

    def edge_side(raw: _Raw) -> dict[str, Any]:
        return _edge_side(raw, validate)

    if route.served == "cloud":
        pair.expect("cloud")
        if route.run_other:
            future = beside.submit(edge_fn, payload)
            if future is None:
                pair.skip("edge", f"not run: {beside.busy()}")
                _count_busy("skipped_beside", task, beside.busy())
            else:
                pair.expect("edge")
                _beside(pair, "edge", future, started + edge_timeout, edge_timeout, edge_side)
        return _serve_cloud(pair, cloud_fn, payload, None)

    pair.expect("edge")
    edge = serving.submit(edge_fn, payload)
    if edge is None:  # every thread held by hung edges: do not wait for one, answer now
        why = serving.busy()
        _count_busy("busy_serving", task, why)
        pair.put("edge", _side(None, "busy", f"not run: {why}", _Raw(None, None, 0.0)))
        return _serve_cloud(pair, cloud_fn, payload, None, degraded="busy")
    cloud: Future[_Raw] | None = None
    if route.run_other:
        cloud = beside.submit(cloud_fn, payload)
        if cloud is None:
            pair.skip("cloud", f"not run: {beside.busy()}")
            _count_busy("skipped_beside", task, beside.busy())
        else:
            pair.expect("cloud")
    try:
        raw = edge.result(timeout=edge_timeout)
    except (FutureTimeout, CancelledError):
        edge.cancel()
        raw = _Raw(None, None, round(edge_timeout * 1000, 3), timed_out=True)
    side = edge_side(raw)
    pair.put("edge", side)
    if _ok(side):
        if cloud is not None:
            _beside(pair, "cloud", cloud, started + cloud_timeout, cloud_timeout, _cloud_side)
        pair.answer("edge")
        return raw.output
    # Degraded: the cloud answers. One already running beside is awaited; one still queued
    # (behind hung edge calls) is taken back and called here.
    if cloud is not None and cloud.cancel():
        cloud = None
    return _serve_cloud(pair, cloud_fn, payload, cloud, degraded=side["error"])


def _serve_cloud(
    pair: _Pair,
    cloud_fn: Callable[[P], T],
    payload: P,
    running: Future[_Raw] | None,
    degraded: str | None = None,
) -> T:
    pair.expect("cloud")
    if running is not None:
        raw = running.result()
    else:
        started = time.perf_counter()
        try:
            output = cloud_fn(payload)
        except Exception as exc:
            raw = _Raw(None, exc, _ms(started))
        else:
            raw = _Raw(output, None, _ms(started))
    pair.put("cloud", _cloud_side(raw))
    pair.answer("cloud", degraded is not None, degraded)
    if raw.exc is not None:
        raise raw.exc
    return raw.output


# -- async ---------------------------------------------------------------------------------

_background: set[asyncio.Task[None]] = set()
# How long past an async side's timeout its loop may stand still before the side is
# given up for one whose loop stopped (a loop that runs puts the timeout itself).
LOOP_GRACE = 1.0


def _keep_side(pair: _Pair, name: SideName, coro: Awaitable[None], timeout: float) -> None:
    """Run `_abeside` for one side as a task of its own; if the task ends without putting
    the side (cancelled as the loop shuts down, even before its first step), or its loop
    is no longer running a second past the side's timeout (closed without cancelling its
    tasks), the side is forgotten, so the pair is still reported, the side named under
    `skipped`."""
    loop = asyncio.get_running_loop()

    def stranded() -> None:  # on the deadline thread; a running loop puts the side itself
        if not loop.is_running():
            pair.forget(name, "not reported: its event loop stopped before the side ended")

    _deadlines.call_at(time.monotonic() + max(timeout, 0.0) + LOOP_GRACE, stranded)
    task: asyncio.Task[None] = asyncio.ensure_future(coro)
    _background.add(task)  # the loop keeps weak references only
    task.add_done_callback(_background.discard)

    def ended(done: asyncio.Task[None]) -> None:
        if done.cancelled():
            why = "not reported: cancelled before it finished (the event loop ended?)"
        elif (exc := done.exception()) is not None:
            why = f"not reported: {_message(exc)}"
        else:
            return
        pair.forget(name, why)  # nothing when the side came in

    task.add_done_callback(ended)


async def _acall(fn: Callable[[P], Awaitable[T]], payload: P) -> _Raw:
    """The cloud on the serving path, in the caller's task: its BaseExceptions are the
    caller's own."""
    started = time.perf_counter()
    try:
        output = await fn(payload)
    except Exception as exc:
        return _Raw(None, exc, _ms(started))
    return _Raw(output, None, _ms(started))


async def _arun(fn: Callable[[P], Awaitable[T]], payload: P) -> _Raw:
    """One side in a task of its own: whatever it raises is its error (BaseException too,
    so SystemExit or KeyboardInterrupt from a model client never reaches the loop), except
    the cancellation of this task by shadow_compare."""
    started = time.perf_counter()
    try:
        output = await fn(payload)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # ours: its timeout passed, or the caller was cancelled
        return _Raw(None, exc, _ms(started))  # raised by the side itself
    except BaseException as exc:
        return _Raw(None, exc, _ms(started))
    return _Raw(output, None, _ms(started))


def _spawn(fn: Callable[[P], Awaitable[T]], payload: P) -> asyncio.Task[_Raw]:
    task: asyncio.Task[_Raw] = asyncio.ensure_future(_arun(fn, payload))
    _running.add(task)  # the loop keeps weak references only
    task.add_done_callback(_running.discard)
    return task


_running: set[asyncio.Task[_Raw]] = set()


async def _within(task: asyncio.Task[_Raw], timeout: float) -> _Raw:
    """The task's outcome, or a timeout after `timeout` seconds: then the task is cancelled
    and left to end by itself, never waited for (it may ignore the cancellation)."""
    started = time.perf_counter()
    try:
        await asyncio.wait({task}, timeout=max(timeout, 0.0))
    except asyncio.CancelledError:  # the caller's own cancellation
        task.cancel()
        raise
    if not task.done():
        task.cancel()
        return _Raw(None, None, round(timeout * 1000, 3), timed_out=True)
    if task.cancelled():  # by someone else than us (the loop shutting down)
        return _Raw(None, asyncio.CancelledError(), _ms(started))
    return task.result()


async def _abeside(
    pair: _Pair,
    name: SideName,
    task: asyncio.Task[_Raw],
    timeout: float,
    to_side: Callable[[_Raw], dict[str, Any]],
) -> None:
    """Put the side when it is in (a cancellation of this task is `_keep_side`'s to see)."""
    try:
        side = to_side(await _within(task, timeout))
    except Exception as exc:
        log.exception("shadow_compare: reading the %s side failed", name)
        pair.forget(name, f"not reported: {_message(exc)}")
        return
    pair.put(name, side)


async def async_shadow_compare(
    payload: P,
    edge_fn: Callable[[P], Awaitable[T]],
    cloud_fn: Callable[[P], Awaitable[T]],
    *,
    client: Router,
    task: str,
    input_tokens: int,
    reporter: Reporter | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
    eligible: bool = True,
    request_id: str | None = None,
    edge_timeout: float = 5.0,
    cloud_timeout: float = 60.0,
    validate: Callable[[T], bool] | None = None,
    fields: Mapping[str, Any] | None = None,
    edge_fields: Mapping[str, Any] | None = None,
    cloud_fields: Mapping[str, Any] | None = None,
) -> T:
    """`shadow_compare` for coroutines: `edge_fn` and `cloud_fn` are async; the side not
    served, and the cloud's repeat, run as tasks on the running loop, and an edge past its
    timeout is cancelled."""
    route, pair = _start(
        client,
        task,
        reporter,
        input_tokens,
        session_id,
        user_id,
        eligible,
        request_id,
        fields,
        edge_fields,
        cloud_fields,
    )
    started = time.monotonic()
    if wants_repeat(task, pair.result["request_id"], route.repeat_rate):

        def start_repeat(p: _Pair) -> None:  # called on the loop: by put or answer
            _keep_side(
                p,
                REPEAT,
                _abeside(p, REPEAT, _spawn(cloud_fn, payload), cloud_timeout, _cloud_side),
                cloud_timeout,
            )

        pair.repeat = start_repeat

    def edge_side(raw: _Raw) -> dict[str, Any]:
        return _edge_side(raw, validate)

    if route.served == "cloud":
        pair.expect("cloud")
        if route.run_other:
            pair.expect("edge")
            _keep_side(
                pair,
                "edge",
                _abeside(pair, "edge", _spawn(edge_fn, payload), edge_timeout, edge_side),
                edge_timeout,
            )
        return await _aserve_cloud(pair, _acall(cloud_fn, payload), None)

    pair.expect("edge")
    cloud: asyncio.Task[_Raw] | None = None
    if route.run_other:
        pair.expect("cloud")
        cloud = _spawn(cloud_fn, payload)
    try:
        raw = await _within(_spawn(edge_fn, payload), edge_timeout)
    except asyncio.CancelledError:  # the caller was cancelled: nothing of this request goes on
        if cloud is not None:
            cloud.cancel()
        raise
    side = edge_side(raw)
    pair.put("edge", side)
    if _ok(side):
        if cloud is not None:
            left = cloud_timeout - (time.monotonic() - started)
            _keep_side(pair, "cloud", _abeside(pair, "cloud", cloud, left, _cloud_side), left)
        pair.answer("edge")
        return raw.output
    if cloud is not None:
        return await _aserve_cloud(pair, cloud, side["error"])
    return await _aserve_cloud(pair, _acall(cloud_fn, payload), side["error"])


async def _aserve_cloud(pair: _Pair, pending: Awaitable[_Raw], degraded: str | None) -> Any:
    pair.expect("cloud")
    raw = await pending
    pair.put("cloud", _cloud_side(raw))
    pair.answer("cloud", degraded is not None, degraded)
    if raw.exc is not None:
        raise raw.exc
    return raw.output

"""`ResultReporter`: results posted in the background, in batches, without ever blocking
or failing the request that produced them.

`report(result)` serialises the result and puts it on a bounded queue; it returns False
and counts the result in `dropped` when the queue is full or the result is not JSON. One
daemon thread posts batches of up to `batch_size` (at most 1000, the API's limit) to
`POST /v1/results`, waiting at most `flush_interval` seconds for a batch to fill. 429, 5xx
and network errors are retried with exponential backoff and jitter (`Retry-After`
honoured): the API stores each `(task, request_id)` once, so a resent batch is safe. A
batch the API refuses with another 4xx is dropped, counted and logged; resending it
cannot help. `close(timeout)` sends what is queued before it returns.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import httpx

log = logging.getLogger("shadowplane.client")

RESULTS_PATH = "/v1/results"
MAX_BATCH = 1000


class ResultReporter:
    """``reporter.report(result)`` on the request path; ``reporter.close()`` at shutdown."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        batch_size: int = 200,
        flush_interval: float = 1.0,
        max_queue: int = 10_000,
        timeout: float = 10.0,
        max_backoff: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(
                f"batch_size: must be 1 to {MAX_BATCH} (the API takes at most {MAX_BATCH} "
                f"results per request), got {batch_size!r}"
            )
        if max_queue < 1:
            raise ValueError(f"max_queue: must be at least 1, got {max_queue!r}")
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_backoff = max_backoff
        self._queue: queue.Queue[bytes] = queue.Queue(max_queue)
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {api_key}",
                "Content-Type": "application/json",
                "User-Agent": "shadowplane-client",
            },
            timeout=timeout,
        )
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._accepted = 0
        self._duplicates = 0
        self._rejected = 0
        self._dropped = 0
        self._inflight = 0
        self._last_error: str | None = None
        self._last_drop_log = 0.0
        # The API's reasons for the last rejected items: {"request_id": ..., "error": ...}.
        self.rejections: deque[dict[str, Any]] = deque(maxlen=20)
        self._closing = threading.Event()
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shadowplane-results", daemon=True)
        self._thread.start()

    # -- the request path -------------------------------------------------------------

    def report(self, result: Mapping[str, Any]) -> bool:
        """Queue one result; False (counted in `dropped`) when it cannot be queued. Never
        blocks on the network and never raises."""
        try:
            if self._closing.is_set():
                self._drop(1, "the reporter is closed")
                return False
            try:
                item = json.dumps(
                    result, separators=(",", ":"), ensure_ascii=False, allow_nan=False
                ).encode()
            except (TypeError, ValueError) as exc:
                self._drop(1, f"a result is not JSON ({exc})")
                return False
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self._drop(1, f"the queue is full ({self._queue.maxsize} results waiting)")
                return False
            return True
        except Exception as exc:  # the caller's request must never fail on reporting
            try:
                self._drop(1, f"{type(exc).__name__}: {exc}")
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
        """Results never delivered: queue full, not JSON, a refused batch, or unsent at close."""
        return self._dropped

    @property
    def pending(self) -> int:
        """Results queued or being sent."""
        return self._queue.qsize() + self._inflight

    @property
    def last_error(self) -> str | None:
        return self._last_error

    # -- life cycle ---------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued, for up to `timeout` seconds (plus a request in flight);
        what is still unsent then is dropped and counted. True when everything queued
        reached the API (stored, duplicate, or rejected item by item)."""
        dropped_before = self._dropped
        self._closing.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join(self._http.timeout.read or 10.0)
        self._http.close()
        return self.pending == 0 and self._dropped == dropped_before

    def __enter__(self) -> ResultReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch = self._collect()
                if batch:
                    self._send(batch)
                elif self._closing.is_set():
                    break
        except Exception:
            log.exception("results: the sender failed")
        finally:
            self._drain()

    def _collect(self) -> list[bytes]:
        """The next batch: waits for a first result, then up to `flush_interval` for more."""
        batch: list[bytes] = []
        deadline = None
        while len(batch) < self.batch_size:
            if self._closing.is_set():
                wait = 0.0
            elif deadline is None:
                wait = 0.1  # wake now and then to see `close`
            else:
                wait = deadline - time.monotonic()
            try:
                batch.append(
                    self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
                )
            except queue.Empty:
                if batch or self._closing.is_set():
                    break
                continue
            if deadline is None:
                deadline = time.monotonic() + self.flush_interval
        with self._lock:
            self._inflight = len(batch)
        return batch

    def _send(self, batch: list[bytes]) -> None:
        failures = 0
        body = b'{"results":[' + b",".join(batch) + b"]}"
        while True:
            if self._abort.is_set():
                self._finish(batch, dropped=f"{len(batch)} results unsent at close")
                return
            retry_after = None
            try:
                response = self._http.post(RESULTS_PATH, content=body)
            except httpx.HTTPError as exc:
                problem = f"POST {RESULTS_PATH}: {type(exc).__name__}: {exc}"
            else:
                code = response.status_code
                if code == 200 and self._counted(batch, response):
                    return
                if code == 413 and len(batch) > 1:  # over the body limit: halves go alone
                    half = len(batch) // 2
                    self._send(batch[:half])
                    self._send(batch[half:])
                    return
                problem = f"POST {RESULTS_PATH}: HTTP {code}: {response.text[:200]}"
                if code != 200 and code != 429 and code < 500:
                    self._finish(batch, dropped=f"{len(batch)} results refused: {problem}")
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

    def _counted(self, batch: list[bytes], response: httpx.Response) -> bool:
        try:
            answer = response.json()
            accepted, duplicates = int(answer["accepted"]), int(answer["duplicates"])
            rejected = list(answer["rejected"])
        except (ValueError, KeyError, TypeError):
            return False  # not the API's answer: send again (dedupe makes it safe)
        for item in rejected:
            if isinstance(item, Mapping):
                self.rejections.append(
                    {"request_id": item.get("request_id"), "error": item.get("error")}
                )
        if rejected:
            log.warning(
                "results: the API rejected %d of %d results, e.g. %s",
                len(rejected),
                len(batch),
                self.rejections[-1],
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

    def _finish(self, batch: list[bytes], dropped: str | None = None) -> None:
        with self._lock:
            self._inflight = max(0, self._inflight - len(batch))
        if dropped is not None:
            self._last_error = dropped
            self._drop(len(batch), dropped)

    def _drain(self) -> None:
        """At exit: whatever is still queued will never be sent."""
        left = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            left += 1
        with self._lock:
            left += self._inflight
            self._inflight = 0
        if left:
            self._drop(left, f"{left} results unsent at close")

    def _drop(self, n: int, why: str) -> None:
        with self._lock:
            self._dropped += n
            dropped = self._dropped
            now = time.monotonic()
            loud = now - self._last_drop_log >= 10 or n > 1
            if loud:
                self._last_drop_log = now
        if loud:  # a full queue drops one by one: say so at most every 10 s
            log.warning("results: dropped %d (%d in all): %s", n, dropped, why)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if 0 <= seconds < 3600 else None

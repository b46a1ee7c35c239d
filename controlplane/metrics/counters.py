"""Ingest counters shared by every API process: results by outcome (accepted, duplicate,
rejected) and a histogram of the time `POST /v1/results` took to answer, by status code.

With Redis configured both live in Redis hashes, written in one pipeline round trip per
request, so `/metrics` on any replica or worker process gives the same figures; without it
(the embedded default, one process) they live in memory. Counting never blocks ingest: when
Redis is unreachable the counts are held in memory and added on the next successful write,
and the process's Redis outage is logged once (controlplane.logs).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import redis

from controlplane.logs import REDIS

OUTCOMES = ("accepted", "duplicate", "rejected")
KEY = "shadowplane:ingest_results_total"
DURATION_KEY = "shadowplane:ingest_request_duration_seconds"
# 200: the batch answered item by item; 422: the body refused whole (not JSON, too many);
# 503: storage unavailable or gave up (a lock or statement timeout), nothing stored; 500:
# any other failure of the database.
CODES = ("200", "422", "500", "503")
Code = Literal["200", "422", "500", "503"]
# Upper bounds of the request-time buckets, in seconds: a batch of up to 1000 results is
# answered in milliseconds, a slow database stretches it to seconds.
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LE = (*(str(bound) for bound in BOUNDS), "+Inf")


@dataclass(frozen=True)
class Durations:
    """One status code's request times: how many fell in each bucket (not cumulative; the
    last bucket is past every bound) and their sum in microseconds."""

    counts: tuple[int, ...]
    sum_us: int

    def buckets(self) -> list[tuple[str, int]]:
        """(le, requests at or under it): the cumulative buckets of a Prometheus histogram."""
        running = 0
        cumulative = []
        for le, n in zip(LE, self.counts, strict=True):
            running += n
            cumulative.append((le, running))
        return cumulative


@dataclass(frozen=True)
class IngestFigures:
    results: dict[str, int]  # per outcome
    durations: dict[str, Durations]  # per status code


def bucket_field(code: str, seconds: float) -> str:
    """The hash field of the one bucket a request time falls in (`le` semantics: a time
    equal to a bound is in that bound's bucket)."""
    return f"{code}:{LE[bisect.bisect_left(BOUNDS, seconds)]}"


def figures(counts: Mapping[tuple[str, str], int]) -> IngestFigures:
    """The figures of counts keyed by (Redis key, hash field); fields of other buckets or
    codes than these are ignored."""
    results = {outcome: counts.get((KEY, outcome), 0) for outcome in OUTCOMES}
    durations = {
        code: Durations(
            counts=tuple(counts.get((DURATION_KEY, f"{code}:{le}"), 0) for le in LE),
            sum_us=counts.get((DURATION_KEY, f"{code}:sum_us"), 0),
        )
        for code in CODES
    }
    return IngestFigures(results=results, durations=durations)


class IngestCounters:
    def __init__(self, redis_url: str | None) -> None:
        self._redis = (
            redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
            if redis_url
            else None
        )
        self._pending: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(
        self, *, accepted: int, duplicate: int, rejected: int, seconds: float, code: Code = "200"
    ) -> None:
        """Counts one answered request: its results by outcome and the seconds it took."""
        with self._lock:
            self._pending.update(
                {
                    (KEY, "accepted"): accepted,
                    (KEY, "duplicate"): duplicate,
                    (KEY, "rejected"): rejected,
                    (DURATION_KEY, bucket_field(code, seconds)): 1,
                    (DURATION_KEY, f"{code}:sum_us"): round(seconds * 1_000_000),
                }
            )
            if self._redis is None:
                return
            pending = +self._pending
            self._pending = Counter()
        try:
            pipe = self._redis.pipeline(transaction=False)
            for (key, field), n in pending.items():
                pipe.hincrby(key, field, n)
            pipe.execute()
        except Exception as exc:  # any client failure: the counts stay in memory
            REDIS.failed(exc)
            with self._lock:
                self._pending.update(pending)
            return
        REDIS.answered()

    def read(self) -> IngestFigures:
        """The figures; raises redis.RedisError when Redis is configured and down."""
        with self._lock:
            counts = Counter(self._pending)
        if self._redis is not None:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(KEY)
            pipe.hgetall(DURATION_KEY)
            for key, stored in zip((KEY, DURATION_KEY), pipe.execute(), strict=True):
                counts.update({(key, k.decode()): int(v) for k, v in stored.items()})
        return figures(counts)

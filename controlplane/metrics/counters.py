"""Ingest counters by outcome (accepted, duplicate, rejected), shared by every API process.

With Redis configured the counts live in one Redis hash, so `/metrics` on any replica or
worker process gives the same totals; without it (the embedded default, one process)
they live in memory. Counting never blocks ingest: when Redis is unreachable the counts
are held in memory and added on the next successful write, and the failure is logged.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

import redis

OUTCOMES = ("accepted", "duplicate", "rejected")
KEY = "shadowplane:ingest_results_total"
log = logging.getLogger("shadowplane.counters")


class IngestCounters:
    def __init__(self, redis_url: str | None) -> None:
        self._redis = (
            redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
            if redis_url
            else None
        )
        self._pending: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, *, accepted: int, duplicate: int, rejected: int) -> None:
        with self._lock:
            self._pending.update(
                {"accepted": accepted, "duplicate": duplicate, "rejected": rejected}
            )
            if self._redis is None:
                return
            pending = +self._pending
            self._pending = Counter()
        if not pending:
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            for outcome, n in pending.items():
                pipe.hincrby(KEY, outcome, n)
            pipe.execute()
        except Exception as exc:  # any client failure: the counts stay in memory
            log.warning("ingest counters not written to Redis, kept in memory: %s", exc)
            with self._lock:
                self._pending.update(pending)

    def totals(self) -> dict[str, int]:
        """Counts per outcome; raises redis.RedisError when Redis is configured and down."""
        with self._lock:
            local = Counter(self._pending)
        if self._redis is not None:
            stored = self._redis.hgetall(KEY)
            local.update({k.decode(): int(v) for k, v in stored.items()})  # type: ignore[union-attr]
        return {outcome: local.get(outcome, 0) for outcome in OUTCOMES}

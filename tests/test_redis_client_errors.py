"""Every Redis client in the API treats any exception out of redis-py as Redis being down.

Seen in CI: redis-py raised AttributeError (not a RedisError) when a connection was torn
down under a call. On the request path that would have been a 500 after the work was done;
each user of Redis must fall back as it does for an outage instead."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from controlplane.auth.ratelimit import LocalBuckets, Rate, RedisBuckets
from controlplane.metrics.counters import IngestCounters
from controlplane.rollout.flagbus import Publisher


class TornDownRedis:
    """Every call fails the way redis-py's does on a connection torn down under it."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise AttributeError("'NoneType' object has no attribute 'readline'")

        if name == "register_script":  # no I/O in redis-py either: the call fails later
            return lambda script: fail
        return fail


@pytest.fixture(autouse=True)
def torn_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis.Redis, "from_url", classmethod(lambda cls, *a, **k: TornDownRedis()))


def test_the_rate_limiter_falls_back_to_its_own_buckets() -> None:
    buckets = RedisBuckets("redis://127.0.0.1:1/0", LocalBuckets())
    rate = Rate(per_second=1.0, burst=2, setting="SHADOWPLANE_TEST_RATE")
    assert buckets.take("k", rate, 1)[0] == 1
    assert buckets.take("k", rate, 5)[0] == 1  # the local bucket: one left of two


def test_a_flag_revision_not_published_is_said_not_raised() -> None:
    assert Publisher("redis://127.0.0.1:1/0").publish(7) is False


def test_ingest_counts_are_kept_in_memory() -> None:
    counters = IngestCounters("redis://127.0.0.1:1/0")
    counters.add(accepted=3, duplicate=1, rejected=0, seconds=0.02)
    counters.add(accepted=2, duplicate=0, rejected=1, seconds=0.3)
    counters._redis = None  # read what this process holds
    held = counters.read()
    assert held.results == {"accepted": 5, "duplicate": 1, "rejected": 1}
    times = dict(held.durations["200"].buckets())
    assert (times["0.025"], times["0.25"], times["0.5"], times["+Inf"]) == (1, 1, 2, 2)
    assert held.durations["200"].sum_us == 20_000 + 300_000

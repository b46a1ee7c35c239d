"""Rate limits (docs/http-api.md, "Keys, scopes, limits"): a token bucket per key and scope,
and a budget of failed authentications per client address.

Buckets are shared by replicas through Redis when `redis_url` is set (one atomic Lua script
per check, on Redis's clock) and kept per process otherwise. Redis must never block a
router: a Redis error allows the request on this process's own buckets, is logged once (the
process's Redis outage, controlplane.logs), and Redis is not asked again for a few seconds.

A process does not ask Redis on every request: it takes tokens in small leases (about
1/20 s of the scope's rate, at most 1/20 of its burst, held at most a second), so a flag poll
or an ingest batch costs a dictionary lookup, and slow scopes (admin, review) still ask
every time.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from controlplane.logs import REDIS
from controlplane.settings import Settings

# Buckets one process keeps at most (keys × scopes, and client addresses): a flood from
# made-up addresses forgets the oldest instead of growing the process.
MAX_LOCAL_BUCKETS = 100_000
LEASE_SECONDS = 1.0
REDIS_TIMEOUT_SECONDS = 0.25
REDIS_RETRY_SECONDS = 5.0
REDIS_PREFIX = "shadowplane:"


@dataclass(frozen=True, slots=True)
class Rate:
    per_second: float
    burst: int
    setting: str  # the environment variable to raise, for the 429's sentence

    @property
    def unlimited(self) -> bool:
        return self.per_second <= 0 or self.burst <= 0

    @property
    def lease(self) -> int:
        return max(1, min(self.burst // 20, int(self.per_second / 20)))


def scope_rates(settings: Settings) -> dict[str, Rate]:
    """The bucket of each scope; keys of the `flags:read` scope use the `flags` settings."""
    rates = {}
    for scope, name in (
        ("ingest", "ingest"),
        ("flags:read", "flags"),
        ("read", "read"),
        ("review", "review"),
        ("admin", "admin"),
    ):
        rates[scope] = Rate(
            per_second=getattr(settings, f"rate_{name}_per_second"),
            burst=getattr(settings, f"rate_{name}_burst"),
            setting=f"SHADOWPLANE_RATE_{name.upper()}_PER_SECOND",
        )
    return rates


def retry_after(seconds: float) -> int:
    """The `Retry-After` value: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(seconds))


class Buckets(Protocol):
    def take(self, bucket: str, rate: Rate, want: int) -> tuple[int, float]:
        """Take up to `want` tokens: how many were granted, and the seconds until a token is
        available once this take is done (0 while one is left)."""
        ...


def _refill(tokens: float, elapsed: float, rate: Rate) -> float:
    return min(float(rate.burst), tokens + max(0.0, elapsed) * rate.per_second)


def _take(tokens: float, rate: Rate, want: int) -> tuple[float, int, float]:
    granted = min(want, int(tokens))
    tokens -= granted
    wait = 0.0 if tokens >= 1 else (1 - tokens) / rate.per_second
    return tokens, granted, wait


class LocalBuckets:
    """This process's buckets (the embedded mode, and the fallback while Redis is down)."""

    def __init__(self) -> None:
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, bucket: str, rate: Rate, want: int) -> tuple[int, float]:
        now = time.monotonic()
        with self._lock:
            state = self._buckets.get(bucket)
            if state is None:
                tokens = float(rate.burst)
                if len(self._buckets) >= MAX_LOCAL_BUCKETS:
                    self._buckets.popitem(last=False)
            else:
                tokens = _refill(state[0], now - state[1], rate)
                self._buckets.move_to_end(bucket)
            tokens, granted, wait = _take(tokens, rate, want)
            self._buckets[bucket] = (tokens, now)
        return granted, wait


# KEYS[1]: the bucket; ARGV: tokens per second, burst, tokens wanted, seconds to keep it.
# The clock is Redis's, so replicas with skewed clocks share one bucket exactly.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
if tokens == nil then
  tokens = burst
else
  tokens = math.min(burst, tokens + math.max(0, now - tonumber(state[2])) * rate)
end
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
local wait = 0
if tokens < 1 then wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return {granted, tostring(wait)}
"""


class RedisBuckets:
    """Buckets in Redis, shared by every replica; `fallback` answers while Redis cannot."""

    def __init__(self, url: str, fallback: Buckets) -> None:
        import redis

        # Any exception out of the client is a Redis failure (redis-py also raises
        # AttributeError when a connection is torn down under a call).
        self._errors: tuple[type[Exception], ...] = (Exception,)
        client = redis.Redis.from_url(
            url,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
            socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        )
        self._script: Any = client.register_script(_TAKE)
        self._fallback = fallback
        self._down_until = 0.0
        self._lock = threading.Lock()

    def take(self, bucket: str, rate: Rate, want: int) -> tuple[int, float]:
        if time.monotonic() < self._down_until:
            return self._fallback.take(bucket, rate, want)
        keep = math.ceil(rate.burst / rate.per_second) + 1
        try:
            granted, wait = self._script(
                keys=[REDIS_PREFIX + bucket], args=[rate.per_second, rate.burst, want, keep]
            )
        except self._errors as exc:
            # Limits are per process until Redis answers (the outage is logged once).
            REDIS.failed(exc)
            with self._lock:
                self._down_until = time.monotonic() + REDIS_RETRY_SECONDS
            return self._fallback.take(bucket, rate, want)
        if self._down_until:
            with self._lock:
                self._down_until = 0.0
        REDIS.answered()
        return int(granted), float(wait)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A 429: when to retry, and the sentence saying which limit and how to raise it."""

    retry_after: int
    detail: str


class RateLimiter:
    """The per-key buckets and the failed-authentication budgets of one process."""

    def __init__(self, settings: Settings) -> None:
        self.rates = scope_rates(settings)
        per_minute = settings.auth_failures_per_minute
        self.failure_rate = Rate(
            per_second=per_minute / 60,
            burst=per_minute,
            setting="SHADOWPLANE_AUTH_FAILURES_PER_MINUTE",
        )
        local = LocalBuckets()
        self._buckets: Buckets = (
            RedisBuckets(settings.redis_url, fallback=local) if settings.redis_url else local
        )
        self._shared = settings.redis_url is not None
        # Tokens this process took from Redis ahead of use: bucket → (left, expires at).
        self._leases: dict[str, tuple[int, float]] = {}
        # Client addresses out of failures: address → when (monotonic) the next is allowed.
        self._blocked: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def check_key(self, key_id: str, key_name: str, scope: str) -> Refusal | None:
        """Take one token from the key's bucket for `scope`; a Refusal when it is empty."""
        rate = self.rates[scope]
        if rate.unlimited:
            return None
        bucket = f"rate:{scope}:{key_id}"
        now = time.monotonic()
        with self._lock:
            lease = self._leases.get(bucket)
            if lease is not None and lease[0] > 0 and now < lease[1]:
                self._leases[bucket] = (lease[0] - 1, lease[1])
                return None
        want = rate.lease if self._shared else 1
        granted, wait = self._buckets.take(bucket, rate, want)
        if granted > 1:
            with self._lock:
                if len(self._leases) >= MAX_LOCAL_BUCKETS:
                    self._leases.clear()  # leases are an optimisation: dropping them is safe
                self._leases[bucket] = (granted - 1, now + LEASE_SECONDS)
        if granted:
            return None
        seconds = retry_after(wait)
        return Refusal(
            seconds,
            f"rate limit: key {key_name!r} is over its {scope!r} rate "
            f"({rate.per_second:g} requests/s, burst {rate.burst}; {rate.setting}); "
            f"retry in {seconds} s",
        )

    def check_key_in_memory(
        self, key_id: str, key_name: str, scope: str
    ) -> tuple[bool, Refusal | None]:
        """`check_key` if it can be answered without I/O (this process's own buckets, or a
        lease still held): (True, its answer); else (False, None) and nothing is taken —
        call `check_key`, which may ask Redis, from a thread."""
        rate = self.rates[scope]
        if rate.unlimited:
            return True, None
        if not self._shared:
            return True, self.check_key(key_id, key_name, scope)
        bucket = f"rate:{scope}:{key_id}"
        now = time.monotonic()
        with self._lock:
            lease = self._leases.get(bucket)
            if lease is not None and lease[0] > 0 and now < lease[1]:
                self._leases[bucket] = (lease[0] - 1, lease[1])
                return True, None
        return False, None

    def blocked(self, address: str) -> Refusal | None:
        """A Refusal while `address` has used up its failed authentications (no I/O). Asked
        only for a token that is not a valid key: it never refuses a valid key."""
        with self._lock:
            until = self._blocked.get(address)
            if until is None:
                return None
            left = until - time.monotonic()
            if left <= 0:
                del self._blocked[address]
                return None
        seconds = retry_after(left)
        return Refusal(
            seconds,
            f"too many failed authentications from {address} "
            f"({self.failure_rate.burst} a minute; {self.failure_rate.setting}); "
            f"retry in {seconds} s",
        )

    def failed(self, address: str) -> None:
        """Count one failed authentication from `address` (shared through Redis when set)."""
        if self.failure_rate.unlimited:
            return
        _, wait = self._buckets.take(f"authfail:{address}", self.failure_rate, 1)
        if wait > 0:
            # Out of budget: refuse this address's invalid tokens locally, without counting
            # them, until the bucket holds a token again. Another replica learns it at its
            # own next failure from the address, so the fleet stays within about the budget.
            with self._lock:
                if address not in self._blocked and len(self._blocked) >= MAX_LOCAL_BUCKETS:
                    self._blocked.popitem(last=False)
                self._blocked[address] = time.monotonic() + wait

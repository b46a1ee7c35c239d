"""`sticky_bucket(task, key) = murmur3_32(utf8(task + ":" + key), seed 0) % 100`, and
`wants_repeat`, the same hash of the request id at full resolution.

The same session (or user) lands in the same bucket for a task on every router and in
every language; `sticky_bucket_vectors.json` beside this file pins the values. No key
means no bucket: the request goes to the cloud.
"""

from __future__ import annotations

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit, as an unsigned integer."""
    h = seed & _MASK
    length = len(data)
    tail_start = length - length % 4
    for i in range(0, tail_start, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
        h = _rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK
    tail = data[tail_start:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def sticky_bucket(task: str, key: str | None) -> int | None:
    """The task's 0–99 bucket for a session or user id; None without a key (route to cloud)."""
    if not key:
        return None
    return murmur3_32(f"{task}:{key}".encode()) % 100


# The longest request id Shadowplane stores (a longer one is refused at ingest): its repeat
# would never be stored, and hashing a request id never costs more than this.
MAX_REQUEST_ID_LENGTH = 200
REPEAT_PREFIX = "repeat:"


def wants_repeat(task: str, request_id: str | None, rate: float) -> bool:
    """Whether this request is one on which the cloud is asked a second time (its answer
    reported as `cloud_repeat`): `murmur3_32(utf8("repeat:" + task + ":" + request_id),
    seed 0) / 2**32 < rate`. Sticky by request id (a resent request decides alike) and, by
    its prefix, independent of the sticky bucket. No request id, a longer one than ingest
    stores, or a rate that is not a number above 0 → no repeat; a rate of 1 → always."""
    if not isinstance(request_id, str) or not request_id:
        return False
    if len(request_id) > MAX_REQUEST_ID_LENGTH:
        return False
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
        return False  # NaN fails the comparison too
    return murmur3_32(f"{REPEAT_PREFIX}{task}:{request_id}".encode()) / 2**32 < rate

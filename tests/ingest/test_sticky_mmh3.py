"""The service's sticky bucket (mmh3, in C) against the client's pure-Python one, which routers
run: the same bucket on the vectors file and on 100,000 random keys."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import controlplane.client
from controlplane.client import sticky as client
from controlplane.ingest import buckets as service

VECTORS = Path(controlplane.client.__file__).parent / "sticky_bucket_vectors.json"

# Characters a key may hold: ASCII, accented Latin, CJK, combining marks, controls and
# 4-byte UTF-8 (emoji, astral CJK), so every tail length of the hash's 4-byte blocks is reached.
CHARACTERS = "abcXYZ019-_:/. éüßñø会话用户令牌\u0301\u0308😀🚀𠀀\U0010ffff\x00\x7f"


def random_keys(rng: random.Random, count: int) -> list[str]:
    """Mostly short keys (as session ids are), one in twenty empty, one in twenty up to 300
    characters: slices of one long random string (drawing each character alone is slower
    than hashing them)."""
    text = "".join(rng.choices(CHARACTERS, k=count + 300))
    keys = []
    for start in range(count):
        roll = rng.random()
        length = 0 if roll < 0.05 else rng.randint(25, 300) if roll > 0.95 else rng.randint(1, 24)
        keys.append(text[start : start + length])
    return keys


def test_the_vectors_file_holds_for_the_service() -> None:
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert len(vectors) >= 4
    for v in vectors:
        assert service.sticky_bucket(v["task"], v["key"]) == v["bucket"], v
        assert client.sticky_bucket(v["task"], v["key"]) == v["bucket"], v


def test_both_agree_on_100_000_random_keys() -> None:
    rng = random.Random(18)
    tasks = ["ticket_classify", "t", "задача", "任务"]
    keys = [(rng.choice(tasks), key) for key in random_keys(rng, 100_000)]
    assert sum(1 for _, key in keys if key == "") > 1000  # the empty key is in the draw
    assert max(len(key) for _, key in keys) > 250
    service_buckets = [service.sticky_bucket(task, key) for task, key in keys]
    client_buckets = [client.sticky_bucket(task, key) for task, key in keys]
    assert service_buckets == client_buckets
    assert set(service_buckets) == {None, *range(100)}  # both spread keys over every bucket


def test_no_key_means_no_bucket() -> None:
    assert service.sticky_bucket("ticket_classify", None) is None
    assert service.sticky_bucket("ticket_classify", "") is None


def test_a_lone_surrogate_raises_as_the_client_does() -> None:
    # mmh3 given such a str crashes the process; the service's function encodes first.
    for bucket in (service.sticky_bucket, client.sticky_bucket):
        with pytest.raises(UnicodeEncodeError):
            bucket("ticket_classify", "s-\ud800")

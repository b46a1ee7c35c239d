"""sticky_bucket against the vectors file, the public MurmurHash3 vectors, and its laws."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import controlplane.client
from controlplane.client import murmur3_32, sticky_bucket

VECTORS = Path(controlplane.client.__file__).parent / "sticky_bucket_vectors.json"


def test_the_vectors_file_starts_with_designs_four_and_every_entry_holds() -> None:
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert [(v["task"], v["key"], v["bucket"]) for v in vectors[:4]] == [
        ("ticket_classify", "s-1", 84),
        ("ticket_classify", "s-2", 48),
        ("invoice_extract", "s-1", 17),
        ("ticket_classify", "会话-1", 63),
    ]
    for v in vectors:
        assert murmur3_32(v["input"].encode()) == v["murmur3_32"], v
        assert sticky_bucket(v["task"], v["key"]) == v["bucket"], v


def test_murmur3_matches_the_reference_implementation() -> None:
    # Published MurmurHash3_x86_32 values (seed 0 unless given).
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", seed=1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"\xff\xff\xff\xff") == 0x76293B50


def test_no_key_means_no_bucket() -> None:
    assert sticky_bucket("ticket_classify", None) is None
    assert sticky_bucket("ticket_classify", "") is None


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_a_bucket_is_stable_and_in_range(task: str, key: str) -> None:
    bucket = sticky_bucket(task, key)
    assert bucket is not None and 0 <= bucket < 100
    assert sticky_bucket(task, key) == bucket


def test_buckets_are_close_to_uniform() -> None:
    counts = Counter(sticky_bucket("ticket_classify", f"s-{i}") for i in range(100_000))
    assert len(counts) == 100
    assert max(counts.values()) < 1150 and min(counts.values()) > 850  # 1,000 ± ~4.7σ

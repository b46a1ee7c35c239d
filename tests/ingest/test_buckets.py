"""Length buckets: names, edges, and laws that hold for any boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.ingest.buckets import DEFAULT_BOUNDARIES, bucket_labels, length_bucket


def test_default_buckets() -> None:
    assert bucket_labels(DEFAULT_BOUNDARIES) == ["0-127", "128-511", "512-2047", "2048+"]
    assert [
        length_bucket(n, DEFAULT_BOUNDARIES) for n in (0, 127, 128, 511, 512, 2047, 2048, 10**6)
    ] == ["0-127", "0-127", "128-511", "128-511", "512-2047", "512-2047", "2048+", "2048+"]


def test_no_boundaries_is_one_bucket() -> None:
    assert bucket_labels([]) == ["0+"]
    assert length_bucket(5, []) == "0+"


boundaries = st.lists(st.integers(1, 100_000), max_size=6, unique=True).map(sorted)


@given(boundaries, st.integers(0, 200_000))
def test_every_length_falls_in_exactly_one_named_bucket(bounds: list[int], tokens: int) -> None:
    assert length_bucket(tokens, bounds) in bucket_labels(bounds)


@given(boundaries, st.integers(0, 200_000), st.integers(0, 200_000))
def test_buckets_are_ordered_like_lengths(bounds: list[int], a: int, b: int) -> None:
    labels = bucket_labels(bounds)
    lo, hi = sorted((a, b))
    assert labels.index(length_bucket(lo, bounds)) <= labels.index(length_bucket(hi, bounds))

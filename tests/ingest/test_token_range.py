"""A length bucket's input token range, the inverse of `length_bucket`."""

from __future__ import annotations

import pytest

from controlplane.ingest.buckets import bucket_labels, length_bucket
from controlplane.ingest.examples import token_range

BOUNDARIES = (128, 512, 2048)


def test_each_bucket_holds_exactly_the_token_counts_length_bucket_gives_it() -> None:
    for label in bucket_labels(BOUNDARIES):
        low, high = token_range(label, BOUNDARIES)
        assert length_bucket(low, BOUNDARIES) == label
        if low > 0:
            assert length_bucket(low - 1, BOUNDARIES) != label
        if high is not None:
            assert length_bucket(high - 1, BOUNDARIES) == label
            assert length_bucket(high, BOUNDARIES) != label
    assert token_range("2048+", BOUNDARIES) == (2048, None)
    assert token_range("0-127", BOUNDARIES) == (0, 128)


def test_an_unknown_bucket_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="0-127, 128-511, 512-2047, 2048\\+"):
        token_range("100-200", BOUNDARIES)

"""`noisy_fields`: the fields or checks the cloud changes on more than a share of its repeats."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.metrics.noise import noisy_fields


def test_fields_above_the_rate_noisiest_first() -> None:
    diffs = {"invoice_id": 30, "amount": 6, "currency": 5, "note": 45}
    assert noisy_fields(diffs, 100, 0.05) == [
        {"name": "note", "count": 45, "pairs": 100, "rate": 0.45},
        {"name": "invoice_id", "count": 30, "pairs": 100, "rate": 0.30},
        {"name": "amount", "count": 6, "pairs": 100, "rate": 0.06},
    ]


def test_a_share_equal_to_the_rate_is_not_noisy_and_ties_go_by_name() -> None:
    assert noisy_fields({"b": 2, "a": 2, "c": 1}, 20, 0.05) == [
        {"name": "a", "count": 2, "pairs": 20, "rate": 0.1},
        {"name": "b", "count": 2, "pairs": 20, "rate": 0.1},
    ]


def test_nothing_without_repeat_pairs_or_counts() -> None:
    assert noisy_fields(None, 100, 0.05) == []
    assert noisy_fields({}, 100, 0.05) == []
    assert noisy_fields({"a": 3}, 0, 0.05) == []


@given(
    st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 200), max_size=8),
    st.integers(1, 200),
    st.floats(0, 1),
)
def test_exactly_the_fields_over_the_rate_sorted_by_rate(
    diffs: dict[str, int], pairs: int, rate: float
) -> None:
    found = noisy_fields(diffs, pairs, rate)
    assert {item["name"] for item in found} == {n for n, c in diffs.items() if c / pairs > rate}
    assert [item["rate"] for item in found] == sorted((i["rate"] for i in found), reverse=True)
    for item in found:
        assert item["count"] == diffs[item["name"]] and item["pairs"] == pairs
        assert item["rate"] == item["count"] / pairs

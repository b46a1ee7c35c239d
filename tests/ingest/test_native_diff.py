"""The compiled diff of two readings (`_counts.multiset_diff`, `_counts.set_diff`) against
its reference in comparators.py: the same four sorted lists, on drawn multisets and sets
and on the readings of drawn texts."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare.comparators import multiset_diff, set_diff
from controlplane.compare.conservation import read_python
from tests.ingest.native_support import PIECES, native, texts

_counts = native("_counts")

words = st.one_of(st.sampled_from(PIECES), st.text(max_size=4))
counters = st.dictionaries(words, st.integers(min_value=1, max_value=4), max_size=12).map(Counter)


@settings(max_examples=150, deadline=None)
@given(counters, counters)
def test_multisets_diff_alike(edge: Counter[str], cloud: Counter[str]) -> None:
    got = _counts.multiset_diff(edge, cloud)
    assert got == multiset_diff(edge, cloud)
    assert [type(part) for part in got] == [list] * 4


def test_a_multiset_diff_by_hand() -> None:
    edge, cloud = Counter({"3": 2, "30": 1, "7": 1}), Counter({"3": 1, "5": 2, "7": 1})
    expected = (["3", "3", "30", "7"], ["3", "5", "5", "7"], ["5", "5"], ["3", "30"])
    assert _counts.multiset_diff(edge, cloud) == expected == multiset_diff(edge, cloud)


@settings(max_examples=150, deadline=None)
@given(st.frozensets(words, max_size=12), st.frozensets(words, max_size=12))
def test_sets_diff_alike(edge: frozenset[str], cloud: frozenset[str]) -> None:
    assert _counts.set_diff(edge, cloud) == set_diff(edge, cloud)


@settings(max_examples=150, deadline=None)
@given(texts, texts)
def test_the_diffs_of_drawn_readings_alike(edge_text: str, cloud_text: str) -> None:
    edge, cloud = read_python(edge_text), read_python(cloud_text)
    for e, c in ((edge.numbers, cloud.numbers), (edge.negations, cloud.negations)):
        assert _counts.multiset_diff(e, c) == multiset_diff(e, c)
    assert _counts.set_diff(edge.spans, cloud.spans) == set_diff(edge.spans, cloud.spans)

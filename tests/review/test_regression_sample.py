"""How a rollback's regression sample is split (pure): at most `review.regression_items`,
the breaching cell first with all but a fifth (or all the others cannot use), each group
over its strata in proportion, one each first where the share allows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.review.allocation import STRATA
from controlplane.review.regression import regression_allocation

BUCKETS = ["0-127", "128-511", "512+"]
# One window of tests/review/test_sampler.py per bucket: 93 reviewable results.
WINDOW = {"conflict": 30, "edge_error": 4, "invalid": 3, "low_confidence": 6, "cloud_decided": 10}
WINDOW["agree"] = 40


def test_the_breaching_cell_takes_four_fifths_split_in_proportion() -> None:
    counts = {(b, s): n for b in ("0-127", "128-511") for s, n in WINDOW.items()}
    got = regression_allocation(100, counts, ["128-511"], BUCKETS)
    # Others (93 candidates) are kept 100 // 5 = 20; the breaching cell takes 80 of its 93.
    # 80 over the strata (93 candidates): one each (6), then 74 in proportion, never past a
    # stratum's size: conflict 1 + 74*30//93 = 24, edge_error 1 + min(3, 296//93) = 4,
    # invalid 1 + min(2, 222//93) = 3, low_confidence 1 + 444//93 = 5, cloud_decided
    # 1 + 740//93 = 8, agree 1 + 2960//93 = 32 (76); the 4 left over the open strata
    # (weights 30, 6, 10, 40 = 86): conflict 4*30//86 = 1, agree 4*40//86 = 1; the last 2
    # one each to the heaviest: agree, conflict.
    assert {s: n for (b, s), n in got.items() if b == "128-511"} == {
        "conflict": 26,
        "edge_error": 4,
        "invalid": 3,
        "low_confidence": 5,
        "cloud_decided": 8,
        "agree": 34,
    }
    # 20 over the other bucket: one each (6), then 14 in proportion: conflict 14*30//93 = 4,
    # cloud_decided 140//93 = 1, agree 560//93 = 6 (17); 3 left: agree 3*40//93 = 1; the
    # last 2 to the heaviest: agree, conflict.
    assert {s: n for (b, s), n in got.items() if b == "0-127"} == {
        "conflict": 6,
        "edge_error": 1,
        "invalid": 1,
        "low_confidence": 1,
        "cloud_decided": 2,
        "agree": 9,
    }


def test_what_the_breaching_cell_cannot_use_goes_to_the_others() -> None:
    counts = {("512+", "conflict"): 3, ("0-127", "agree"): 50, ("128-511", "conflict"): 1}
    got = regression_allocation(10, counts, ["512+"], BUCKETS)
    # The breaching cell holds 3: the others take the other 7, one each first.
    assert got == {("512+", "conflict"): 3, ("128-511", "conflict"): 1, ("0-127", "agree"): 6}


def test_cell_all_is_every_judged_bucket_and_small_shares_go_to_conflicts_first() -> None:
    counts = {("512+", "conflict"): 20, ("0-127", "agree"): 50}
    # Both buckets breach (cell all): 10 split in proportion, one each first: 8 left,
    # conflict 8*20//70 = 2, agree 8*50//70 = 5; the last one to the heaviest (agree).
    assert regression_allocation(10, counts, ["0-127", "512+"], BUCKETS) == {
        ("512+", "conflict"): 3,
        ("0-127", "agree"): 7,
    }
    # Two items for three strata: one each in STRATA order (conflict, ..., low_confidence).
    three = {("0-127", "agree"): 5, ("0-127", "low_confidence"): 5, ("0-127", "conflict"): 5}
    assert regression_allocation(2, three, ["0-127"], BUCKETS) == {
        ("0-127", "conflict"): 1,
        ("0-127", "low_confidence"): 1,
    }
    assert regression_allocation(0, three, ["0-127"], BUCKETS) == {}


cells = st.dictionaries(
    st.tuples(st.sampled_from(BUCKETS), st.sampled_from(STRATA)), st.integers(0, 80), max_size=18
)


@given(n=st.integers(0, 300), counts=cells, breaching=st.sampled_from(BUCKETS))
def test_the_sample_fills_n_or_everything_breaching_first(
    n: int, counts: dict[tuple[str, str], int], breaching: str
) -> None:
    got = regression_allocation(n, counts, [breaching], BUCKETS)
    total = sum(counts.values())
    hot = sum(k for (b, _), k in counts.items() if b == breaching)
    taken_hot = sum(k for (b, _), k in got.items() if b == breaching)
    assert sum(got.values()) == min(n, total)
    assert all(0 < k <= counts[c] for c, k in got.items())
    # The breaching cell gets all but a fifth of n, or all it holds.
    assert taken_hot == min(hot, n - min(total - hot, n // 5))
    # Every non-empty stratum of a group gets one when its group's share allows it.
    for in_hot in (True, False):
        present = [c for c, k in counts.items() if k > 0 and (c[0] == breaching) == in_hot]
        share = sum(k for c, k in got.items() if (c[0] == breaching) == in_hot)
        if share >= len(present):
            assert all(c in got for c in present)

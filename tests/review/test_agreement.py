"""Reviewer agreement (pure) against hand-computed values: Cohen's kappa and
Krippendorff's alpha (nominal)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.review.agreement import agreement, cohen_kappa, krippendorff_alpha


@dataclass
class Label:
    id: int
    reviewer: str
    resolved: str
    failure_class: str | None = None
    corrected: Any = None
    created_at: datetime = datetime(2026, 11, 30, tzinfo=UTC)


R1 = ["edge_correct", "edge_correct", "edge_correct", "cloud_correct", "cloud_correct"]
R2 = ["edge_correct", "edge_correct", "cloud_correct", "cloud_correct", "cloud_correct"]


def test_cohen_kappa_by_hand() -> None:
    # observed 4/5; chance (3·2 + 2·3)/25 = 0.48; kappa = (0.8 − 0.48)/0.52
    observed, kappa = cohen_kappa(R1, R2)
    assert observed == pytest.approx(0.8)
    assert kappa == pytest.approx(0.32 / 0.52)
    # Both always gave the same one verdict: chance agrees fully, kappa is undefined.
    assert cohen_kappa(["x", "x"], ["x", "x"]) == (1.0, None)


def test_krippendorff_alpha_by_hand() -> None:
    # Coincidences: o_aa = 4, o_bb = 4, o_ab = o_ba = 1; n = 10, n_a = n_b = 5.
    # D_o = 2/10, D_e = 2·5·5/(10·9); alpha = 1 − D_o/D_e = 0.64
    assert krippendorff_alpha(zip(R1, R2, strict=True)) == pytest.approx(0.64)
    # A third reviewer on the first item only: 3 votes, 2 pairable values per vote.
    # Items with one vote are not pairable and are left out.
    assert krippendorff_alpha([["a"], ["a", "b"]]) is not None
    assert krippendorff_alpha([["a", "a"], ["a", "a"]]) is None


def test_agreement_of_an_items_labels_uses_each_reviewers_newest_vote() -> None:
    labels: dict[int, list[Label]] = {}
    next_id = iter(range(1, 100))
    for item, (a, b) in enumerate(zip(R1, R2, strict=True)):
        labels[item] = [Label(next(next_id), "ann", a), Label(next(next_id), "bob", b)]
    # ann first said the opposite on item 0; her newer label supersedes it
    labels[0].insert(0, Label(0, "ann", "cloud_correct"))
    # one reviewer only: not counted
    labels[99] = [Label(next(next_id), "cid", "both_wrong")]
    found = agreement(labels)
    assert found.items == 5
    assert found.reviewers == ("ann", "bob")
    assert found.alpha == pytest.approx(0.64)
    assert found.kappa == pytest.approx(0.32 / 0.52)
    assert found.unanimous == pytest.approx(0.8)
    (pair,) = found.pairs
    assert pair.reviewers == ("ann", "bob") and pair.items == 5


def test_three_reviewers_have_pairwise_kappas_and_no_single_one() -> None:
    labels = {
        1: [Label(1, "ann", "x"), Label(2, "bob", "x"), Label(3, "cid", "y")],
        2: [Label(4, "ann", "y"), Label(5, "bob", "y")],
        3: [Label(6, "ann", "x"), Label(7, "cid", "x")],
    }
    found = agreement(labels)
    assert found.kappa is None
    assert [(p.reviewers, p.items) for p in found.pairs] == [
        (("ann", "bob"), 2),
        (("ann", "cid"), 2),
        (("bob", "cid"), 1),
    ]
    assert found.alpha is not None and found.alpha < 1.0


def test_no_shared_items_says_why() -> None:
    found = agreement({1: [Label(1, "ann", "x")]})
    assert found.items == 0 and found.alpha is None and found.note


@given(
    st.dictionaries(
        st.integers(0, 40),
        st.dictionaries(
            st.sampled_from(["ann", "bob", "cy", "dee", "eve"]),
            st.sampled_from(["edge_correct", "cloud_correct", "both_wrong", "unclear"]),
            min_size=1,
            max_size=5,
        ),
        max_size=40,
    )
)
@settings(max_examples=200, deadline=None)
def test_pair_kappas_equal_each_pair_judged_on_its_common_items(
    cast: dict[int, dict[str, str]],
) -> None:
    # Pairs are gathered item by item; each must be the kappa of the two reviewers' votes
    # on exactly the items both labelled, in item order.
    by_item = {
        item: [Label(item * 10 + k, r, v) for k, (r, v) in enumerate(sorted(votes.items()))]
        for item, votes in cast.items()
    }
    found = {p.reviewers: p for p in agreement(by_item).pairs}
    shared = {i: v for i, v in cast.items() if len(v) >= 2}
    expected = {}
    names = sorted({r for v in shared.values() for r in v})
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            common = [shared[k] for k in sorted(shared) if a in shared[k] and b in shared[k]]
            if common:
                expected[(a, b)] = cohen_kappa([c[a] for c in common], [c[b] for c in common])
    assert {k: (p.observed, p.kappa) for k, p in found.items()} == expected

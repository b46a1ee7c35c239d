"""The route-accuracy estimator (pure): inverse-probability weights undo the sampler's
over-sampling of conflicts, the interval is Wilson on Kish's effective size."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.metrics.stats import wilson
from controlplane.review.estimate import LabelledPair, route_accuracy

# A stratum of the traffic: how many results, how often the edge answer is right, what the
# router decided, and how many the sampler draws (without replacement).
STRATA = {
    "agree": (4000, 0.97, "edge", 40),
    "conflict": (500, 0.35, "edge", 40),
    "cloud_decided": (500, 0.60, "cloud", 20),
}


def simulate(seed: int) -> tuple[float, list[LabelledPair]]:
    """A population with known truth and its sample, conflicts heavily over-sampled."""
    rng = random.Random(seed)
    right_routes = 0
    total = 0
    sample = []
    for _, (size, edge_right_p, decision, drawn) in STRATA.items():
        edge_right = [rng.random() < edge_right_p for _ in range(size)]
        right_routes += sum((decision == "edge") == e for e in edge_right)
        total += size
        for e in rng.sample(edge_right, drawn):
            sample.append(
                LabelledPair(
                    decision=decision,
                    resolved="both_correct" if e else "cloud_correct",
                    inclusion_probability=drawn / size,
                )
            )
    return right_routes / total, sample


def test_weighted_estimate_covers_the_truth_where_the_unweighted_one_does_not() -> None:
    covered = naive_covered = 0
    for seed in range(200):
        truth, sample = simulate(seed)
        found = route_accuracy(sample)
        assert found.low is not None and found.high is not None
        covered += found.low <= truth <= found.high
        naive = sum((p.decision == "edge") == (p.resolved == "both_correct") for p in sample)
        interval = wilson(naive, len(sample))
        assert interval is not None
        naive_covered += interval[0] <= truth <= interval[1]
    assert covered >= 180
    assert naive_covered < 100


def test_hand_computed_weights_effective_size_and_error_directions() -> None:
    pairs = [
        # decided edge, edge right: a right route (weight 2)
        LabelledPair("edge", "edge_correct", 0.5),
        # decided edge, edge wrong: wrong offload (weight 1), class amount
        LabelledPair("edge", "cloud_correct", 1.0, "amount"),
        # decided cloud, edge right: missed offload (weight 4)
        LabelledPair("cloud", "both_correct", 0.25),
        # decided cloud, both wrong: the cloud was the right route (weight 1), class tone
        LabelledPair("cloud", "both_wrong", 1.0, "tone"),
        # left out
        LabelledPair("edge", "unclear", 0.5, "ignored_class"),
    ]
    found = route_accuracy(pairs, other_classes=["from_a_single"])
    assert found.n_labels == 4
    assert found.n_unclear == 1
    assert found.estimate == pytest.approx(3 / 8)
    assert found.n_effective == pytest.approx(64 / 22)
    assert found.missed_offload == pytest.approx(4 / 8)
    assert found.wrong_offload == pytest.approx(1 / 8)
    assert found.estimate + found.missed_offload + found.wrong_offload == pytest.approx(1.0)
    expected = wilson(3 / 8 * 64 / 22, 64 / 22)
    assert (found.low, found.high) == pytest.approx(expected)
    assert found.failure_classes == pytest.approx(
        {"amount": 1 / 8, "from_a_single": 0.0, "ignored_class": 0.0, "tone": 1 / 8}
    )


def test_equal_weights_give_the_plain_share_and_count() -> None:
    pairs = [LabelledPair("edge", "edge_correct", 0.1)] * 9 + [
        LabelledPair("edge", "cloud_correct", 0.1)
    ]
    found = route_accuracy(pairs)
    assert found.estimate == pytest.approx(0.9)
    assert found.n_effective == pytest.approx(10)


def test_no_clear_labels_is_no_estimate() -> None:
    found = route_accuracy([LabelledPair("edge", "unclear", 0.5)])
    assert found.n_labels == 0 and found.n_unclear == 1
    assert found.estimate is None and found.low is None and found.n_effective == 0.0
    assert not math.isnan(found.n_effective)


pairs_strategy = st.lists(
    st.builds(
        LabelledPair,
        decision=st.sampled_from(["edge", "cloud"]),
        resolved=st.sampled_from(
            ["edge_correct", "cloud_correct", "both_correct", "both_wrong", "unclear"]
        ),
        inclusion_probability=st.floats(0.001, 1.0),
        failure_class=st.sampled_from([None, "amount", "tone"]),
    ),
    max_size=60,
)


@given(pairs=pairs_strategy, scale=st.floats(0.01, 1.0))
def test_laws_of_the_estimator(pairs: list[LabelledPair], scale: float) -> None:
    found = route_accuracy(pairs)
    counted = [p for p in pairs if p.resolved != "unclear"]
    assert found.n_labels == len(counted)
    if not counted:
        assert found.estimate is None
        return
    assert found.estimate is not None and found.low is not None and found.high is not None
    assert found.missed_offload is not None and found.wrong_offload is not None
    # The errors are the two directions of what the estimate misses.
    assert found.estimate + found.missed_offload + found.wrong_offload == pytest.approx(1.0)
    assert 0.0 <= found.low <= found.estimate <= found.high <= 1.0
    # Kish's size: between 1 and the number of labels, equal only for equal weights.
    assert 1.0 - 1e-9 <= found.n_effective <= len(counted) + 1e-9
    # Failure-class shares are parts of the wrong edge answers.
    weights = [1 / p.inclusion_probability for p in counted]
    edge_wrong = sum(
        w
        for w, p in zip(weights, counted, strict=True)
        if p.resolved in ("cloud_correct", "both_wrong")
    ) / sum(weights)
    assert sum(found.failure_classes.values()) <= edge_wrong + 1e-9
    # Only relative weights matter: scaling every probability changes nothing.
    scaled = route_accuracy(
        [
            LabelledPair(p.decision, p.resolved, p.inclusion_probability * scale, p.failure_class)
            for p in pairs
        ]
    )
    assert scaled.estimate == pytest.approx(found.estimate)
    assert scaled.n_effective == pytest.approx(found.n_effective)

"""metrics.lengths: the octave bins at their edges, adding histograms, and the population
stability index against hand computations."""

from __future__ import annotations

import math

import numpy
import pytest

from controlplane.metrics import lengths


def one_hot(index: int, count: int = 1) -> list[int]:
    counts = [0] * lengths.BINS
    counts[index] = count
    return counts


def padded(*counts: int) -> list[int]:
    return [*counts] + [0] * (lengths.BINS - len(counts))


def test_fifteen_octave_bins_with_their_labels() -> None:
    assert lengths.BINS == 15
    labels = lengths.bin_labels()
    assert labels[0] == "0-15"
    assert labels[1] == "16-31"
    assert labels[-2] == "65536-131071"
    assert labels[-1] == "131072+"
    assert len(labels) == lengths.BINS


@pytest.mark.parametrize(
    ("tokens", "index"),
    [
        (0, 0),
        (15, 0),
        (16, 1),
        (31, 1),
        (32, 2),
        (131071, 13),
        (131072, 14),
        (10**9, 14),
    ],
)
def test_a_length_falls_in_the_bin_whose_lower_edge_it_reaches(tokens: int, index: int) -> None:
    assert lengths.histogram([tokens]) == one_hot(index)
    assert lengths.histogram(numpy.array([tokens, tokens])) == one_hot(index, 2)


def test_a_histogram_counts_every_length_once() -> None:
    found = lengths.histogram([1, 15, 16, 17, 100, 131071, 131072, 200000])
    # 0-15: 1, 15; 16-31: 16, 17; 64-127: 100; 65536-131071: 131071; 131072+: two.
    assert found == [2, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2]
    assert lengths.histogram([]) == [0] * lengths.BINS
    assert lengths.histogram(numpy.array([], dtype=float)) == [0] * lengths.BINS


def test_add_sums_bin_by_bin_and_skips_windows_without_a_histogram() -> None:
    first = padded(1, 2, 3)
    second = padded(10, 0, 0, 4)
    assert lengths.add([first, None, second, None]) == padded(11, 2, 3, 4)
    assert lengths.add([]) == [0] * lengths.BINS
    assert lengths.add([None]) == [0] * lengths.BINS


def test_psi_matches_a_hand_computation() -> None:
    # now [30, 10], baseline [20, 20]; both bins held, so 0.5 is added to each side's count
    # there (and nowhere else): a = [30.5, 10.5] / 41, b = [20.5, 20.5] / 41.
    # Σ (a − b) ln(a / b) = (10/41) ln(30.5/20.5) + (−10/41) ln(10.5/20.5)
    #                     = (10/41) ln(30.5/10.5) ≈ 0.26005
    expected = (10 / 41) * math.log(30.5 / 20.5) + (-10 / 41) * math.log(10.5 / 20.5)
    assert expected == pytest.approx((10 / 41) * math.log(30.5 / 10.5))
    assert lengths.psi(padded(30, 10), padded(20, 20)) == pytest.approx(expected, rel=1e-12)


def test_psi_adds_the_pseudocount_to_a_bin_only_one_side_holds() -> None:
    # now [30, 10, 0], baseline [20, 15, 5]: the third bin is held by the baseline only,
    # so now gets 0.5 there too: a = [30.5, 10.5, 0.5] / 41.5, b = [20.5, 15.5, 5.5] / 41.5.
    sa = 30.5 + 10.5 + 0.5
    sb = 20.5 + 15.5 + 5.5
    expected = 0.0
    for x, y in ((30.5, 20.5), (10.5, 15.5), (0.5, 5.5)):
        p, q = x / sa, y / sb
        expected += (p - q) * math.log(p / q)
    assert lengths.psi(padded(30, 10, 0), padded(20, 15, 5)) == pytest.approx(expected, rel=1e-12)
    # Had every one of the fifteen bins got the pseudocount, the shares would differ.
    everywhere = 0.0
    for x, y in ((30.5, 20.5), (10.5, 15.5), (0.5, 5.5)):
        p, q = x / (sa + 6), y / (sb + 6)
        everywhere += (p - q) * math.log(p / q)
    assert everywhere != pytest.approx(expected, rel=1e-6)


def test_psi_is_symmetric_and_zero_for_equal_shares() -> None:
    now, baseline = padded(3, 50, 7, 0, 1), padded(9, 20, 30, 2)
    forth, back = lengths.psi(now, baseline), lengths.psi(baseline, now)
    assert forth is not None and forth > 0.1
    assert forth == pytest.approx(back, rel=1e-12)
    assert lengths.psi(padded(10, 20, 30), padded(10, 20, 30)) == 0.0
    # Equal shares at different volumes: the pseudocount leaves a trace, no more.
    scaled = lengths.psi(padded(10, 20, 30), padded(100, 200, 300))
    assert scaled is not None and 0 < scaled < 1e-3


def test_psi_is_none_when_a_side_is_empty() -> None:
    empty = [0] * lengths.BINS
    assert lengths.psi(empty, padded(1, 2)) is None
    assert lengths.psi(padded(1, 2), empty) is None
    assert lengths.psi(empty, empty) is None


def test_a_doubling_of_every_length_moves_each_request_one_bin() -> None:
    rng = numpy.random.default_rng(3)
    tokens = rng.lognormal(math.log(400), 0.6, 5000)
    before, after = lengths.histogram(tokens), lengths.histogram(tokens * 2)
    assert after[1:] == before[:-1]
    shifted = lengths.psi(after, before)
    assert shifted is not None and shifted > 0.25

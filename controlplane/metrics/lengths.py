"""Input lengths as a distribution: fixed log-scale token bins, and the population
stability index between two histograms over them (docs/evidence.md, "Input shift"). Pure.

The bins are octaves, the same for every task and every window, so histograms add up over
windows, over days and across config versions: [0, 16), [16, 32), [32, 64), … [65536,
131072), [131072, ∞) — fifteen bins. A factor of two in input length moves a request one
bin; the bins are fixed so that a baseline kept for weeks still compares with today.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence

import numpy

# The lower edge of every bin but the first (which starts at 0).
EDGES: tuple[int, ...] = tuple(2**k for k in range(4, 18))
BINS = len(EDGES) + 1
# Added to both sides' count in a bin either side holds: an empty bin would make the
# index infinite, and one request more or less in a bin must not move it far.
PSEUDOCOUNT = 0.5

Histogram = Sequence[int]


def bin_labels() -> list[str]:
    """Each bin as its token range: "0-15", "16-31", …, "131072+"."""
    starts = (0, *EDGES)
    return [
        f"{lo}-{hi - 1}" if hi is not None else f"{lo}+"
        for lo, hi in zip(starts, (*EDGES, None), strict=True)
    ]


def histogram(tokens: Iterable[float] | numpy.ndarray) -> list[int]:
    """How many of the input lengths fall in each bin."""
    values = numpy.asarray(tokens if isinstance(tokens, numpy.ndarray) else list(tokens), float)
    if values.size == 0:
        return [0] * BINS
    index = numpy.searchsorted(numpy.asarray(EDGES, float), values, side="right")
    return [int(n) for n in numpy.bincount(index, minlength=BINS)[:BINS]]


def add(histograms: Iterable[Histogram | None]) -> list[int]:
    """The bin-by-bin sum of histograms; None (a window from before histograms) adds nothing."""
    total = [0] * BINS
    for one in histograms:
        if one is None:
            continue
        for i, n in enumerate(one[:BINS]):
            total[i] += int(n)
    return total


def shares(counts: Histogram) -> list[float]:
    n = sum(counts)
    return [c / n if n else 0.0 for c in counts]


def psi(now: Histogram, baseline: Histogram) -> float | None:
    """The population stability index of `now` against `baseline`:
    Σ (a_i − b_i) · ln(a_i / b_i) over the bins either side holds, where a and b are the
    shares after adding `PSEUDOCOUNT` to both sides' counts in those bins. None when a
    side is empty. Symmetric, 0 for equal shares; 0.1 is a moderate shift, 0.25 a large one.
    """
    if not sum(now) or not sum(baseline):
        return None
    held = [i for i in range(min(len(now), len(baseline))) if now[i] or baseline[i]]
    a = [now[i] + PSEUDOCOUNT for i in held]
    b = [baseline[i] + PSEUDOCOUNT for i in held]
    sa, sb = sum(a), sum(b)
    total = 0.0
    for x, y in zip(a, b, strict=True):
        p, q = x / sa, y / sb
        total += (p - q) * math.log(p / q)
    return max(0.0, total)


def split_at_cap(counts: Histogram, over: int, cap: int) -> list[int]:
    """The bins with the one holding `cap` split in two — inputs up to the cap, and over it
    (`over` of all inputs were over it) — so that inputs moving over the routing cap within
    one octave still count as a shift: sixteen bins."""
    i = bisect_right(EDGES, cap)
    above = sum(counts[i + 1 :])
    inside = min(max(over - above, 0), counts[i])
    return [*counts[:i], counts[i] - inside, inside, *counts[i + 1 :]]


def quantile(counts: Histogram, q: float) -> float | None:
    """A rough quantile in tokens from a histogram (the geometric middle of the bin that
    holds it): for sentences only, never for a decision."""
    n = sum(counts)
    if not n:
        return None
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if seen >= q * n:
            lo = 0 if i == 0 else EDGES[i - 1]
            hi = EDGES[i] if i < len(EDGES) else EDGES[-1] * 2
            return math.sqrt(max(lo, 1) * hi)
    return None

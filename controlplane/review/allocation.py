"""How a window's review quota is split (pure): over the strata first, then each stratum's
share over its length buckets, or drawn from the whole stratum when the share is smaller
than its number of buckets (docs/review.md, "Quota").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Strata in the order a result is matched (first wins) and the quota's first round goes.
STRATA = ("conflict", "edge_error", "invalid", "low_confidence", "cloud_decided", "agree")
WEIGHTS = {
    "conflict": 4,
    "edge_error": 2,
    "invalid": 2,
    "low_confidence": 2,
    "cloud_decided": 1,
    "agree": 1,
}

Cell = tuple[str, str]  # (bucket, stratum)


def split(
    quota: int, sizes: Mapping[Any, int], weights: Mapping[Any, int], order: list[Any]
) -> dict[Any, int]:
    """`quota` over the keys of `sizes` (those with a size): one each in `order` first, then
    in proportion to `weights`, never more than a key's size; what a key cannot take goes
    to the others (ties to the heaviest, then the first in `order`)."""
    keys = [k for k in order if sizes.get(k, 0) > 0]
    share = dict.fromkeys(keys, 0)
    remaining = quota
    for key in keys:
        if remaining == 0:
            break
        share[key] = 1
        remaining -= 1
    while remaining > 0:
        open_keys = [k for k in keys if share[k] < sizes[k]]
        if not open_keys:
            break
        total = sum(weights[k] for k in open_keys)
        give = {k: min(sizes[k] - share[k], remaining * weights[k] // total) for k in open_keys}
        if not any(give.values()):
            for key in sorted(open_keys, key=lambda k: -weights[k]):
                if remaining == 0:
                    break
                share[key] += 1
                remaining -= 1
            continue
        for key, n in give.items():
            share[key] += n
            remaining -= n
    return {k: n for k, n in share.items() if n}


@dataclass(frozen=True)
class Allocation:
    """Where a window's quota goes. `cells`: items per (bucket, stratum) for strata drawn
    per bucket; `pooled`: items per stratum drawn from all its buckets at once (a stratum
    whose share is smaller than the number of its buckets). `counts`: candidates per cell."""

    counts: Mapping[Cell, int]
    cells: dict[Cell, int]
    pooled: dict[str, int]

    def stratum_size(self, stratum: str) -> int:
        return sum(n for (_, s), n in self.counts.items() if s == stratum)

    def probability(self, cell: Cell) -> float:
        """The chance a candidate of the cell is drawn."""
        if cell[1] in self.pooled:
            return self.pooled[cell[1]] / self.stratum_size(cell[1])
        return self.cells.get(cell, 0) / self.counts[cell]

    def wanted(self, cell: Cell) -> int:
        """How far into the cell's hash order the draw must see."""
        if cell[1] in self.pooled:
            return min(self.pooled[cell[1]], self.counts[cell])
        return self.cells.get(cell, 0)


def allocate(quota: int, counts: Mapping[Cell, int], buckets: Sequence[str]) -> Allocation:
    """How the quota is split (docs/review.md): over the strata first — one each in
    STRATA order (conflicts first), then by WEIGHTS — so every stratum with candidates is
    measured in every window the quota allows; then a stratum's share over its buckets —
    one each in bucket order, then in proportion to their candidates — or, when the share
    is smaller than the number of its buckets, drawn from the whole stratum at once, so no
    bucket's candidates are left with no chance of being drawn."""
    order = list(buckets) + sorted({b for b, _ in counts} - set(buckets))
    sizes: dict[str, int] = {}
    for (_, stratum), n in counts.items():
        sizes[stratum] = sizes.get(stratum, 0) + n
    per_stratum = split(quota, sizes, WEIGHTS, list(STRATA))
    cells: dict[Cell, int] = {}
    pooled: dict[str, int] = {}
    for stratum, share in per_stratum.items():
        members = {b: counts.get((b, stratum), 0) for b in order}
        present = [b for b in order if members[b] > 0]
        if share < len(present):
            pooled[stratum] = share
            continue
        for bucket, n in split(share, members, members, order).items():
            cells[(bucket, stratum)] = n
    return Allocation(counts=dict(counts), cells=cells, pooled=pooled)

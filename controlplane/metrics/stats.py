"""Pure statistics shared by metrics, alerts and the rollout rules: the one Wilson interval."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054


def wilson(num: float, den: float, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of num/den; None when den is 0. Counts may be fractional
    (a weighted estimate times its effective sample size)."""
    if den <= 0:
        return None
    p = num / den
    z2 = z * z
    centre = p + z2 / (2 * den)
    spread = z * math.sqrt(p * (1 - p) / den + z2 / (4 * den * den))
    scale = 1 + z2 / den
    low = (centre - spread) / scale
    high = (centre + spread) / scale
    # Clamp float noise at the ends (0/n and n/n).
    return max(0.0, min(low, p)), min(1.0, max(high, p))


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (PostgreSQL percentile_cont, pandas' default)."""
    n = len(sorted_values)
    if n == 0:
        return None
    position = q * (n - 1)
    lo = math.floor(position)
    hi = min(lo + 1, n - 1)
    fraction = position - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * fraction)


def median(values: Sequence[float]) -> float | None:
    return percentile(sorted(values), 0.5)

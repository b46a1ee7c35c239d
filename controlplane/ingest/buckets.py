"""Length buckets: boundaries on `input_tokens` named `0-127`, `128-511`, …, `2048+`; and
the sticky bucket as ingest computes it, in C."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import mmh3

DEFAULT_BOUNDARIES = (128, 512, 2048)


def bucket_labels(boundaries: Sequence[int]) -> list[str]:
    """Every bucket's name, in order: `[128, 512]` → `["0-127", "128-511", "512+"]`."""
    edges = [0, *boundaries]
    labels = [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:], strict=False)]
    labels.append(f"{edges[-1]}+")
    return labels


def length_bucket(input_tokens: int, boundaries: Sequence[int]) -> str:
    """The bucket holding `input_tokens`; boundaries are the first token count of each next bucket."""
    index = bisect_right(boundaries, input_tokens)
    lo = 0 if index == 0 else boundaries[index - 1]
    if index == len(boundaries):
        return f"{lo}+"
    return f"{lo}-{boundaries[index] - 1}"


def sticky_bucket(task: str, key: str | None) -> int | None:
    """`controlplane.client.sticky.sticky_bucket` by mmh3, a C MurmurHash3: the same bucket
    (both are held to the client's vectors file), 20-50 times faster than the client's pure
    Python, which routers keep so that they need no C extension."""
    if not key:
        return None
    # Always bytes: mmh3 5.3 crashes the process on a str holding a lone surrogate, where
    # encoding first raises UnicodeEncodeError, as the client's function does.
    return mmh3.hash(f"{task}:{key}".encode(), 0, False) % 100

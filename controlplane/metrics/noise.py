"""The cloud's noisy fields: which fields or checks the cloud itself changes too often.

Repeat pairs of a `json_fields` or `text_conservation` task count, per field (per check),
how many pairs differed on it (`repeat_diffs` of a window row). A field the cloud changes
on more than `grading.noisy_field_rate` of its repeat pairs is noisy: a difference there
says little about the edge. Pure: grading and review read it with their own figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def noisy_fields(
    repeat_diffs: Mapping[str, int] | None, repeat_pairs: int, rate: float
) -> list[dict[str, Any]]:
    """Each field or check whose share of repeat pairs exceeds `rate`, as
    {"name", "count", "pairs", "rate"}, the noisiest first (then by name). Nothing when
    there are no repeat pairs or no counts."""
    if repeat_pairs <= 0 or not repeat_diffs:
        return []
    found = [
        {"name": name, "count": count, "pairs": repeat_pairs, "rate": count / repeat_pairs}
        for name, count in repeat_diffs.items()
        if count / repeat_pairs > rate
    ]
    return sorted(found, key=lambda item: (-item["rate"], item["name"]))

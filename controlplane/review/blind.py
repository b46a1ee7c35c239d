"""What a reviewer sees of an item (pure): the two answers as A and B in the item's hidden
order, the comparator's diff rewritten in A/B terms, and nothing else — no side names, no
model names, no sampling reason, no result id or router decision.

A single-answer item (the edge errored or broke the schema) shows the cloud answer as A
and asks whether it is right; B is null and so is the diff (it describes the edge answer,
which is not shown).

Diffs are rewritten by their known shapes (controlplane.compare.comparators): the `edge`
and `cloud` keys of each compared value become `a`/`b`, text_conservation's `missing`
(in the reference, not the edge) and `extra` (in the edge, not the reference) become
`only_in_a`/`only_in_b`, and the length ratio (edge over cloud, with its asymmetric
bounds) is left out because it tells the sides apart. A key the rewrite does not know is
dropped rather than shown: a new comparator shape must be added here before reviewers
see it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

# The comparators' per-check entries whose values compare the two sides.
_SIDE_CHECKS = ("label", "too_long", "sentences", "length_ratio", "negations", "numbers", "spans")
# Keys of a per-check entry that may be shown once the sides are renamed.
_NEUTRAL_KEYS = ("max_chars",)


class BlindItem(Protocol):
    id: int
    kind: str
    a_is_edge: bool
    input: Any
    edge_output: Any
    cloud_output: Any
    diff: Any
    lease_expires_at: datetime | None


def view(item: BlindItem, task: str) -> dict[str, Any]:
    """The blind view of a claimed item."""
    if item.kind == "single":
        a, b, diff = item.cloud_output, None, None
    elif item.a_is_edge:
        a, b, diff = item.edge_output, item.cloud_output, blind_diff(item.diff, True)
    else:
        a, b, diff = item.cloud_output, item.edge_output, blind_diff(item.diff, False)
    lease = item.lease_expires_at
    return {
        "id": item.id,
        "task": task,
        "kind": item.kind,
        "input": item.input,
        "a": a,
        "b": b,
        "diff": diff,
        "lease_expires_at": lease.isoformat().replace("+00:00", "Z") if lease else None,
    }


def blind_diff(diff: Any, a_is_edge: bool) -> Any:
    """A comparator's diff with the sides named A and B."""
    if not isinstance(diff, dict):
        return None
    names = {"edge": "a" if a_is_edge else "b", "cloud": "b" if a_is_edge else "a"}
    out: dict[str, Any] = {}
    for key, value in diff.items():
        if key in names:
            # The side whose output broke the schema, and why.
            out[names[key]] = value
        elif key in _SIDE_CHECKS:
            out[key] = _sides(value, names)
        elif key == "fields" and isinstance(value, dict):
            out[key] = {str(field): _sides(pair, names) for field, pair in value.items()}
        elif key in ("failed", "paths") and isinstance(value, list):
            # Check names and JSON paths of the outputs: neither says which side is which.
            out[key] = value
    # The output order stays hidden only if the keys do not give it away either.
    return {k: out[k] for k in sorted(out)}


def _sides(value: Any, names: dict[str, str]) -> Any:
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    for key, inner in value.items():
        if key in names:
            out[names[key]] = inner
        elif key == "missing":
            # In the cloud (reference) answer and not in the edge's.
            out[f"only_in_{names['cloud']}"] = inner
        elif key == "extra":
            out[f"only_in_{names['edge']}"] = inner
        elif key in _NEUTRAL_KEYS:
            out[key] = inner
    return {k: out[k] for k in sorted(out)}

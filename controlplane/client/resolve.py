"""`resolve`: which answer a router uses when it ran both sides on the serving path
(README.md, "With the Python client").

Equal: the edge's; different: the cloud's, marked as a conflict; irreversible: either way
`need_confirm`, since a refund or a permission grant is never executed from a model's
answer directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .routing import Side


@dataclass(frozen=True)
class Resolution:
    # The answer to use.
    output: Any
    # Whose answer it is.
    served: Side
    # The two answers differed (the cloud's was chosen).
    conflict: bool
    # An irreversible action: confirm it in deterministic code before executing it.
    need_confirm: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(
    edge_output: Any,
    cloud_output: Any,
    *,
    same: Callable[[Any, Any], bool] | None = None,
    irreversible: bool = False,
) -> Resolution:
    """The edge's answer when the two agree, else the cloud's; `same` decides agreement
    (it may normalise case or order); a `same` that raises counts as disagreement."""
    try:
        agree = bool(same(edge_output, cloud_output) if same else edge_output == cloud_output)
    except Exception:
        agree = False
    if agree:
        return Resolution(edge_output, "edge", conflict=False, need_confirm=irreversible)
    return Resolution(cloud_output, "cloud", conflict=True, need_confirm=irreversible)

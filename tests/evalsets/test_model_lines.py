"""Which run may lift a block (controlplane.evalsets.gate): the blocked model itself, or a
later version of its line — the same name before the last "@", a higher integer after it."""

from __future__ import annotations

import pytest

from controlplane.evalsets.gate import may_lift, succeeds, version_of


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("small-int4@3", ("small-int4", 3)),
        ("a@b@12", ("a@b", 12)),
        ("small@04", ("small", 4)),
        ("small", None),
        ("@3", None),
        ("small@", None),
        ("small@3b", None),
        # Digits str.isdigit accepts that are no ASCII version number.
        ("small@²", None),
        ("small@٣", None),
        ("small@-1", None),
    ],
)
def test_a_version_is_the_ascii_integer_after_the_last_at(
    model: str, expected: tuple[str, int] | None
) -> None:
    assert version_of(model) == expected


def test_only_a_higher_version_of_the_same_line_succeeds() -> None:
    assert succeeds("small-int4@4", "small-int4@3")
    assert succeeds("small-int4@10", "small-int4@9")  # numbers, not strings
    assert not succeeds("small-int4@3", "small-int4@3")
    assert not succeeds("small-int4@2", "small-int4@3")
    assert not succeeds("other@9", "small-int4@3")
    assert not succeeds("small-int4@4", "small-int4")  # an unversioned model has no line
    assert may_lift("small-int4@3", "small-int4@3")
    assert may_lift("small-int4@4", "small-int4@3")
    assert not may_lift("small-int5@4", "small-int4@3")

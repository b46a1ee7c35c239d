"""windows.placed and boundary_after, the pure side of a changed window length: for any
windows already made (sorted, not overlapping, of any lengths) and any aligned span of the
current length, the windows placed cover the span, and each new one (ending at the next
boundary, or where an existing window begins, as compute_window ends it) overlaps none."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from controlplane.metrics.windows import EPOCH, boundary_after, placed, window_start

T = EPOCH + timedelta(days=20_000)


@st.composite
def made(draw: st.DrawFn) -> list[tuple[datetime, datetime]]:
    """Windows made with lengths that changed over time: sorted, not overlapping."""
    at = T + timedelta(seconds=draw(st.integers(0, 600)))
    out = []
    for _ in range(draw(st.integers(0, 8))):
        at += timedelta(seconds=draw(st.integers(0, 200)))  # a gap, or none
        length = draw(st.sampled_from([10, 30, 60, 90, 120, 7]))
        out.append((at, at + timedelta(seconds=length)))
        at += timedelta(seconds=length)
    return out


@given(made(), st.sampled_from([10, 30, 60, 90, 120, 300]), st.integers(0, 2000))
def test_placed_windows_cover_the_span_and_new_ones_overlap_nothing(
    existing: list[tuple[datetime, datetime]], seconds: int, offset: int
) -> None:
    start = window_start(T + timedelta(seconds=offset), seconds)
    end = start + timedelta(seconds=seconds)
    spans = dict(existing)
    starts = placed(start, seconds, existing)
    pieces = []
    for s in starts:
        if s in spans:
            pieces.append((s, spans[s]))
            continue
        holding = [w for w in existing if w[0] <= s < w[1]]
        assert not holding, (s, holding)  # a new window never starts inside one
        following = [w[0] for w in existing if w[0] > s]
        e = min([boundary_after(s, seconds), *following])
        assert s < e
        assert not any(w[0] < e and w[1] > s for w in existing), (s, e)
        pieces.append((s, e))
    # Together they cover the span, each piece touching it.
    covered = start
    for s, e in sorted(pieces):
        assert s < end and e > start
        assert s <= covered, (covered, sorted(pieces))
        covered = max(covered, e)
    assert covered >= end

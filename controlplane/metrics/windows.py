"""Window time arithmetic: event-time windows aligned to the epoch. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_start(ts: datetime, seconds: int) -> datetime:
    """The start of the window of `seconds` that holds `ts`."""
    elapsed = (ts - EPOCH) // timedelta(seconds=1)
    return EPOCH + timedelta(seconds=elapsed - elapsed % seconds)


def from_index(index: int, seconds: int) -> datetime:
    """The start of window number `index` (epoch seconds // `seconds`)."""
    return EPOCH + timedelta(seconds=index * seconds)


def closes_at(start: datetime, seconds: int, lateness: int) -> datetime:
    """When the clock closes the window: its end plus the allowed lateness."""
    return start + timedelta(seconds=seconds + lateness)


def recent_starts(
    now: datetime, seconds: int, count: int, not_before: datetime | None = None
) -> list[datetime]:
    """The starts of the window holding `now` and of the `count` windows before it, oldest first."""
    current = window_start(now, seconds)
    starts = [current - timedelta(seconds=seconds * k) for k in range(count, -1, -1)]
    if not_before is not None:
        first = window_start(not_before, seconds)
        starts = [s for s in starts if s >= first]
    return starts


def span_since(
    now: datetime,
    span_seconds: int,
    version_started: datetime | None,
    seconds: int,
    shifted_at: datetime | None = None,
) -> datetime:
    """Where a span of `span_seconds` up to `now` starts when it reads only the windows of
    the current config version (made at `version_started`): the later of the start of the
    window that holds now − span (a window straddling it is read whole, and the span is
    that much longer: cut, a span as long as its windows read the last few minutes as a
    day) and the start of the window the version was made in (that window is computed with
    it, and a young task's first traffic is in it); and, after an input shift at
    `shifted_at`, no earlier than it (only traffic since the shift grades the task)."""
    since = window_start(now - timedelta(seconds=span_seconds), seconds)
    if version_started is not None and version_started > since:
        since = window_start(min(version_started, now), seconds)
    if shifted_at is not None and shifted_at > since:
        since = min(shifted_at, now)
    return since


def boundary_after(start: datetime, seconds: int) -> datetime:
    """The first window boundary of `seconds` after `start`: where a window that starts at
    `start` ends (start + seconds when `start` is itself a boundary)."""
    return window_start(start, seconds) + timedelta(seconds=seconds)


def placed(
    start: datetime, seconds: int, existing: Sequence[tuple[datetime, datetime]]
) -> list[datetime]:
    """The starts of the windows that cover the span [start, start + seconds): each existing
    window (start, end) overlapping it, and, for each stretch of it no existing window
    covers, a new window starting where the stretch starts. Windows never overlap: a window
    keeps the span it was made with when the task's `window_seconds` changes, and a new one
    is cut short where an existing one begins. `existing`: sorted by start, not overlapping."""
    end = start + timedelta(seconds=seconds)
    starts = [s for s, e in existing if s < end and e > start]
    at = start
    for s, e in existing:
        if e <= at or s >= end:
            continue
        if s > at:
            starts.append(at)
        at = max(at, e)
    if at < end:
        starts.append(at)
    return sorted(set(starts))


def span_for(
    at: datetime, seconds: int, existing: Sequence[tuple[datetime, datetime]]
) -> tuple[datetime, datetime]:
    """The window a time falls in: the existing window (start, end) holding it, else a new
    one of `seconds` on its boundaries, cut where an existing window ends before it or
    begins after it (the windows `placed` makes). `existing`: sorted, not overlapping."""
    for start, end in existing:
        if start <= at < end:
            return start, end
    start = max([window_start(at, seconds), *(e for _, e in existing if e <= at)])
    end = min([boundary_after(start, seconds), *(s for s, _ in existing if s > at)])
    return start, end


def of_length(start: datetime, end: datetime, seconds: int) -> bool:
    """Whether a window is one of `seconds`, on its boundaries: what the rules number by
    start // seconds (a window made before the length changed is not)."""
    return of_length_epoch(int(start.timestamp()), int(end.timestamp()), seconds)


def of_length_epoch(start: int, end: int, seconds: int) -> bool:
    """of_length, the times as whole seconds since the epoch."""
    return end - start == seconds and start % seconds == 0

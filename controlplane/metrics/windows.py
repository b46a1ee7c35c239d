"""Window time arithmetic: event-time windows aligned to the epoch. Pure."""

from __future__ import annotations

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
    now: datetime, span_seconds: int, version_started: datetime | None, seconds: int
) -> datetime:
    """Where a span of `span_seconds` up to `now` starts when it reads only the windows of
    the current config version (made at `version_started`): the later of now − span and
    the start of the window the version was made in (that window is computed with it, and
    a young task's first traffic is in it)."""
    since = now - timedelta(seconds=span_seconds)
    if version_started is not None and version_started > since:
        since = window_start(min(version_started, now), seconds)
    return since

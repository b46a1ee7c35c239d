"""`Retry-After` as the client reads it: seconds, or an HTTP-date (a proxy's, the API's
OFREP routes'), within the caller's limit."""

from __future__ import annotations

from email.utils import formatdate

from controlplane.client.retryafter import retry_after_seconds

NOW = 1_800_000_000.0


def read(value: str, limit: float = 3600) -> float | None:
    return retry_after_seconds(value, limit=limit, now=lambda: NOW)


def test_seconds() -> None:
    assert read("7") == 7.0
    assert read(" 0 ") == 0.0
    assert read("3599.5") == 3599.5


def test_an_http_date_is_the_seconds_until_it() -> None:
    assert read(formatdate(NOW + 120, usegmt=True)) == 120.0
    assert read(formatdate(NOW - 30, usegmt=True)) == 0.0  # past: at once


def test_what_is_neither_or_out_of_bounds_is_not_read() -> None:
    for value in ("", "soon", "-1", "nan", "inf", "1e400", "3600", "Tue, 99 Foo 2026"):
        assert read(value) is None, value
    assert read(formatdate(NOW + 7200, usegmt=True)) is None  # past the limit
    assert read("Sun, 06 Dec 2026 18:00:00") is None  # no zone: not an HTTP-date

"""A result's `ts` as the document gives it and as ingest reads it: the same strings. The
document once said `format: date-time` (seconds and an offset required), while ingest
also reads times without them; it now gives ingest's pattern."""

from __future__ import annotations

import calendar
import re

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.api import create_app
from controlplane.ingest import validation
from controlplane.settings import Settings
from controlplane.timeutil import TS_PATTERN
from tests.conftest import make_result


def _read(ts: str) -> list[str]:
    """The rejections of a result with this `ts`, alone and in a batch (both decoders)."""
    errors = []
    for body in (make_result(ts=ts), {"results": [make_result(ts=ts)]}):
        _, bad = validation.validate_body(orjson.dumps(body), 1000)
        errors += [b.error for b in bad]
    return errors


def test_the_document_gives_the_pattern_ingest_reads() -> None:
    document = create_app(Settings(database_url="sqlite://")).openapi()
    ts = document["components"]["schemas"]["ResultIn"]["properties"]["ts"]
    assert {"type": "null"} in ts["anyOf"]
    [text] = [s for s in ts["anyOf"] if s.get("type") == "string"]
    assert text["pattern"] == TS_PATTERN and "format" not in text


def _common_year_leap_day(ts: str) -> bool:
    return ts[5:10] == "02-29" and not calendar.isleap(int(ts[:4]))


@settings(max_examples=300, deadline=None)
@given(st.from_regex(TS_PATTERN, fullmatch=True))
def test_every_time_the_pattern_allows_is_read(ts: str) -> None:
    errors = _read(ts)
    if _common_year_leap_day(ts):
        assert errors and all(e.startswith("ts:") for e in errors), (ts, errors)
    else:
        assert errors == [], (ts, errors)


def test_what_the_pattern_leaves_out_is_refused() -> None:
    pattern = re.compile(TS_PATTERN)
    for ts in ("2026-12-31T23:59:60Z", "0000-01-01T00:00Z", "2026-11-30T24:00Z", "2026-11-30"):
        assert pattern.fullmatch(ts) is None, ts
        errors = _read(ts)
        assert len(errors) == 2 and all(e.startswith("ts:") for e in errors), (ts, errors)

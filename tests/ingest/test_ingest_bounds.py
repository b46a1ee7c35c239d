"""Bounds on what ingest stores: `ts` within [received_at - SHADOWPLANE_MAX_BACKFILL,
received_at + 5 minutes], and finite numbers only. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.models import Result
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, Api, make_api, make_result


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    yield from make_api(db_url, max_backfill=timedelta(days=7))


def at(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def at_offset(*, hours: float, offset_hours: float) -> str:
    """A time written with a UTC offset other than zero."""
    zone = timezone(timedelta(hours=offset_hours))
    return (datetime.now(UTC) + timedelta(hours=hours)).astimezone(zone).isoformat()


def post_raw(api: Api, items: list[bytes]) -> dict[str, Any]:
    body = b'{"results": [' + b",".join(items) + b"]}"
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    assert response.status_code == 200, response.text
    return dict(response.json())


def view(api: Api, task: str, request_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/results/{task}/{request_id}", headers=api.headers("read"))
    return dict(response.json())


def stored_ids(api: Api) -> set[str]:
    with api.engine.connect() as conn:
        return set(conn.scalars(select(Result.request_id)))


def test_ts_bounds(api: Api) -> None:
    naive = (datetime.now(UTC) - timedelta(hours=1)).replace(tzinfo=None).isoformat()
    results = [
        make_result(request_id="oldest-kept", ts=at(days=-7, minutes=1)),
        make_result(request_id="too-old", ts=at(days=-7, minutes=-1)),
        make_result(request_id="ten-days-old", ts=at(days=-10)),
        make_result(request_id="latest-kept", ts=at(minutes=4)),
        make_result(request_id="too-new", ts=at(minutes=6)),
        make_result(request_id="an-hour-ahead", ts=at(hours=1)),
        make_result(request_id="naive", ts=naive),
        make_result(request_id="offset", ts=at_offset(hours=-2, offset_hours=-9)),
        make_result(request_id="no-ts", ts=None),
        make_result(request_id="year-1", ts="0001-01-01T00:00+01:00"),
        make_result(request_id="year-9999", ts="9999-12-31T23:59-01:00"),
    ]
    report = api.post_results({"results": results}).json()
    errors = {r["request_id"]: r["error"] for r in report["rejected"]}
    assert set(errors) == {
        "too-old",
        "ten-days-old",
        "too-new",
        "an-hour-ahead",
        "year-1",
        "year-9999",
    }
    for rid in ("too-old", "ten-days-old"):
        assert errors[rid].startswith("ts: ") and "is before the bound" in errors[rid]
        assert "SHADOWPLANE_MAX_BACKFILL = 7 days" in errors[rid]
    for rid in ("too-new", "an-hour-ahead"):
        assert errors[rid].startswith("ts: ") and "is after the bound" in errors[rid]
        assert "at most 5 minutes after the time it was received" in errors[rid]
    assert errors["year-1"] == errors["year-9999"] == "ts: out of range (no such time in UTC)"
    assert report["accepted"] == 5
    assert stored_ids(api) == {"oldest-kept", "latest-kept", "naive", "offset", "no-ts"}
    view = api.client.get("/v1/results/ticket_classify/naive", headers=api.headers("read")).json()
    assert datetime.fromisoformat(view["ts"]) == datetime.fromisoformat(naive).replace(tzinfo=UTC)
    no_ts = api.client.get("/v1/results/ticket_classify/no-ts", headers=api.headers("read")).json()
    assert no_ts["ts"] == no_ts["received_at"]


def test_the_backfill_bound_is_the_setting(db_url: str) -> None:
    for api in make_api(db_url, max_backfill=timedelta(hours=1)):
        report = api.post_results(
            {
                "results": [
                    make_result(request_id="half-hour", ts=at(minutes=-30)),
                    make_result(request_id="two-hours", ts=at(hours=-2)),
                ]
            }
        ).json()
        assert report["accepted"] == 1
        assert [r["request_id"] for r in report["rejected"]] == ["two-hours"]
        assert "SHADOWPLANE_MAX_BACKFILL = 1:00:00" in report["rejected"][0]["error"]


SIDE_FLOATS = {
    "edge": ("latency_ms", "ttfb_ms", "cost", "confidence"),
    "cloud": ("latency_ms", "ttfb_ms", "cost"),
}
NOT_FINITE = ["Infinity", "-Infinity", "NaN", "1e999", "-1e999"]


def with_raw(request_id: str, side: str, field: str, literal: str) -> bytes:
    result = make_result(request_id=request_id, ts=at(minutes=-1))
    result[side] = {**result[side], field: "@RAW@"}
    return orjson.dumps(result).replace(b'"@RAW@"', literal.encode())


# Negative ones were refused before (they are below 0): Infinity, NaN and 1e999 were not.
@pytest.mark.parametrize("literal", ["Infinity", "NaN", "1e999"])
def test_every_float_field_must_be_finite(api: Api, literal: str) -> None:
    items = [orjson.dumps(make_result(request_id="good-0", ts=at(minutes=-1)))]
    expected = {}
    for side, fields in SIDE_FLOATS.items():
        for field in fields:
            rid = f"{side}-{field}"
            items.append(with_raw(rid, side, field, literal))
            expected[rid] = f"{side}.{field}: "
    report = post_raw(api, items)
    errors = {r["request_id"]: r["error"] for r in report["rejected"]}
    assert set(errors) == set(expected)
    for rid, prefix in expected.items():
        assert errors[rid].startswith(f"{prefix}Input should be a finite number"), errors[rid]
    assert report["accepted"] == 1
    assert stored_ids(api) == {"good-0"}


@pytest.mark.parametrize("literal", NOT_FINITE)
def test_outputs_and_inputs_must_hold_finite_numbers(api: Api, literal: str) -> None:
    def item(request_id: str, **overrides: Any) -> bytes:
        text = orjson.dumps(make_result(request_id=request_id, ts=at(minutes=-1), **overrides))
        return text.replace(b'"@RAW@"', literal.encode())

    report = post_raw(
        api,
        [
            item("edge-output", edge={"output": "@RAW@"}),
            item("cloud-output", cloud={"output": {"score": ["@RAW@"]}}),
            item("input-text", input={"text": "@RAW@"}),
            item("input-field", input={"text": "hi", "extra": {"x": "@RAW@"}}),
            item("fine", edge={"output": {"score": 1e300}}, input={"text": "hi", "n": -2.5}),
        ],
    )
    assert {r["request_id"]: r["error"] for r in report["rejected"]} == {
        "edge-output": "edge.output: holds a number that is not finite (or has more than 4300 digits)",
        "cloud-output": "cloud.output: holds a number that is not finite (or has more than 4300 digits)",
        "input-text": "input: holds a number that is not finite (or has more than 4300 digits)",
        "input-field": "input: holds a number that is not finite (or has more than 4300 digits)",
    }
    assert stored_ids(api) == {"fine"}


def test_compare_max_chars_is_the_setting(db_url: str) -> None:
    for api in make_api(db_url, compare_max_chars=10):
        with session_scope(api.engine) as session:
            apply_config(
                session,
                {**TICKET_TASK, "task": "redacted_task", "payload_policy": "redacted"},
                actor="test",
            )
        long_label = "exchange, or a refund to alice@example.com"
        report = api.post_results(
            {
                "results": [
                    make_result(request_id="short", ts=at(minutes=-1)),
                    make_result(
                        request_id="long",
                        task="redacted_task",
                        ts=at(minutes=-1),
                        edge={"output": long_label},
                    ),
                ]
            }
        ).json()
        assert report["accepted"] == 2
        assert view(api, "ticket_classify", "short")["comparison"]["outcome"] == "agree"
        long = view(api, "redacted_task", "long")
        assert long["comparison"]["outcome"] is None
        assert long["comparison"]["diff"]["too_long"]["max_chars"] == 10
        # Under redacted only the first max_chars are masked and kept.
        assert long["payload"]["edge_output"].startswith(long_label[:8])
        assert "alice@example.com" not in str(long)

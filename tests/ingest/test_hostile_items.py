"""One bad item is rejected alone, naming its field, and the good items of its batch are
stored; a body too deep or unreadable is a 422, never a 500. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import select

from controlplane.compare.comparators import REGISTRY, Comparator, Comparison, compare_label
from controlplane.db import json_text, session_scope
from controlplane.ingest import scoring, service, validation
from controlplane.models import Result
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, Api, make_api, make_result

DEEP_JSON_TEXT = "[" * 5000 + "]" * 5000  # under compare_max_chars, far deeper than json reads


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    yield from make_api(db_url, max_backfill=timedelta(days=7))


def now_iso(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def good(i: int) -> bytes:
    if i == 2:
        # Deep JSON text as a json_fields output: the comparator bounds the depth it reads,
        # so this one is stored and judged invalid, not rejected.
        return orjson.dumps(
            make_result(
                request_id=f"good-{i}",
                task="invoice_extract",
                ts=now_iso(minutes=-1),
                edge={"output": DEEP_JSON_TEXT},
                cloud={"output": {"amount": 1}},
            )
        )
    if i % 2:
        return orjson.dumps(make_result(request_id=f"good-{i}", ts=now_iso(minutes=-1)))
    return orjson.dumps(
        make_result(
            request_id=f"good-{i}",
            task="invoice_extract",
            ts=now_iso(minutes=-1),
            edge={"output": '{"amount": 12.5, "currency": "EUR"}'},
            cloud={"output": {"amount": 12.5, "currency": "EUR"}},
        )
    )


def bad(request_id: str, replace: dict[str, Any] | None = None, **overrides: Any) -> bytes:
    """A result as raw JSON; `replace` swaps a JSON-encoded placeholder for raw text, which
    is how the literals Python's json writes differently (Infinity, 1e999, \\ud800) go in."""
    result = make_result(request_id=request_id, **{"ts": now_iso(minutes=-1), **overrides})
    text = orjson.dumps(result)
    for placeholder, raw in (replace or {}).items():
        quoted = placeholder.startswith('"')  # the placeholder with its quotes: any value
        spelt = placeholder.encode() if quoted else orjson.dumps(placeholder)
        assert spelt in text
        text = text.replace(spelt, raw.encode())
    return text


def fast_path_bad() -> list[tuple[bytes, str]]:
    """(raw item, what its error must say); each passes the fast path's validation."""
    return [
        (bad("far-future", ts="9999-12-31T23:59-01:00"), "ts: out of range"),
        (bad("ten-days-old", ts=now_iso(days=-10)), "SHADOWPLANE_MAX_BACKFILL"),
        (bad("an-hour-ahead", ts=now_iso(hours=1)), "at most 5 minutes after"),
        (
            bad("huge-output", edge={"output": "@INF@"}, replace={"@INF@": "1e999"}),
            "edge.output: holds a number that is not finite",
        ),
        (
            bad("nan-input", input={"text": "hi", "score": "@NAN@"}, replace={"@NAN@": "NaN"}),
            "input: holds a number that is not finite",
        ),
    ]


def careful_path_bad() -> list[tuple[bytes, str]]:
    """Items the fast path's parser refuses: they go the careful way."""
    return [
        (
            bad("surrogate-output", cloud={"output": "@S@"}, replace={"@S@": '"ok \\ud800 ok"'}),
            "cloud.output: holds a lone surrogate (invalid Unicode)",
        ),
        (
            bad("surrogate-session", session_id="@S@", replace={"@S@": '"s-\\udc00"'}),
            "session_id: holds a lone surrogate (invalid Unicode)",
        ),
        (
            bad(
                "infinite-cost",
                edge={"output": "refund", "cost": "@C@"},
                replace={"@C@": "Infinity"},
            ),
            "edge.cost: Input should be a finite number",
        ),
        (
            bad(
                "huge-latency",
                cloud={"output": "refund", "latency_ms": "@L@"},
                replace={"@L@": "1e999"},
            ),
            "cloud.latency_ms: Input should be a finite number",
        ),
        (
            bad(
                "nan-confidence",
                edge={"output": "refund", "confidence": "@N@"},
                replace={"@N@": "NaN"},
            ),
            "edge.confidence: Input should be a finite number",
        ),
        # More digits than Python reads (4,300): the whole body was a 422 before.
        (
            bad("huge-tokens", input_tokens="@T@", replace={'"@T@"': "1" + "0" * 5000}),
            "input_tokens: Input should be a finite number",
        ),
        (
            bad("huge-in-input", input={"text": "hi", "n": "@T@"}, replace={'"@T@"': "9" * 5000}),
            "input: holds a number that is not finite (or has more than 4300 digits)",
        ),
    ]


def batch_with_goods_between(bads: list[tuple[bytes, str]]) -> tuple[bytes, list[int], int]:
    """Three good items before, between and after the bad ones (at least 20 rows: the COPY
    path on PostgreSQL). The body, the bad items' indexes, and how many good ones."""
    parts: list[bytes] = []
    bad_indexes = []
    n_good = 0
    for item, _ in [*bads, (b"", "")]:
        for _ in range(3):
            parts.append(good(n_good))
            n_good += 1
        if item:
            bad_indexes.append(len(parts))
            parts.append(item)
    return b'{"results": [' + b",".join(parts) + b"]}", bad_indexes, n_good


@pytest.mark.parametrize("path", ["fast", "careful"])
def test_each_bad_item_is_rejected_alone_and_the_good_ones_are_stored(api: Api, path: str) -> None:
    bads = fast_path_bad() if path == "fast" else fast_path_bad() + careful_path_bad()
    body, bad_indexes, n_good = batch_with_goods_between(bads)
    if path == "fast":  # every item is well typed: the batch is validated straight from bytes
        assert len(validation._BATCH.validate_json(body)["results"]) == n_good + len(bads)
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["accepted"] == n_good and report["duplicates"] == 0, report
    assert [r["index"] for r in report["rejected"]] == bad_indexes
    for rejected, (item, expected) in zip(report["rejected"], bads, strict=True):
        assert expected in rejected["error"], (rejected, expected)
        sent_id = item.split(b'"request_id":"')[1].split(b'"')[0].decode()
        assert rejected["request_id"] == sent_id
    with api.engine.connect() as conn:
        stored = set(conn.scalars(select(Result.request_id)))
    assert stored == {f"good-{i}" for i in range(n_good)}
    view = api.client.get("/v1/results/invoice_extract/good-0", headers=api.headers("read"))
    assert view.json()["comparison"]["outcome"] == "agree"
    view = api.client.get("/v1/results/invoice_extract/good-2", headers=api.headers("read"))
    assert view.json()["comparison"]["outcome"] == "invalid"


def failing_label(spec: Any, edge: Any, cloud: Any) -> Comparison:
    if "boom" in (edge, cloud):
        raise RecursionError("maximum recursion depth exceeded")
    return compare_label.compare(spec, edge, cloud)


def test_a_comparator_failure_rejects_its_item_naming_the_output(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(REGISTRY, "label", Comparator("label", 1, failing_label))
    body = b",".join(
        [
            good(1),
            bad("edge-boom", edge={"output": "boom"}),
            good(3),
            bad("cloud-boom", cloud={"output": "boom"}),
            good(5),
        ]
    )
    response = api.client.post(
        "/v1/results", content=b'{"results": [' + body + b"]}", headers=api.headers("ingest")
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "accepted": 3,
        "duplicates": 0,
        "rejected": [
            {"index": 1, "request_id": "edge-boom", "error": "edge.output: nested too deeply"},
            {"index": 3, "request_id": "cloud-boom", "error": "cloud.output: nested too deeply"},
        ],
    }


def test_a_masking_failure_rejects_its_item_naming_the_field(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = scoring.redact_payload

    def failing(payload: dict[str, Any], *, max_chars: int, masker: Any = None) -> dict[str, Any]:
        if payload.get("cloud_output") == "boom":
            raise RecursionError("maximum recursion depth exceeded")
        return real(payload, max_chars=max_chars, masker=masker)

    monkeypatch.setattr(scoring, "redact_payload", failing)
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(session, {**TICKET_TASK, "payload_policy": "redacted"}, actor="test")
        body = b",".join([bad("cloud-boom", cloud={"output": "boom"}), good(1)])
        response = api.client.post(
            "/v1/results", content=b'{"results": [' + body + b"]}", headers=api.headers("ingest")
        )
        assert response.json()["rejected"] == [
            {"index": 0, "request_id": "cloud-boom", "error": "cloud.output: nested too deeply"}
        ]
        assert response.json()["accepted"] == 1


@pytest.mark.parametrize(
    ("column", "field"),
    [("input", "input"), ("edge_output", "edge.output"), ("cloud_output", "cloud.output")],
)
def test_a_value_that_cannot_be_stored_is_refused_while_serialising_its_item(
    column: str, field: str
) -> None:
    payload: dict[str, Any] = {c: None for c in scoring.PAYLOAD_FIELDS}
    payload[column] = {"text": "ok \ud800"} if column == "input" else ["ok", "\udc00"]
    with pytest.raises(scoring.ItemError) as raised:
        service.stored_form(scoring.Scored({"input_segments": [1, 2]}, payload))
    assert str(raised.value) == f"{field}: holds a lone surrogate (invalid Unicode)"
    # A good one goes in as the text that is stored, written as it is.
    scored = service.stored_form(
        scoring.Scored({"input_segments": [1, 2]}, {**payload, column: {"a": "\u00e9"}})
    )
    assert json_text(scored.payload[column]) == '{"a":"\u00e9"}'  # type: ignore[index]
    assert json_text(scored.row["input_segments"]) == "[1,2]"


def test_a_lone_surrogate_in_the_request_id_is_not_answered_back(api: Api) -> None:
    body = b'{"results": [' + bad("@S@", replace={"@S@": '"r-\\ud800"'}) + b"," + good(1) + b"]}"
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    assert response.status_code == 200, response.text
    assert response.json() == {
        "accepted": 1,
        "duplicates": 0,
        "rejected": [
            {
                "index": 0,
                "request_id": None,
                "error": "request_id: holds a lone surrogate (invalid Unicode)",
            }
        ],
    }


def test_a_single_bad_result_is_answered_like_a_batch(api: Api) -> None:
    body = bad("alone", ts="9999-12-31T23:59-01:00")
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    assert response.status_code == 200, response.text
    assert response.json()["rejected"] == [
        {"index": 0, "request_id": "alone", "error": "ts: out of range (no such time in UTC)"}
    ]


def test_a_rejected_item_does_not_make_a_later_one_with_its_id_a_duplicate(api: Api) -> None:
    body = b'{"results": [' + bad("same", ts="9999-12-31T23:59-01:00") + b"," + bad("same") + b"]}"
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    report = response.json()
    assert (report["accepted"], report["duplicates"]) == (1, 0)
    assert [r["index"] for r in report["rejected"]] == [0]


DEEP = 100_000


@pytest.mark.parametrize(
    "body",
    [
        b'{"results": ' + b"[" * DEEP,
        b'{"results": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        b'{"a":' * DEEP,
        b'{"a":' * DEEP + b"1" + b"}" * DEEP,
        b'{"results": [' + b'{"a":' * DEEP,
        b'{"request_id": "r", "task": "ticket_classify", "edge": {"output": '
        + b"[" * DEEP
        + b"]" * DEEP
        + b"}}",
    ],
    ids=[
        "results-open",
        "results-closed",
        "object-open",
        "object-closed",
        "item-open",
        "output",
    ],
)
def test_a_body_too_deep_or_unreadable_is_422(api: Api, body: bytes) -> None:
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("body: ")

"""`skipped`: the sides a router did not run, and why (the Python client's shadow_compare
names a side it skipped because its threads were all busy, or its event loop shut down).
Stored with the result and read back; masked and dropped as the payload policy says, like
`degrade_reason`; a bad `skipped` rejects its item alone, naming the field. Before, the API
read past the field and kept nothing of it, and a batch holding one such result left
msgspec's path for pydantic's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from controlplane.ingest.scoring import IngestContext, score
from controlplane.ingest.validation import decode_batch, parse_result
from tests.conftest import Api, make_result
from tests.ingest.test_scoring import runtime

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
# As the client words it when all its threads beside are held (controlplane/client/shadow.py).
BUSY = "not run: all 32 threads beside are held"


def skipped_edge(**overrides: Any) -> dict[str, Any]:
    """A result as shadow_compare reports one whose edge was not run beside the cloud."""
    return make_result(
        edge=None, served="cloud", decision="cloud", skipped={"edge": BUSY}, **overrides
    )


@pytest.mark.parametrize(
    ("policy", "stored"),
    [
        ("full", {"edge": "not run: ann@example.com's router is busy"}),
        ("redacted", {"edge": "not run: <EMAIL_1>'s router is busy"}),
        ("none", {"edge": None}),
    ],
)
def test_each_policy_keeps_the_sides_and_the_reasons_it_allows(
    policy: str, stored: dict[str, Any]
) -> None:
    item = parse_result(
        make_result(
            edge=None,
            served="cloud",
            decision="cloud",
            skipped={"edge": "not run: ann@example.com's router is busy"},
        )
    )
    context = IngestContext(id_hash_key=b"k" * 32)
    row = score(item, runtime(payload_policy=policy), NOW, context).row
    assert row["skipped"] == stored


def test_no_side_named_is_stored_as_null() -> None:
    for given in ({}, None):
        row = score(parse_result(make_result(skipped=given)), runtime(), NOW).row
        assert row["skipped"] is None


def test_a_batch_of_client_results_stays_on_the_fast_decoder() -> None:
    body = orjson.dumps({"results": [skipped_edge(request_id=f"r-{i}") for i in range(3)]})
    decoded = decode_batch(body)
    assert decoded is not None and [r["skipped"] for r in decoded] == [{"edge": BUSY}] * 3


def test_stored_and_read_back(api: Api) -> None:
    answer = api.post_results(skipped_edge(request_id="sk-1")).json()
    assert answer["accepted"] == 1, answer
    stored = api.client.get("/v1/results/ticket_classify/sk-1", headers=api.headers("read"))
    assert stored.status_code == 200, stored.text
    assert stored.json()["skipped"] == {"edge": BUSY}
    assert stored.json()["edge"] is None and stored.json()["cloud"] is not None
    plain = api.post_results(make_result(request_id="sk-2")).json()
    assert plain["accepted"] == 1, plain
    read = api.client.get("/v1/results/ticket_classify/sk-2", headers=api.headers("read"))
    assert read.json()["skipped"] is None


BAD = [
    ({"zz": "x"}, "skipped.zz.[key]: Input should be 'edge', 'cloud' or 'cloud_repeat'"),
    ({"edge": 3}, "skipped.edge: Input should be a valid string"),
    ({"edge": "x" * 1001}, "skipped.edge: String should have at most 1000 characters"),
    ({"edge": "a\x00b"}, "skipped.edge: must not contain the NUL character"),
    (["edge"], "skipped: Input should be a valid dictionary"),
    ({"cloud": "busy"}, "(result): skipped names 'cloud', which the result carries"),
]


@pytest.mark.parametrize(("skipped", "error"), BAD, ids=[e.split(":")[0] for _, e in BAD])
def test_a_bad_skipped_rejects_its_item_alone_naming_the_field(
    api: Api, skipped: Any, error: str
) -> None:
    good = skipped_edge(request_id="ok-1")
    bad = skipped_edge(request_id="bad-1")
    bad["skipped"] = skipped
    answer = api.post_results({"results": [good, bad]}).json()
    assert answer["accepted"] == 1, answer
    [rejected] = answer["rejected"]
    assert rejected["index"] == 1 and rejected["request_id"] == "bad-1", rejected
    assert rejected["error"].startswith(error), rejected

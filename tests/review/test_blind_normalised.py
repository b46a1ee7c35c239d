"""One shown form for both answers: how a model formats an answer (a label's case and
spaces, a JSON object's key order, JSON sent as text) never tells the sides apart. Found on
main: A read "Refund" and "Complaint" (the edge's raw " Refund ") while the cloud's answers
were always lower-case."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.review.blind import shown_answer, stored_numbering, view
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
LABELS = ["refund", "exchange", "complaint"]


@pytest.fixture
def label_api(sqlite_url: str) -> Iterator[Api]:
    for api in make_api(sqlite_url, rate_review_per_second=1e6, rate_review_burst=10**6):
        with session_scope(api.engine) as s:
            apply_config(
                s,
                {
                    "task": "formatted",
                    "comparator": {"kind": "label", "labels": LABELS},
                    "window_seconds": 60,
                    "allowed_lateness_seconds": 30,
                    "keep_agreeing_rate": 1.0,
                    "review": {"quota_per_window": 1000},
                },
                actor="t",
            )
        yield api


def test_a_label_the_edge_formats_its_own_way_reads_as_the_cloud_s_would(label_api: Api) -> None:
    api = label_api
    # The edge title-cases and pads its label (as the simulator's small-int4@3 does).
    pairs = [(" Refund ", "complaint"), ("Complaint", "refund"), ("  EXCHANGE", "refund")] * 4
    post_all(
        api,
        [
            make_result(
                request_id=f"f{i}",
                task="formatted",
                ts=(T0 + timedelta(seconds=i)).isoformat(),
                input={"text": f"ticket {i}"},
                edge={"output": edge, "confidence": 0.9, "model": "small-int4@3"},
                cloud={"output": cloud, "model": "large@7"},
            )
            for i, (edge, cloud) in enumerate(pairs)
        ],
    )
    run_pass(api.engine, T0 + timedelta(seconds=200))
    headers = api.headers("review")
    seen = []
    while (answer := api.client.get("/v1/review/next", headers=headers)).status_code == 200:
        item = answer.json()["item"]
        seen.append(item)
        skip = api.client.post(
            f"/v1/review/{item['id']}/release", json={"skip": True}, headers=headers
        )
        assert skip.status_code == 200, skip.text
    assert len(seen) == len(pairs)
    for item in seen:
        # Both answers as the comparator reads them: lower-case, no surrounding spaces.
        assert {item["a"], item["b"]} <= set(LABELS), item
        assert item["diff"] == {"label": {"a": item["a"], "b": item["b"]}}


def test_each_comparator_s_answers_in_their_shown_form() -> None:
    assert shown_answer("label", "  Refund\n") == "refund"
    assert shown_answer("label", "Full  Refund") == "full refund"
    # Not a label (the comparator calls it invalid): shown as JSON, whatever the task.
    assert shown_answer("label", 3.0) == 3
    assert shown_answer("label", None) is None
    assert shown_answer("text_conservation", "  Hello there.\n") == "Hello there."
    # Inside the text nothing changes: the comparator reads it.
    assert shown_answer("text_conservation", "Hello  there.") == "Hello  there."
    # json_fields: the object, or JSON text of one, keys sorted, text fields' spaces collapsed.
    edge = '{"note": " Paid  by card ", "currency": "EUR", "amount": 12.0}'
    cloud = {"amount": 12, "currency": "EUR", "note": "Paid by card"}
    assert (
        shown_answer("json_fields", edge)
        == shown_answer("json_fields", cloud)
        == {
            "amount": 12,
            "currency": "EUR",
            "note": "Paid by card",
        }
    )
    assert list(shown_answer("json_fields", edge)) == ["amount", "currency", "note"]
    assert shown_answer("json_fields", "  not json ") == "not json"
    # exact: keys sorted at every depth, whole floats as integers; text as it is.
    value = {"b": [{"y": 1.0, "x": 2.5}], "a": " x "}
    assert shown_answer("exact", value) == {"a": " x ", "b": [{"x": 2.5, "y": 1}]}
    assert list(shown_answer("exact", value)["b"][0]) == ["x", "y"]
    assert shown_answer("exact", " text ") == " text "


def _item(**kw: Any) -> Any:
    base = {"id": 1, "kind": "pair", "a_is_edge": True, "lease_expires_at": None}
    return SimpleNamespace(**{**base, "policy": "full", **kw})


def test_json_fields_answers_and_their_diff_look_alike_whichever_side_sent_which_form() -> None:
    spec = {
        "kind": "json_fields",
        "fields": {"amount": "number", "currency": "string", "note": "string"},
    }
    edge = '{"note": "Paid  by card", "currency": "USD", "amount": 12.0}'
    cloud = {"amount": 12, "currency": "EUR", "note": "Paid by card"}
    found = compare(spec, edge, cloud)
    assert found.outcome == "conflict"
    views = [
        view(
            _item(
                comparator="json_fields",
                a_is_edge=a_is_edge,
                input={"text": "invoice"},
                edge_output=edge,
                cloud_output=cloud,
                diff=found.diff,
            ),
            "t",
        )
        for a_is_edge in (True, False)
    ]
    first, second = views
    assert (first["a"], first["b"]) == (second["b"], second["a"])
    assert first["a"] == {"amount": 12, "currency": "USD", "note": "Paid by card"}
    assert first["b"] == {"amount": 12, "currency": "EUR", "note": "Paid by card"}
    assert first["diff"] == {"fields": {"currency": {"a": "USD", "b": "EUR"}}}
    assert second["diff"] == {"fields": {"currency": {"a": "EUR", "b": "USD"}}}


def test_placeholders_are_renumbered_in_the_shown_form_and_back() -> None:
    # The masker numbered the edge's fields first, in the edge's key order (email before
    # phone); shown with keys sorted, the cloud's email is the first one A shows.
    item = _item(
        comparator="json_fields",
        policy="redacted",
        a_is_edge=False,
        input={"text": "Reach me at <EMAIL_1>"},
        edge_output={"phone": "<PHONE_1>", "email": "<EMAIL_2>"},
        cloud_output='{"phone": "<PHONE_2>", "email": "<EMAIL_1>"}',
        diff={"fields": {"phone": {"edge": "<PHONE_1>", "cloud": "<PHONE_2>"}}},
    )
    shown = view(item, "t")
    assert shown["input"] == {"text": "Reach me at <EMAIL_1>"}
    assert shown["a"] == {"email": "<EMAIL_1>", "phone": "<PHONE_1>"}
    assert shown["b"] == {"email": "<EMAIL_2>", "phone": "<PHONE_2>"}
    assert shown["diff"] == {"fields": {"phone": {"a": "<PHONE_1>", "b": "<PHONE_2>"}}}
    # A correction written against the view goes back to the stored numbers.
    assert stored_numbering(item, {"email": "<EMAIL_2>", "phone": "<PHONE_1>"}) == {
        "email": "<EMAIL_2>",
        "phone": "<PHONE_2>",
    }
    # A label is case-folded, its placeholders keep their case (and are renumbered).
    label = _item(
        comparator="label",
        policy="redacted",
        input={"text": "<NUM_1> <NUM_2>"},
        edge_output=" Order <NUM_2> ",
        cloud_output="order <NUM_1>",
        diff={"label": {"edge": "order <num_2>", "cloud": "order <num_1>"}},
    )
    shown = view(label, "t")
    assert (shown["a"], shown["b"]) == ("order <NUM_2>", "order <NUM_1>")
    assert shown["diff"] == {"label": {"a": "order <NUM_2>", "b": "order <NUM_1>"}}

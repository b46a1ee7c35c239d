"""Blindness against side tells: a schema-broken cloud answer is never shown in a pair,
placeholders of masked values are numbered in the order shown, and the length check's
asymmetric bounds are not shown where they would name the edge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import select

from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.models import ReviewItem
from controlplane.review.blind import blind_diff, view
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import make_api, make_result
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
LABELS = ["refund", "exchange", "complaint"]


def test_a_cloud_answer_that_breaks_the_schema_is_a_single_item(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, rate_review_per_second=1e6, rate_review_burst=10**6):
        with session_scope(api.engine) as s:
            apply_config(
                s,
                {
                    "task": "route_sides",
                    "comparator": {"kind": "label", "labels": LABELS},
                    "window_seconds": 60,
                    "allowed_lateness_seconds": 30,
                    "keep_agreeing_rate": 1.0,
                    "review": {"quota_per_window": 1000},
                },
                actor="t",
            )
        res = []
        for i in range(30):
            # A third each: the cloud breaks the schema, the edge does, they conflict.
            edge, cloud = [("refund", "gibberish"), ("nonsense", "refund"), ("refund", "exchange")][
                i % 3
            ]
            res.append(
                make_result(
                    request_id=f"r{i}",
                    task="route_sides",
                    ts=(T0 + timedelta(seconds=i)).isoformat(),
                    input={"text": f"ticket {i}"},
                    edge={"output": edge, "confidence": 0.9, "model": "s@1"},
                    cloud={"output": cloud, "model": "l@1"},
                )
            )
        post_all(api, res)
        run_pass(api.engine, T0 + timedelta(seconds=200))
        with session_scope(api.engine) as s:
            items = list(s.scalars(select(ReviewItem)))
            rows = {i.request_id: (i.kind, i.layer, i.reason, i.cloud_output) for i in items}
            views = [view(i, "route_sides") for i in items]
        assert len(rows) == 30
        for rid, (kind, layer, reason, cloud) in rows.items():
            n = int(rid[1:])
            if n % 3 == 2:
                assert (kind, layer) == ("pair", "boundary"), rid
            else:
                assert (kind, layer) == ("single", "anomaly"), rid
            if n % 3 == 0:
                assert reason == "cloud_invalid" and cloud == "gibberish"
        # No pair's diff says that one of its answers broke the schema.
        for v in views:
            if v["kind"] == "pair":
                assert not {"a", "b"} & set(v["diff"] or {}), v
            else:
                assert v["b"] is None and v["diff"] is None


def _item(**kw: Any) -> Any:
    base = {"id": 1, "kind": "pair", "a_is_edge": False, "lease_expires_at": None}
    base["comparator"] = "text_conservation"
    base["policy"] = "redacted"
    return SimpleNamespace(**{**base, **kw})


def test_placeholders_are_numbered_in_the_order_shown() -> None:
    # The masker numbered the edge's address first: <EMAIL_1> edge, <EMAIL_2> cloud.
    item = _item(
        input={"text": "Contact <PHONE_1> please"},
        edge_output="Write to <EMAIL_1> or <PHONE_1>.",
        cloud_output="Write to <EMAIL_2>, cc <EMAIL_1>; <TRUNCATED_40>",
        diff={"spans": {"edge": ["<EMAIL_1>"], "cloud": ["<EMAIL_1>", "<EMAIL_2>"]}},
    )
    for a_is_edge in (False, True):
        v = view(_item(**{**vars(item), "a_is_edge": a_is_edge}), "t")
        # Whichever side is A, its first address is <EMAIL_1>.
        first_in_a = v["a"].split("Write to ")[1][:9]
        assert first_in_a == "<EMAIL_1>"
        # One value keeps one number everywhere (a bijection); TRUNCATED counts are kept.
        assert v["input"] == {"text": "Contact <PHONE_1> please"}
        if a_is_edge:
            assert v["a"] == "Write to <EMAIL_1> or <PHONE_1>."
            assert v["b"] == "Write to <EMAIL_2>, cc <EMAIL_1>; <TRUNCATED_40>"
            assert v["diff"]["spans"] == {"a": ["<EMAIL_1>"], "b": ["<EMAIL_1>", "<EMAIL_2>"]}
        else:
            assert v["a"] == "Write to <EMAIL_1>, cc <EMAIL_2>; <TRUNCATED_40>"
            assert v["b"] == "Write to <EMAIL_2> or <PHONE_1>."
            assert v["diff"]["spans"] == {"a": ["<EMAIL_2>", "<EMAIL_1>"], "b": ["<EMAIL_2>"]}


TEN = "We shipped your parcel today and it arrives next week."  # 10 words
SEVEN = "We shipped your parcel, arriving next week."  # 7 words
FIVE = "Parcel shipped, arrives next week."  # 5 words


def test_the_length_check_shows_only_when_it_fails_both_ways() -> None:
    spec = {"kind": "text_conservation"}
    # 10 against 7 words is inside (1.4, 1/0.7]: the comparator fails it only when the
    # longer answer is the edge's. The blind diff must look the same both ways round.
    seen = set()
    for edge, cloud in ((TEN, SEVEN), (SEVEN, TEN)):
        found = compare(spec, edge, cloud)
        for a_is_edge in (True, False):
            seen.add(repr(blind_diff(found.diff, a_is_edge) if found.diff else None))
    assert seen == {"None"}
    # 10 against 5 fails whichever is the edge: shown, as the two lengths.
    for edge, cloud, a_is_edge in ((TEN, FIVE, True), (FIVE, TEN, False)):
        found = compare(spec, edge, cloud)
        shown = blind_diff(found.diff, a_is_edge)
        assert shown is not None
        assert "length_ratio" in shown["failed"]
        assert shown["length_ratio"] == {"a": 10, "b": 5}


def test_text_stored_under_full_policy_is_shown_as_it_is() -> None:
    # Nothing was masked: placeholder-like text is the sender's own, in the view and diff.
    edge, cloud = "Order <NUM_42> ships today.", "Order <NUM_43> ships today."
    found = compare({"kind": "text_conservation"}, edge, cloud)
    item = _item(
        input={"text": "Where is order <NUM_42>?"},
        edge_output=edge,
        cloud_output=cloud,
        diff=found.diff,
        policy="full",
    )
    v = view(item, "t")
    assert v["input"] == {"text": "Where is order <NUM_42>?"}
    assert (v["a"], v["b"]) == (cloud, edge)
    assert v["diff"] == blind_diff(found.diff, False)
    # The same item stored redacted: renumbered everywhere with one mapping.
    masked = view(_item(**{**vars(item), "policy": "redacted"}), "t")
    assert masked["input"] == {"text": "Where is order <NUM_1>?"}
    assert (masked["a"], masked["b"]) == (
        "Order <NUM_2> ships today.",
        "Order <NUM_1> ships today.",
    )
    # The diff lists the placeholders bare: the same mapping applies to them.
    spans = {"a": ["NUM_2"], "b": ["NUM_1"], "only_in_a": ["NUM_2"], "only_in_b": ["NUM_1"]}
    assert masked["diff"] == {"failed": ["spans"], "spans": spans}

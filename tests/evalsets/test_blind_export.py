"""The blind form of eval items: what a `review` key reads of a layer (pages and the NDJSON
export) names no model, no side, nothing served or decided, and shows both answers in the
form reviewers are shown them; a key with `read` reads the full form, the CLI's export.
Found on main: the downloads open to a review key carried `edge_model: "small-int4@3"`,
`cloud_model: "large@7"`, `edge_output`, `cloud_output` and `served`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.evalsets import items as evalitems
from controlplane.evalsets import service
from controlplane.models import ReviewItem
from controlplane.review.blind import shown_answer
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api, make_result
from tests.evalsets.helpers import (
    LABELS,
    T0,
    TASK,
    TASK_CONFIG,
    cloud_verdict,
    edge_verdict,
    label,
    queue,
)
from tests.review.blind_leaks import BLIND_KEYS

EDGE_MODEL, CLOUD_MODEL = "small-int4@3", "large@7"
NDJSON = {"Accept": "application/x-ndjson"}


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    for one in make_api(sqlite_url):
        with session_scope(one.engine) as session:
            apply_config(session, TASK_CONFIG, actor="test")
        yield one


def post_formatted(api: Api, n: int) -> list[str]:
    """n tickets whose edge writes its label title-cased and padded (" Refund "), wrong on
    every third; the router decided and served both ways."""
    ids, body = [], []
    for i in range(n):
        truth = LABELS[i % len(LABELS)]
        edge = LABELS[(i + 1) % len(LABELS)] if i % 3 == 0 else truth
        rid = f"blind-{i}"
        ids.append(rid)
        body.append(
            make_result(
                task=TASK,
                request_id=rid,
                ts=(T0 + timedelta(seconds=i)).isoformat(),
                decision=("edge", "cloud")[i % 2],
                served=("cloud", "edge")[i % 2],
                input={"text": f"Ticket {i}: about my order {1000 + i}"},
                edge={"output": f" {edge.title()} ", "confidence": 0.9, "model": EDGE_MODEL},
                cloud={"output": truth, "model": CLOUD_MODEL},
            )
        )
    assert api.post_results({"results": body}).json()["accepted"] == n
    return ids


def label_both_ways(api: Api, ids: list[str]) -> dict[int, ReviewItem]:
    """Queue and label the tickets: agreeing ones both right; the first two conflicts with
    the edge's answer named right, the others with the cloud's. Review items by id."""
    with session_scope(api.engine) as session:
        items = queue(session, TASK, ids)
        conflicts = 0
        for item in items:
            if item.outcome == "agree":
                label(session, item, "rev-1", "both_correct")
            else:
                right = edge_verdict(item) if conflicts < 2 else cloud_verdict(item)
                label(session, item, "rev-1", right, failure_class="wrong_label")
                conflicts += 1
        session.expunge_all()
    return {item.id: item for item in items}


def test_a_review_key_reads_the_blind_form_and_a_read_key_the_full_one(api: Api) -> None:
    reviewed = label_both_ways(api, post_formatted(api, 12))
    review = api.headers("review")
    assert api.client.post("/v1/evalsets/backfill", headers=review).json()["added"] == 12

    page = api.client.get(f"/v1/evalsets/{TASK}/boundary", headers=review)
    raw = api.client.get(f"/v1/evalsets/{TASK}/boundary", headers={**review, **NDJSON})
    assert page.status_code == raw.status_code == 200
    for text in (page.text, raw.text):
        low = text.lower()
        for word in (EDGE_MODEL, CLOUD_MODEL, "edge", "cloud", "served", "decision"):
            assert word not in low, (word, text[:300])
    lines = page.json()["items"]
    assert [json.loads(x) for x in raw.text.splitlines()] == lines
    assert raw.content == evalitems.jsonl(lines)

    with session_scope(api.engine) as session:
        full = service.layer_lines(session, service.task_named(session, TASK), "boundary")
    assert len(lines) == len(full) == 12
    seen_tags = set()
    for blind, whole in zip(lines, full, strict=True):
        assert set(blind) == BLIND_KEYS
        item = reviewed[whole["provenance"]["review_item_id"]]
        # The answers in the order the item's reviewers saw them, as they were shown.
        sides = (item.edge_output, item.cloud_output)
        a, b = sides if item.a_is_edge else sides[::-1]
        assert (blind["a"], blind["b"]) == (shown_answer("label", a), shown_answer("label", b))
        assert blind["a"] in LABELS and blind["b"] in LABELS
        assert blind["expected"] == shown_answer("label", whole["expected"])
        # The consensus named by A and B; the sampling reason left out.
        consensus = whole["provenance"]["consensus"]
        named = {
            "edge_correct": "a_correct" if item.a_is_edge else "b_correct",
            "cloud_correct": "b_correct" if item.a_is_edge else "a_correct",
        }.get(consensus, consensus)
        assert blind["tags"] == sorted(["pair", f"consensus:{named}"])
        seen_tags.update(blind["tags"])
        assert {k: blind[k] for k in ("id", "task", "layer", "input", "bucket")} == {
            k: whole[k] for k in ("id", "task", "layer", "input", "bucket")
        }
    # Both rewritten verdicts, and the unchanged one, were exercised.
    assert {"consensus:a_correct", "consensus:b_correct", "consensus:both_correct"} <= seen_tags

    # `read` (and admin) read the full form: the CLI's export, byte for byte.
    with session_scope(api.engine) as session:
        exported = service.layer_bytes(session, service.task_named(session, TASK), "boundary")
    for scope in ("read", "admin"):
        answer = api.client.get(
            f"/v1/evalsets/{TASK}/boundary", headers={**api.headers(scope), **NDJSON}
        )
        assert answer.content == exported and EDGE_MODEL in answer.text
        paged = api.client.get(f"/v1/evalsets/{TASK}/boundary", headers=api.headers(scope))
        assert paged.json()["items"] == full

    # The blind CSV: its own columns, nothing naming a side.
    with session_scope(api.engine) as session:
        found = service.task_named(session, TASK)
        data = service.layer_csv(session, found, "boundary", blind=True).decode()
    assert data.splitlines()[0] == ",".join(evalitems.BLIND_CSV_COLUMNS)
    assert len(data.splitlines()) == 13
    assert not [w for w in (EDGE_MODEL, CLOUD_MODEL, "edge", "cloud") if w in data.lower()]


def test_runs_need_read_a_run_names_its_model(api: Api) -> None:
    review, read = api.headers("review"), api.headers("read")
    listing = api.client.get(f"/v1/evalsets/{TASK}/runs", headers=review)
    stored = api.client.post(
        f"/v1/evalsets/{TASK}/runs", json={"model": EDGE_MODEL, "lines": []}, headers=review
    )
    assert listing.status_code == stored.status_code == 403
    assert api.client.get(f"/v1/evalsets/{TASK}/runs", headers=read).json() == {"runs": []}


def _eval_item(**kw: Any) -> Any:
    base = {
        "item_id": "0" * 64,
        "layer": "boundary",
        "bucket": "0-127",
        "failure_class": None,
        "tags": ["cloud_decided", "pair", "consensus:cloud_correct"],
        "input": {"text": "Please write back"},
    }
    return SimpleNamespace(**{**base, **kw})


def test_a_redacted_item_s_blind_form_numbers_placeholders_in_the_order_shown() -> None:
    # The masker numbered the edge's address first: <EMAIL_1> edge, <EMAIL_2> cloud.
    item = _eval_item(
        provenance={"comparator": "text_conservation", "kind": "pair", "policy": "redacted"},
        edge_output="Mail <EMAIL_1> today. ",
        cloud_output=" Mail <EMAIL_2> today.",
        expected=" Mail <EMAIL_2> today.",
    )
    for a_is_edge in (True, False):
        line = evalitems.blind_line(item, "t", a_is_edge)
        # Whichever side is A, A's address is <EMAIL_1>; the expected answer keeps its own.
        assert line["a"] == "Mail <EMAIL_1> today."
        assert line["b"] == "Mail <EMAIL_2> today."
        assert line["expected"] == ("Mail <EMAIL_2> today." if a_is_edge else line["a"])
        assert line["tags"] == ["consensus:" + ("b" if a_is_edge else "a") + "_correct", "pair"]
    # A single item shows its one (cloud) answer as A, as the review queue did.
    single = evalitems.blind_line(
        _eval_item(
            provenance={"comparator": "label", "kind": "single", "policy": "full"},
            tags=["edge_error", "single", "consensus:wrong"],
            edge_output=None,
            cloud_output=" Refund",
            expected="exchange",
        ),
        "t",
        True,
    )
    assert (single["a"], single["b"], single["expected"]) == ("refund", None, "exchange")
    assert single["tags"] == ["consensus:wrong", "single"]


def test_an_item_whose_review_item_is_gone_keeps_a_fixed_order(api: Api) -> None:
    label_both_ways(api, post_formatted(api, 6))
    review = api.headers("review")
    api.client.post("/v1/evalsets/backfill", headers=review)
    before = api.client.get(f"/v1/evalsets/{TASK}/boundary", headers=review).json()["items"]
    with session_scope(api.engine) as session:
        for item in session.scalars(select(ReviewItem)):
            session.delete(item)
    after = api.client.get(f"/v1/evalsets/{TASK}/boundary", headers=review).json()["items"]
    again = api.client.get(f"/v1/evalsets/{TASK}/boundary", headers=review).json()["items"]
    assert after == again and len(after) == len(before) == 6
    assert [set(x) for x in after] == [BLIND_KEYS] * 6

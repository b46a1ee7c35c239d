"""Blindness: no review answer before the label tells which side is the edge — not the
order of the outputs, not a model name, not the sampling reason, not the diff's wording —
checked over hundreds of sampled items of every comparator kind, through the API. Also the
rewrite of each comparator's diff into A/B terms, and the review endpoints' answers."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.models import ReviewItem
from controlplane.review.blind import blind_diff
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
WINDOW, LATENESS = 60, 30
EDGE_MODEL, CLOUD_MODEL = "tiny-q4-model@3", "mega-70b-model@9"
REASONS = ("conflict", "low_confidence", "cloud_decided", "edge_error", "invalid", "regression")
# Nothing in a review answer may contain these (case-insensitive).
FORBIDDEN = ("edge", "cloud", EDGE_MODEL.lower(), CLOUD_MODEL.lower(), "agree", *REASONS)

SPECS: dict[str, dict[str, Any]] = {
    "label": {"kind": "label", "labels": ["refund", "exchange", "complaint"]},
    "exact": {"kind": "exact"},
    "json_fields": {
        "kind": "json_fields",
        "fields": {"amount": "number", "currency": "string"},
        "required": ["amount"],
    },
    "text_conservation": {"kind": "text_conservation"},
}
SENTENCES = [
    "Order 4411 shipped to Berlin on Monday.",
    "The refund of 25.50 was not approved.",
    "Please call Maria Lopez about invoice INV7731.",
    "我们没有收到 3 件包裹。",
    "Nothing was charged twice.",
]


def outputs(kind: str, rng: random.Random) -> tuple[Any, Any]:
    """An (edge, cloud) pair of the comparator's kind: agreeing, conflicting, or broken."""
    roll = rng.random()
    if kind == "label":
        cloud = rng.choice(["refund", "exchange", "complaint"])
        edge = cloud if roll < 0.4 else rng.choice(["refund", "exchange", "complaint", "nonsense"])
        if roll > 0.93:
            cloud = "gibberish"
        return edge, cloud
    if kind == "exact":
        cloud = {"items": [rng.randrange(5) for _ in range(3)], "status": rng.choice("ab")}
        edge = cloud if roll < 0.4 else {**cloud, "status": rng.choice("abc")}
        return edge, cloud
    if kind == "json_fields":
        cloud: Any = {"amount": rng.choice([10, 12.5, 99]), "currency": rng.choice(["EUR", "USD"])}
        edge: Any = dict(cloud) if roll < 0.4 else {**cloud, "amount": rng.choice([10, 11, 99])}
        if 0.85 < roll < 0.92:
            edge = {"currency": "EUR"}  # missing the required amount: invalid
        elif roll >= 0.92:
            cloud = "not json at all"
        return edge, cloud
    cloud = rng.choice(SENTENCES)
    if roll < 0.4:
        return cloud, cloud
    edge = rng.choice(
        [
            cloud.replace("not ", ""),
            cloud.replace("4411", "4412"),
            cloud + " Thanks.",
            rng.choice(SENTENCES),
            "Short.",
        ]
    )
    return edge, cloud


def results(task: str, kind: str, rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        edge_out, cloud_out = outputs(kind, rng)
        edge: dict[str, Any] = {
            "output": edge_out,
            "confidence": rng.choice([0.95, 0.9, 0.3]),
            "model": EDGE_MODEL,
        }
        if rng.random() < 0.08:
            edge = {
                "output": None,
                "error": "timeout",
                "error_message": "timed out",
                "model": EDGE_MODEL,
            }
        out.append(
            make_result(
                request_id=f"{task}-{i}",
                task=task,
                ts=(T0 + timedelta(seconds=i * 0.2)).isoformat(),
                input_tokens=rng.choice([40, 300, 900]),
                decision=rng.choice(["edge", "edge", "cloud"]),
                input={"text": f"Customer message number {i}: please help."},
                edge=edge,
                cloud={"output": cloud_out, "model": CLOUD_MODEL},
            )
        )
    return out


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Any) -> Iterator[Api]:
    """One app whose queue holds every reviewable result of one window per comparator kind."""
    import shutil

    path = tmp_path_factory.mktemp("blind") / "shadowplane.db"
    shutil.copy(sqlite_template, path)
    # The reviewer goes through hundreds of items in seconds: past the review rate limit.
    for api in make_api(f"sqlite:///{path}", rate_review_per_second=1e6, rate_review_burst=10**6):
        rng = random.Random(7)
        with session_scope(api.engine) as session:
            for kind, spec in SPECS.items():
                apply_config(
                    session,
                    {
                        "task": f"blind_{kind}",
                        "comparator": spec,
                        "window_seconds": WINDOW,
                        "allowed_lateness_seconds": LATENESS,
                        "keep_agreeing_rate": 1.0,
                        "review": {"quota_per_window": 1000},
                    },
                    actor="test",
                )
        for kind in SPECS:
            post_all(api, results(f"blind_{kind}", kind, rng, 90))
        report = run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS))
        assert report.failed == [] and report.sampled > 250
        yield api


def _clean(text: str) -> list[str]:
    low = text.lower()
    return [word for word in FORBIDDEN if word in low]


def test_no_review_answer_reveals_the_edge_side(sampled: Api) -> None:
    api = sampled
    headers = api.headers("review")
    rng = random.Random(3)
    seen: dict[int, dict[str, Any]] = {}
    kinds_seen: set[str] = set()
    released = False
    first_id = -1
    while True:
        answer = api.client.get("/v1/review/next", headers=headers)
        if answer.status_code == 204:
            break
        assert answer.status_code == 200, answer.text
        assert _clean(answer.text) == [], answer.text
        view = answer.json()["item"]
        assert set(view) == {
            "id",
            "task",
            "kind",
            "input",
            "a",
            "b",
            "diff",
            "note",
            "guidelines",
            "lease_expires_at",
        }
        # Each item comes once, but for the one given back, which comes again.
        assert view["id"] not in seen or (released and view["id"] == first_id), view["id"]
        first_id = view["id"] if not seen else first_id
        seen[view["id"]] = view
        kinds_seen.add(view["task"])
        if not released:
            # Give one back once: the same item comes again, just as blind.
            back = api.client.post(f"/v1/review/{view['id']}/release", headers=headers)
            assert back.status_code == 200 and _clean(back.text) == [], back.text
            released = True
            continue
        verdict = rng.choice(
            ["a_correct", "b_correct", "both_correct", "both_wrong", "unclear"]
            if view["kind"] == "pair"
            else ["correct", "wrong", "unclear"]
        )
        done = api.client.post(
            f"/v1/review/{view['id']}/label", json={"verdict": verdict}, headers=headers
        )
        if done.status_code == 422:
            # A verdict the task's comparator contradicts is refused, its reason as blind.
            assert done.json()["detail"].startswith("verdict: ") and _clean(done.text) == []
            done = api.client.post(
                f"/v1/review/{view['id']}/label", json={"verdict": "unclear"}, headers=headers
            )
        assert done.status_code == 200, done.text
        assert _clean(done.text) == [], done.text
        if len(seen) % 25 == 0:
            queue = api.client.get("/v1/review/queue?task=blind_label", headers=headers)
            # Its `regression` count (of a blocked model's set) names no item's reason.
            counts = queue.text.replace('"regression":', "")
            assert queue.status_code == 200 and _clean(counts) == []
    assert kinds_seen == {f"blind_{kind}" for kind in SPECS}
    with session_scope(api.engine) as session:
        items = {i.id: i for i in session.scalars(select(ReviewItem))}
    assert set(seen) == set(items) and len(items) > 250
    pairs = [i for i in items.values() if i.kind == "pair"]
    singles = [i for i in items.values() if i.kind == "single"]
    assert len(pairs) > 200 and len(singles) > 15
    for item in pairs:
        view = seen[item.id]
        # A and B are the item's outputs in its hidden order...
        expected = (item.edge_output, item.cloud_output)
        assert (view["a"], view["b"]) == (expected if item.a_is_edge else expected[::-1])
        # ...and the diff speaks of them in the same order.
        if item.comparator == "label" and item.diff and "label" in item.diff:
            label = view["diff"]["label"]
            assert (label["a"], label["b"]) == (
                (item.diff["label"]["edge"], item.diff["label"]["cloud"])
                if item.a_is_edge
                else (item.diff["label"]["cloud"], item.diff["label"]["edge"])
            )
    for item in singles:
        view = seen[item.id]
        assert (view["a"], view["b"], view["diff"]) == (item.cloud_output, None, None)
    # The order is a fair coin: the edge answer is A about half the time.
    share = sum(i.a_is_edge for i in pairs) / len(pairs)
    assert 0.3 < share < 0.7
    # Position tells nothing: among conflicts, A is the edge's as often as B.
    conflicts = [i for i in pairs if i.reason == "conflict"]
    assert 0.25 < sum(i.a_is_edge for i in conflicts) / len(conflicts) < 0.75


def test_every_comparator_diff_is_rewritten_to_a_and_b() -> None:
    rng = random.Random(11)
    shapes: set[str] = set()
    for kind, spec in SPECS.items():
        for _ in range(300):
            edge, cloud = outputs(kind, rng)
            found = compare(spec, edge, cloud)
            if found.diff is None:
                continue
            for a_is_edge in (True, False):
                blind = blind_diff(found.diff, a_is_edge)
                text = json.dumps(blind, ensure_ascii=False).lower()
                assert "edge" not in text and "cloud" not in text, (found.diff, blind)
                # Something of the diff is kept: the checks and values, renamed.
                assert blind, found.diff
                shapes.add(f"{kind}:{','.join(sorted(found.diff))}")
    # Both side-problem shapes, and each comparator's difference shape, were exercised.
    assert {
        "label:label",
        "label:edge",
        "label:cloud",
        "exact:paths",
        "json_fields:fields",
        "json_fields:edge",
        "json_fields:cloud",
    } <= shapes
    assert any(s.startswith("text_conservation:") and "failed" in s for s in shapes)


def test_side_names_inside_values_are_moved_not_leaked() -> None:
    diff = {
        "failed": ["numbers", "length_ratio"],
        "numbers": {"edge": ["1"], "cloud": ["2"], "missing": ["2"], "extra": ["1"]},
        "length_ratio": {"edge": 10, "cloud": 20, "ratio": 0.5, "bounds": [0.7, 1.4]},
        "something_new": {"edge": "x"},
    }
    assert blind_diff(diff, True) == {
        "failed": ["numbers", "length_ratio"],
        "numbers": {"a": ["1"], "b": ["2"], "only_in_a": ["1"], "only_in_b": ["2"]},
        "length_ratio": {"a": 10, "b": 20},
    }
    assert blind_diff(diff, False)["numbers"] == {
        "a": ["2"],
        "b": ["1"],
        "only_in_a": ["2"],
        "only_in_b": ["1"],
    }
    # A JSON field named like a side stays a field name; its values are renamed.
    fields = {"fields": {"cloud": {"edge": 1, "cloud": 2}}}
    assert blind_diff(fields, False) == {"fields": {"cloud": {"a": 2, "b": 1}}}
    assert blind_diff({"too_long": {"edge": 5, "cloud": None, "max_chars": 3}}, True) == {
        "too_long": {"a": 5, "b": None, "max_chars": 3}
    }


@pytest.fixture
def review_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def test_review_endpoints_answer_and_refuse(review_api: Api) -> None:
    api = review_api
    review = api.headers("review")
    assert api.client.get("/v1/review/next", headers=api.headers("read")).status_code == 403
    assert api.client.get("/v1/review/next", headers=review).status_code == 204
    missing = api.client.get("/v1/review/next?task=nope", headers=review)
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]
    from tests.review.queuedata import add_items

    (item,) = add_items(api.engine, "ticket_classify", 1)
    # Not held: 409; held by someone else: 409 too.
    refused = api.client.post(
        f"/v1/review/{item}/label", json={"verdict": "a_correct"}, headers=review
    )
    assert refused.status_code == 409 and "lease" in refused.json()["detail"]
    claimed = api.client.get("/v1/review/next?task=ticket_classify", headers=review).json()["item"]
    assert claimed["id"] == item and claimed["kind"] == "pair"
    bad = api.client.post(f"/v1/review/{item}/label", json={"verdict": "correct"}, headers=review)
    assert bad.status_code == 422 and "verdict" in bad.json()["detail"]
    unknown = api.client.post(f"/v1/review/{item}/label", json={"verdict": "maybe"}, headers=review)
    assert unknown.status_code == 422
    ok = api.client.post(
        f"/v1/review/{item}/label",
        json={"verdict": "both_wrong", "corrected": "complaint", "failure_class": "wrong_label"},
        headers=review,
    )
    assert ok.status_code == 200
    assert ok.json() == {
        "item": item,
        "label": ok.json()["label"],
        "state": "done",
        "reviews_needed": 1,
        "reviewers": 1,
    }
    assert api.client.post(f"/v1/review/{item + 99}/release", headers=review).status_code == 404
    queue = api.client.get("/v1/review/queue", headers=review).json()["tasks"]
    by_task = {row["task"]: row for row in queue}
    assert by_task["ticket_classify"]["done"] == 1
    assert by_task["ticket_classify"]["labelled_today"] == 1
    assert by_task["invoice_extract"]["has_queue"] is False
    assert "payload_policy is none" in by_task["invoice_extract"]["note"]
    audit = api.client.get("/v1/audit?actor=review-key", headers=api.headers("admin")).json()
    assert [e["action"] for e in audit["entries"]][:1] == ["review.label"]

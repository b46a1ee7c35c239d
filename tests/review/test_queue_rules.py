"""The queue's rules for one reviewer: one lease at a time (also under parallel claims on
PostgreSQL), no queue for a task that keeps no text, a reviewer's correction of their own
label, and corrections that must be answers of the task's comparator."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select

from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.models import AuditEntry, ReviewItem, ReviewLabel
from controlplane.review import actions
from controlplane.review.labels import consensus
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, Api, make_api
from tests.review.queuedata import T0, add_items

LEASE = 600.0
OTHER = {**TICKET_TASK, "task": "ticket_other"}


def _engine(url: str, **config: object) -> Engine:
    engine = get_engine(url)
    with session_scope(engine) as session:
        apply_config(session, {**TICKET_TASK, **config}, actor="test")
        apply_config(session, OTHER, actor="test")
    return engine


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    yield _engine(db_url)


def claim(engine: Engine, reviewer: str, task: str | None = "ticket_classify", seconds: float = 0):
    now = T0 + timedelta(seconds=seconds)
    return actions.claim(engine, task, reviewer, now, lease_seconds=LEASE)


def held(engine: Engine, reviewer: str) -> list[int]:
    with session_scope(engine) as session:
        return list(
            session.scalars(
                select(ReviewItem.id)
                .where(ReviewItem.claimed_by == reviewer)
                .order_by(ReviewItem.id)
            )
        )


def test_a_claim_of_another_task_returns_the_item_already_held(engine: Engine) -> None:
    mine = add_items(engine, "ticket_classify", 2)
    other = add_items(engine, "ticket_other", 2, start=10)
    assert claim(engine, "ann")["id"] == mine[0]  # type: ignore[index]
    # Asking for another task, or any, still gives the item held; no second lease.
    assert claim(engine, "ann", "ticket_other", 5)["id"] == mine[0]  # type: ignore[index]
    assert claim(engine, "ann", None, 6)["id"] == mine[0]  # type: ignore[index]
    assert held(engine, "ann") == [mine[0]]
    assert claim(engine, "bob", "ticket_other")["id"] == other[0]  # type: ignore[index]


@pytest.mark.integration
def test_parallel_claims_of_one_reviewer_hold_one_item(pg_url: str) -> None:
    engine = _engine(pg_url)
    add_items(engine, "ticket_classify", 20)
    add_items(engine, "ticket_other", 20, start=100)
    for round_ in range(4):
        name, got = f"ann{round_}", []
        barrier = threading.Barrier(8)

        def go(task: str | None, name: str = name, got: list = got, barrier=barrier) -> None:
            barrier.wait()
            view = actions.claim(engine, task, name, lease_seconds=LEASE)
            got.append(view["id"] if view else None)

        tasks = ["ticket_classify", "ticket_other", None, "ticket_classify"] * 2
        threads = [threading.Thread(target=go, args=(task,)) for task in tasks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(held(engine, name)) == 1, (name, got)
        assert set(got) == set(held(engine, name))


def test_next_for_a_task_that_keeps_no_text_is_409(sqlite_url: str) -> None:
    for api in make_api(sqlite_url):
        answer = api.client.get(
            "/v1/review/next?task=invoice_extract", headers=api.headers("review")
        )
        assert answer.status_code == 409
        assert "payload_policy is none" in answer.text and "no review queue" in answer.text
        spec = api.client.get("/openapi.json").json()
        assert "409" in spec["paths"]["/v1/review/next"]["get"]["responses"]


def test_a_task_switched_to_keep_no_text_hands_out_no_items_at_all(db_url: str) -> None:
    engine = _engine(db_url)
    first, second = add_items(engine, "ticket_classify", 2)
    (other,) = add_items(engine, "ticket_other", 1, start=10)
    assert claim(engine, "ann")["id"] == first  # type: ignore[index]
    with session_scope(engine) as session:
        apply_config(session, {**TICKET_TASK, "payload_policy": "none"}, actor="test")
    # Neither the lease ann holds nor a claim without a task shows its kept text any more.
    assert claim(engine, "ann", task=None, seconds=1)["id"] == other  # type: ignore[index]
    assert claim(engine, "bob", task=None, seconds=2) is None
    assert second not in held(engine, "bob")


def test_a_reviewer_corrects_their_own_label_without_a_lease(db_url: str) -> None:
    engine = _engine(db_url, review={"reviewers_per_item": 2})
    (item,) = add_items(engine, "ticket_classify", 1, reviews_needed=2)
    assert claim(engine, "ann")["id"] == item  # type: ignore[index]
    first = actions.label(engine, item, "ann", verdict="a_correct", now=T0 + timedelta(seconds=1))
    assert first["state"] == "queued"
    assert claim(engine, "ann", seconds=2) is None  # labelled: not offered again
    # Without a lease: a reviewer who labelled the item corrects their label...
    again = actions.label(engine, item, "ann", verdict="b_correct", now=T0 + timedelta(seconds=3))
    assert again["state"] == "queued" and again["reviewers"] == 1
    # ...while anybody else still needs the lease, and bob's lease is left alone.
    assert claim(engine, "bob", seconds=4)["id"] == item  # type: ignore[index]
    with pytest.raises(ActionError) as refused:
        actions.label(engine, item, "cat", verdict="a_correct", now=T0 + timedelta(seconds=5))
    assert refused.value.status == 409
    again2 = actions.label(engine, item, "ann", verdict="both_wrong", now=T0 + timedelta(seconds=6))
    assert again2["state"] == "queued"
    assert held(engine, "bob") == [item]
    with session_scope(engine) as session:
        labels = list(session.scalars(select(ReviewLabel).order_by(ReviewLabel.id)))
        audited = [
            e.details
            for e in session.scalars(
                select(AuditEntry)
                .where(AuditEntry.action == "review.label")
                .order_by(AuditEntry.id)
            )
        ]
        agreed = consensus(labels)
    assert [lab.verdict for lab in labels] == ["a_correct", "b_correct", "both_wrong"]
    assert agreed is not None and agreed.resolved == "both_wrong"  # the newest vote counts
    assert [d["correction"] for d in audited] == [False, True, True]
    # bob's label closes it.
    done = actions.label(engine, item, "bob", verdict="both_wrong", now=T0 + timedelta(seconds=7))
    assert done["state"] == "done"


@pytest.mark.parametrize(
    ("verdict", "corrected", "reason"),
    [
        ("both_wrong", {"label": "refund"}, "label comparator accepts"),
        ("both_wrong", "Refund!!", "label comparator accepts"),
        ("both_wrong", ["refund"], "label comparator accepts"),
        ("both_wrong", 42, "label comparator accepts"),
        ("a_correct", "refund", "already names a right answer"),
        ("b_correct", "refund", "already names a right answer"),
        ("both_correct", "refund", "already names a right answer"),
    ],
)
def test_a_correction_must_be_an_answer_of_the_comparator(
    engine: Engine, verdict: str, corrected: object, reason: str
) -> None:
    (item,) = add_items(engine, "ticket_classify", 1)
    claim(engine, "ann")
    with pytest.raises(ActionError) as refused:
        actions.label(
            engine, item, "ann", verdict=verdict, corrected=corrected, now=T0 + timedelta(seconds=1)
        )
    assert refused.value.status == 422
    assert str(refused.value).startswith("corrected: ") and reason in str(refused.value)
    # The lease is kept; a correction of the right shape is stored.
    out = actions.label(
        engine,
        item,
        "ann",
        verdict="both_wrong",
        corrected="inquiry",
        now=T0 + timedelta(seconds=2),
    )
    assert out["state"] == "done"


def test_a_correction_of_a_single_answer(api: Api) -> None:
    (item,) = add_items(api.engine, "ticket_classify", 1, kind="single", a_is_edge=False)
    h = api.headers("review")
    assert api.client.get("/v1/review/next", headers=h).json()["item"]["id"] == item
    bad = api.client.post(
        f"/v1/review/{item}/label", json={"verdict": "correct", "corrected": "refund"}, headers=h
    )
    assert bad.status_code == 422 and "corrected" in bad.text
    good = api.client.post(
        f"/v1/review/{item}/label", json={"verdict": "wrong", "corrected": "refund"}, headers=h
    )
    assert good.status_code == 200

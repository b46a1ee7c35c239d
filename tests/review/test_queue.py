"""The review queue: leases, labels, skips, one more reviewer after a disagreement, and
concurrent claimers on PostgreSQL that never get the same item."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select

from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.models import AuditEntry, ReviewItem, ReviewLabel, ReviewSkip
from controlplane.review import actions
from controlplane.rollout.configs import apply_config
from tests.conftest import INVOICE_TASK, TICKET_TASK
from tests.review.queuedata import T0, add_items

LEASE = 600.0


def _setup(url: str, **config: object) -> Engine:
    engine = get_engine(url)
    with session_scope(engine) as session:
        apply_config(session, {**TICKET_TASK, **config}, actor="test")
    return engine


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    yield _setup(db_url)


def claim(engine: Engine, reviewer: str, seconds: float = 0, task: str | None = "ticket_classify"):
    return actions.claim(
        engine, task, reviewer, T0 + timedelta(seconds=seconds), lease_seconds=LEASE
    )


def label(engine: Engine, item: int, reviewer: str, seconds: float = 1, **kw: object):
    kw.setdefault("verdict", "a_correct")
    return actions.label(engine, item, reviewer, now=T0 + timedelta(seconds=seconds), **kw)  # type: ignore[arg-type]


def test_claim_holds_the_oldest_item_and_renews_it(engine: Engine) -> None:
    ids = add_items(engine, "ticket_classify", 3)
    first = claim(engine, "ann")
    assert first is not None and first["id"] == ids[0]
    assert first["lease_expires_at"] == "2026-11-30T02:10:00Z"
    # Asking again while holding it gives the same item, lease renewed.
    again = claim(engine, "ann", seconds=60)
    assert again is not None and again["id"] == ids[0]
    assert again["lease_expires_at"] == "2026-11-30T02:11:00Z"
    # Another reviewer gets the next one.
    other = claim(engine, "bob", seconds=61)
    assert other is not None and other["id"] == ids[1]
    # Any task: the same queue.
    assert claim(engine, "cat", seconds=62, task=None)["id"] == ids[2]  # type: ignore[index]
    assert claim(engine, "dan", seconds=63) is None


def test_unknown_task_is_404(engine: Engine) -> None:
    with pytest.raises(ActionError) as err:
        claim(engine, "ann", task="no_such_task")
    assert err.value.status == 404 and "no_such_task" in str(err.value)


def test_expired_lease_returns_the_item_and_its_late_label_is_refused(engine: Engine) -> None:
    (item,) = add_items(engine, "ticket_classify", 1)
    assert claim(engine, "ann")["id"] == item  # type: ignore[index]
    # Within the lease nobody else gets it.
    assert claim(engine, "bob", seconds=599) is None
    # Past it, the item is back in the queue.
    taken = claim(engine, "bob", seconds=600)
    assert taken is not None and taken["id"] == item
    with pytest.raises(ActionError) as err:
        label(engine, item, "ann", seconds=601)
    assert err.value.status == 409 and "lease" in str(err.value)
    # An expired lease nobody took is lost too.
    with pytest.raises(ActionError) as err:
        label(engine, item, "bob", seconds=1201)
    assert err.value.status == 409 and "expired" in str(err.value)
    # Still queued, no label stored.
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(ReviewLabel)) == 0
        assert session.get(ReviewItem, item).state == "queued"  # type: ignore[union-attr]


def test_label_without_a_claim_or_on_a_missing_item(engine: Engine) -> None:
    (item,) = add_items(engine, "ticket_classify", 1)
    with pytest.raises(ActionError) as err:
        label(engine, item, "ann")
    assert err.value.status == 409
    with pytest.raises(ActionError) as err:
        label(engine, item + 1000, "ann")
    assert err.value.status == 404


def test_label_is_stored_resolved_audited_and_closes_the_item(engine: Engine) -> None:
    a_edge, a_cloud = add_items(engine, "ticket_classify", 2)  # item-0: A is edge; item-1 not
    for item, reviewer in ((a_edge, "ann"), (a_cloud, "bob")):
        assert claim(engine, reviewer)["id"] == item  # type: ignore[index]
        out = label(
            engine, item, reviewer, verdict="a_correct", failure_class="wrong_label", note="n"
        )
        assert out == {
            "item": item,
            "label": out["label"],
            "state": "done",
            "reviews_needed": 1,
            "reviewers": 1,
        }
    with session_scope(engine) as session:
        labels = {x.item_id: x for x in session.scalars(select(ReviewLabel))}
        assert labels[a_edge].resolved == "edge_correct"
        assert labels[a_cloud].resolved == "cloud_correct"
        assert labels[a_edge].verdict == "a_correct"
        assert labels[a_edge].failure_class == "wrong_label"
        item = session.get(ReviewItem, a_edge)
        assert item is not None and item.claimed_by is None and item.lease_expires_at is None
        assert item.done_at is not None
        audit = session.scalars(select(AuditEntry).where(AuditEntry.action == "review.label"))
        assert sorted(e.actor for e in audit) == ["ann", "bob"]
    # Done items are never offered again.
    assert claim(engine, "cat", seconds=5) is None


def test_bad_verdicts_are_422_and_keep_the_lease(engine: Engine) -> None:
    pair, single = add_items(engine, "ticket_classify", 2)
    with session_scope(engine) as session:
        session.get(ReviewItem, single).kind = "single"  # type: ignore[union-attr]
    assert claim(engine, "ann")["id"] == pair  # type: ignore[index]
    for bad in (
        {"verdict": "correct"},
        {"verdict": "a_correct", "failure_class": "Bad Class"},
        {"verdict": "both_wrong", "corrected": "x" * 70_000},
        {"verdict": "a_correct", "note": "n" * 2001},
    ):
        with pytest.raises(ActionError) as err:
            label(engine, pair, "ann", **bad)
        assert err.value.status == 422
    assert label(engine, pair, "ann", verdict="both_wrong", corrected="inquiry")["state"] == "done"
    assert claim(engine, "ann", seconds=2)["id"] == single  # type: ignore[index]
    with pytest.raises(ActionError) as err:
        label(engine, single, "ann", seconds=3, verdict="a_correct")
    assert err.value.status == 422 and "single" in str(err.value)
    assert label(engine, single, "ann", seconds=3, verdict="wrong")["state"] == "done"


def test_skip_is_never_offered_again_and_release_just_frees(engine: Engine) -> None:
    first, second = add_items(engine, "ticket_classify", 2)
    assert claim(engine, "ann")["id"] == first  # type: ignore[index]
    out = actions.release(
        engine, first, "ann", reason="cannot read this language", now=T0 + timedelta(seconds=1)
    )
    assert out == {"item": first, "skipped": True, "state": "queued"}
    assert claim(engine, "ann", seconds=2)["id"] == second  # type: ignore[index]
    # A plain release frees the item for anyone, the same reviewer included.
    actions.release(engine, second, "ann", now=T0 + timedelta(seconds=3))
    assert claim(engine, "ann", seconds=4)["id"] == second  # type: ignore[index]
    # The skipped one goes to someone else.
    assert claim(engine, "bob", seconds=5)["id"] == first  # type: ignore[index]
    with pytest.raises(ActionError) as err:  # not ann's any more
        actions.release(engine, first, "ann", now=T0 + timedelta(seconds=6))
    assert err.value.status == 409
    with session_scope(engine) as session:
        skips = list(session.scalars(select(ReviewSkip)))
        assert [(s.item_id, s.reviewer, s.reason) for s in skips] == [
            (first, "ann", "cannot read this language")
        ]
        actions_done = Counter(
            session.scalars(select(AuditEntry.action).where(AuditEntry.action.like("review.%")))
        )
        assert actions_done == {"review.skip": 1, "review.release": 1}


def test_a_disagreement_goes_to_one_more_reviewer(db_url: str) -> None:
    engine = _setup(db_url, review={"reviewers_per_item": 2})
    (item,) = add_items(engine, "ticket_classify", 1, reviews_needed=2)
    assert claim(engine, "ann")["id"] == item  # type: ignore[index]
    assert label(engine, item, "ann", verdict="a_correct")["state"] == "queued"
    assert claim(engine, "ann", seconds=2) is None  # ann labelled it
    assert claim(engine, "bob", seconds=2)["id"] == item  # type: ignore[index]
    out = label(engine, item, "bob", seconds=3, verdict="b_correct")
    assert (out["state"], out["reviews_needed"], out["reviewers"]) == ("queued", 3, 2)
    assert claim(engine, "bob", seconds=4) is None
    assert claim(engine, "cat", seconds=4)["id"] == item  # type: ignore[index]
    out = label(engine, item, "cat", seconds=5, verdict="b_correct")
    # Only one extra reviewer: the item is done even though the votes still differ.
    assert (out["state"], out["reviews_needed"], out["reviewers"]) == ("done", 3, 3)


def test_agreeing_reviewers_close_the_item(db_url: str) -> None:
    engine = _setup(db_url, review={"reviewers_per_item": 2})
    (item,) = add_items(engine, "ticket_classify", 1, reviews_needed=2)
    for n, reviewer in enumerate(("ann", "bob")):
        assert claim(engine, reviewer, seconds=10 * n)["id"] == item  # type: ignore[index]
        out = label(engine, item, reviewer, seconds=10 * n + 1, verdict="both_wrong")
    assert (out["state"], out["reviews_needed"]) == ("done", 2)


def test_queue_counts_and_the_task_without_a_queue(engine: Engine) -> None:
    with session_scope(engine) as session:
        apply_config(session, INVOICE_TASK, actor="test")
    add_items(engine, "ticket_classify", 3)
    first = claim(engine, "ann")["id"]  # type: ignore[index]
    label(engine, first, "ann")
    claim(engine, "bob", seconds=2)
    overview = {
        row["task"]: row for row in actions.queue_overview(engine, now=T0 + timedelta(seconds=3))
    }
    assert overview["ticket_classify"] == {
        "task": "ticket_classify",
        "queued": 1,
        "claimed": 1,
        "labelled_today": 1,
        "done": 1,
        # No edge model is blocked: no regression count (tests/evalsets/test_unblock_gate.py).
        "regression": None,
        "has_queue": True,
        "note": None,
    }
    none = overview["invoice_extract"]
    assert none["has_queue"] is False and "payload_policy is none" in none["note"]
    # Past the lease, the claimed item counts as queued again; a new day starts at zero.
    later = actions.queue_overview(engine, "ticket_classify", now=T0 + timedelta(days=1))
    assert (later[0]["queued"], later[0]["claimed"], later[0]["labelled_today"]) == (2, 0, 0)


@pytest.mark.integration
def test_concurrent_claimers_never_hold_the_same_item(pg_url: str) -> None:
    """20 reviewers on their own connections claim at once, then keep claiming and labelling
    until the queue is empty: every claim is a different item, every item labelled once."""
    engine = _setup(pg_url)
    add_items(engine, "ticket_classify", 200)
    claims: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(20)

    def reviewer(name: str) -> None:
        mine = claims.setdefault(name, [])
        try:
            start.wait()
            while True:
                view = actions.claim(engine, "ticket_classify", name, lease_seconds=LEASE)
                if view is None:
                    return
                mine.append(view["id"])
                actions.label(engine, view["id"], name, verdict="both_wrong")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reviewer, args=(f"r{i}",)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    claimed = [item for items in claims.values() for item in items]
    assert len(claimed) == 200 and len(set(claimed)) == 200
    # The first claims happened together: twenty different items.
    assert len({items[0] for items in claims.values()}) == 20
    with session_scope(engine) as session:
        per_item = Counter(session.scalars(select(ReviewLabel.item_id)))
        assert len(per_item) == 200 and set(per_item.values()) == {1}
        assert (
            session.scalar(
                select(func.count()).select_from(ReviewItem).where(ReviewItem.state != "done")
            )
            == 0
        )

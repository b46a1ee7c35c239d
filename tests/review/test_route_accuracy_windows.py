"""Route-accuracy windows in the database: recomputed from labels while open, frozen once
closed, and the new_failure_class alert's life (opened, updated, resolved, announced)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import pytest
from sqlalchemy import Engine, select

from controlplane.db import get_engine, in_transaction, session_scope
from controlplane.models import (
    Alert,
    OutboxEvent,
    ReviewItem,
    ReviewLabel,
    RouteAccuracyWindow,
    Task,
)
from controlplane.review.accuracy import refresh_route_accuracy
from controlplane.rollout.configs import apply_config

HOUR = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
LATENESS = 600
ids = count()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = get_engine(db_url)
    with session_scope(engine) as session:
        apply_config(
            session,
            {
                "task": "acc",
                "comparator": {"kind": "label"},
                "review": {
                    "route_acc_window_seconds": 3600,
                    "route_acc_lateness_seconds": LATENESS,
                },
            },
            actor="test",
        )
    yield engine


def add_item(
    engine: Engine,
    votes: list[tuple[str, str, str | None]],
    *,
    decision: str = "edge",
    p: float = 0.5,
    at: datetime = HOUR + timedelta(minutes=10),
    kind: str = "pair",
    state: str = "done",
    bucket: str = "0-127",
) -> None:
    """An item drawn with probability p and its labels (reviewer, resolved, class)."""
    n = next(ids)
    with session_scope(engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == "acc"))
        assert task_id is not None
        item = ReviewItem(
            task_id=task_id,
            request_id=f"r-{n}",
            result_ts=at,
            window_start=at,
            bucket=bucket,
            input_tokens=10,
            decision=decision,
            served="cloud",
            config_version=1,
            comparator="label",
            comparator_version=1,
            outcome="conflict",
            kind=kind,
            reason="conflict",
            layer="boundary",
            inclusion_probability=p,
            a_is_edge=True,
            policy="full",
            state=state,
            reviews_needed=len(votes) or 1,
        )
        session.add(item)
        session.flush()
        for reviewer, resolved, failure_class in votes:
            session.add(
                ReviewLabel(
                    item_id=item.id, task_id=task_id, reviewer=reviewer, verdict="x",
                    resolved=resolved, failure_class=failure_class,
                )
            )  # fmt: skip


def refresh(engine: Engine, now: datetime) -> list[tuple[str, str]]:
    task_id = in_transaction(engine, lambda s: s.scalar(select(Task.id).where(Task.name == "acc")))
    events = in_transaction(engine, lambda s: refresh_route_accuracy(s, task_id, now))
    return [(e.kind, e.change) for e in events]


def window(engine: Engine) -> dict[str, Any]:
    with session_scope(engine) as session:
        (row,) = session.scalars(select(RouteAccuracyWindow)).all()
        return {c: getattr(row, c) for c in ("n_labels", "n_unclear", "estimate", "closed_at", "failure_classes", "window_start", "window_end")}  # fmt: skip


def test_open_windows_follow_the_labels_then_freeze(engine: Engine) -> None:
    for _ in range(3):
        add_item(engine, [("ann", "edge_correct", None)])
    add_item(engine, [("ann", "cloud_correct", "amount")])
    # Not counted: two reviewers tied (unclear), an item still waiting for a reviewer, a
    # single answer whose class is still the task's.
    add_item(engine, [("ann", "edge_correct", None), ("bob", "cloud_correct", None)])
    add_item(engine, [("ann", "cloud_correct", None)], state="queued")
    add_item(engine, [("ann", "wrong", "format")], kind="single")

    assert refresh(engine, HOUR + timedelta(minutes=30)) == [("new_failure_class", "opened")]
    row = window(engine)
    assert (row["n_labels"], row["n_unclear"]) == (4, 1)
    assert row["estimate"] == pytest.approx(0.75) and row["closed_at"] is None
    assert row["window_end"] - row["window_start"] == timedelta(hours=1)
    assert row["failure_classes"] == pytest.approx({"amount": 0.25, "format": 0.0})
    with session_scope(engine) as session:
        (alert,) = session.scalars(select(Alert)).all()
        assert alert.kind == "new_failure_class" and alert.value == 2.0
        assert "amount, format" in alert.message

    # A label arrives while the window is open: recomputed, and a further new class updates
    # the open alert.
    add_item(engine, [("bob", "cloud_correct", "tone")], p=0.25)
    assert refresh(engine, HOUR + timedelta(minutes=50)) == [("new_failure_class", "updated")]
    row = window(engine)
    assert row["n_labels"] == 5 and row["estimate"] == pytest.approx(6 / 12)
    with session_scope(engine) as session:
        (alert,) = session.scalars(select(Alert)).all()
        # amount and format opened it, tone came later
        assert (alert.state, alert.value) == ("open", 3.0) and "tone" in alert.message
        assert alert.window_start == HOUR

    # The closing pass (end + lateness) computes it once more and closes it.
    closing = HOUR + timedelta(hours=1, seconds=LATENESS)
    assert refresh(engine, closing - timedelta(seconds=1)) == []
    assert window(engine)["closed_at"] is None
    assert refresh(engine, closing) == [("new_failure_class", "resolved")]
    frozen = window(engine)
    assert frozen["closed_at"] == closing

    # Late labels change nothing any more, and name no new class.
    add_item(engine, [("cid", "cloud_correct", "late_class")])
    assert refresh(engine, closing + timedelta(hours=1)) == []
    assert window(engine) == frozen

    with session_scope(engine) as session:
        announced = [
            e.document["action"]
            for e in session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))
            if e.kind == "alert"
        ]
    assert announced == ["alert_opened", "alert_updated", "alert_resolved"]


def test_a_class_is_new_once_per_task(engine: Engine) -> None:
    add_item(engine, [("ann", "cloud_correct", "amount")])
    assert refresh(engine, HOUR + timedelta(minutes=30)) == [("new_failure_class", "opened")]
    assert refresh(engine, HOUR + timedelta(minutes=31)) == []
    # The next hour names it again: known, nothing raised (the old alert resolves as its
    # window closes).
    add_item(engine, [("ann", "cloud_correct", "amount")], at=HOUR + timedelta(hours=1, minutes=5))
    assert refresh(engine, HOUR + timedelta(hours=2)) == [("new_failure_class", "resolved")]
    with session_scope(engine) as session:
        assert len(session.scalars(select(Alert)).all()) == 1


def test_only_buckets_the_edge_may_serve_count(engine: Engine) -> None:
    with session_scope(engine) as session:
        apply_config(
            session,
            {
                "task": "acc",
                "comparator": {"kind": "label"},
                "max_input_tokens": 100,
                "review": {
                    "route_acc_window_seconds": 3600,
                    "route_acc_lateness_seconds": LATENESS,
                },
            },
            actor="test",
        )
    add_item(engine, [("ann", "edge_correct", None)])
    # Over the cap the router decides cloud by rule: not judged, like every rule's cells.
    add_item(engine, [("ann", "edge_correct", "too_long")], decision="cloud", bucket="512-2047")
    refresh(engine, HOUR + timedelta(minutes=30))
    row = window(engine)
    assert row["n_labels"] == 1 and row["estimate"] == 1.0
    assert row["failure_classes"] == {"too_long": 0.0}


def test_a_rollbacks_census_of_its_windows_is_not_weighed_as_a_draw() -> None:
    # Two drawn pairs (edge right, decided edge: correct) at probability 0.5, and the
    # rollback's census of the same window: 3 pairs (edge wrong, decided edge) at the keep
    # probability 1. Weighed as draws, the census would pull the estimate to 2/5 weights
    # wrong; only the draws are a sample of the traffic.
    from controlplane.review.accuracy import Drawn, Vote, window_accuracy

    at = datetime(2026, 11, 30, tzinfo=UTC)

    def item(i: int, reason: str, p: float) -> Drawn:
        return Drawn(i, at, "0-127", "pair", "done", "edge", p, reason)

    items = [item(1, "agree", 0.5), item(2, "conflict", 0.5)]
    items += [item(i, "regression", 1.0) for i in (3, 4, 5)]
    verdict = {1: "both_correct", 2: "edge_correct", 3: "cloud_correct"}
    labels = {
        i: [Vote(i, "ann", verdict.get(i, "cloud_correct"), None, None, at)] for i in range(1, 6)
    }
    found = window_accuracy(items, labels)
    assert found.estimate == 1.0 and found.n_labels == 2

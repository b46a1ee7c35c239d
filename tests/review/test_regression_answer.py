"""A regression item whose labels give no usable expected answer (unclear, both wrong without
a correction, a verdict calling right an answer the comparator cannot accept) goes back to
the queue for another reviewer, at most two more than review.reviewers_per_item; the gate's
sentence and the queue's blind count say where it stands. Items of other layers are done
with their reviewers as before, and so are regression items no block waits on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.evalsets import service as evalsets
from controlplane.evalsets.gate import check_unblock
from controlplane.models import ReviewItem, Task
from controlplane.models.review import PRIORITY_BREACHING, PRIORITY_OTHER
from controlplane.models.rollout import BlockedModel
from controlplane.review import actions as review
from controlplane.review.queue import ANSWER_REVIEWERS
from tests.conftest import Api, make_api
from tests.review.queuedata import add_items, task_id

TASK = "ticket_classify"


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def regression_item(api: Api, **overrides: Any) -> int:
    """One regression item of the task (refund vs exchange) with small@3 blocked by a block
    naming no rollback: every regression item of the task counts."""
    values = {"layer": "regression", "reason": "regression", "priority": PRIORITY_BREACHING}
    [item] = add_items(api.engine, TASK, 1, **{**values, **overrides})
    with session_scope(api.engine) as session:
        session.add(BlockedModel(task_id=task_id(api.engine, TASK), model="small@3"))
    return item


def label(api: Api, reviewer: str, verdict: str, **extra: Any) -> dict[str, Any]:
    held = review.claim(api.engine, TASK, reviewer)
    assert held is not None
    return review.label(api.engine, held["id"], reviewer, verdict=verdict, **extra)


def gate(api: Api) -> str:
    with session_scope(api.engine) as session:
        evalsets.fill_waiting(session)
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        config = task_runtimes(session, {TASK})[TASK].config
        return check_unblock(session, task, config, "small@3") or ""


def blind_count(api: Api) -> dict[str, int]:
    [row] = review.queue_overview(api.engine, TASK)
    return row["regression"]


def test_another_reviewer_gives_the_answer_the_first_could_not(api: Api) -> None:
    item = regression_item(api)
    out = label(api, "rev-1", "unclear")
    assert (out["state"], out["reviews_needed"]) == ("queued", 2)
    # Not counted as labelled while it waits; the gate says why it waits.
    assert blind_count(api) == {"labelled": 0, "needed": 1}
    assert (
        "a valid correction on 1 item labelled without a usable expected answer (it is back "
        "in the queue for another reviewer)"
    ) in gate(api)
    assert review.claim(api.engine, TASK, "rev-1") is None  # they labelled it
    out = label(api, "rev-2", "both_wrong", corrected="inquiry")
    assert (out["item"], out["state"], out["reviews_needed"]) == (item, "done", 2)
    assert blind_count(api) == {"labelled": 1, "needed": 1}
    # In the set now: what is left is the run.
    assert "Unblocking small@3 still needs: a run of small@3" in gate(api)


def test_the_reviewers_asked_for_an_answer_are_bounded(api: Api) -> None:
    item = regression_item(api)
    # reviewers_per_item is 1: the first and ANSWER_REVIEWERS more.
    asked = [f"rev-{n}" for n in range(1 + ANSWER_REVIEWERS)]
    states = [label(api, reviewer, "both_wrong")["state"] for reviewer in asked]
    assert states == ["queued"] * ANSWER_REVIEWERS + ["done"]
    assert review.claim(api.engine, TASK, "rev-next") is None
    with session_scope(api.engine) as session:
        done = session.get(ReviewItem, item)
        assert done is not None and done.reviews_needed == 1 + ANSWER_REVIEWERS
    assert blind_count(api) == {"labelled": 1, "needed": 1}
    why = gate(api)
    assert (
        "a valid correction on 1 item labelled without a usable expected answer (no reviewer "
        "is offered it again: a reviewer who labelled it may correct their label with POST "
        "/v1/review/{id}/label, else only force lifts the block)"
    ) in why
    # One of them corrects their label (no lease needed): the item enters the set.
    review.label(api.engine, item, "rev-0", verdict="both_wrong", corrected="complaint")
    assert "a valid correction" not in gate(api)


def test_a_correction_that_takes_the_answer_away_reopens_the_item(api: Api) -> None:
    item = regression_item(api, a_is_edge=True)  # A reads refund, B exchange
    assert label(api, "rev-1", "a_correct")["state"] == "done"
    again = review.label(api.engine, item, "rev-1", verdict="unclear")
    assert (again["state"], again["reviews_needed"]) == ("queued", 2)
    assert review.claim(api.engine, TASK, "rev-2")["id"] == item


@pytest.mark.parametrize(
    ("layer", "priority"),
    [("boundary", PRIORITY_OTHER), ("anomaly", PRIORITY_OTHER), ("regression", PRIORITY_OTHER)],
    ids=["boundary", "anomaly", "regression-no-block-waits-on"],
)
def test_an_item_no_block_waits_on_is_done_with_its_one_reviewer(
    api: Api, layer: str, priority: int
) -> None:
    # A regression item of priority 2: its block was lifted, or its input is in the set.
    add_items(api.engine, TASK, 1, layer=layer, priority=priority)
    out = label(api, "rev-1", "unclear")
    assert (out["state"], out["reviews_needed"]) == ("done", 1)
    assert review.claim(api.engine, TASK, "rev-2") is None

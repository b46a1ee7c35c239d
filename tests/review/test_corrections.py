"""Corrections (a reviewer's newer label on an item they labelled): what they may change,
how often, and what they leave behind."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.models import ReviewItem, ReviewLabel
from controlplane.review import actions
from controlplane.review.accuracy import Drawn, Vote, window_accuracy
from controlplane.review.queue import MAX_CORRECTIONS
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, make_api
from tests.review.queuedata import T0, add_items


def test_only_each_reviewers_newest_vote_names_failure_classes() -> None:
    item = Drawn(1, T0, "128-511", "pair", "done", "edge", 0.5)
    labels = [
        Vote(i + 1, "rev1", "cloud_correct", f"spam{i}", None, T0 + timedelta(seconds=i))
        for i in range(5)
    ]
    labels.append(Vote(6, "rev1", "both_correct", None, None, T0 + timedelta(seconds=9)))
    labels.append(Vote(7, "rev2", "both_correct", "kept", None, T0 + timedelta(seconds=9)))
    found = window_accuracy([item], {1: labels})
    assert set(found.failure_classes) == {"kept"}


def _engine(url: str, **config: object) -> Engine:
    engine = get_engine(url)
    with session_scope(engine) as session:
        apply_config(session, {**TICKET_TASK, **config}, actor="test")
    return engine


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _claim(engine: Engine, reviewer: str, seconds: float) -> Any:
    return actions.claim(engine, "ticket_classify", reviewer, _at(seconds), lease_seconds=600.0)


def test_corrections_are_capped_per_reviewer_and_item(sqlite_url: str) -> None:
    engine = _engine(sqlite_url)
    (item,) = add_items(engine, "ticket_classify", 1)
    assert _claim(engine, "ann", 0)["id"] == item
    actions.label(engine, item, "ann", verdict="a_correct", now=_at(1))
    for n in range(MAX_CORRECTIONS):
        verdict = "b_correct" if n % 2 == 0 else "a_correct"
        actions.label(engine, item, "ann", verdict=verdict, now=_at(2 + n))
    with pytest.raises(ActionError) as refused:
        actions.label(engine, item, "ann", verdict="both_wrong", now=_at(10))
    assert refused.value.status == 409
    assert f"limit is {MAX_CORRECTIONS} corrections" in str(refused.value)
    with session_scope(engine) as session:
        stored = session.scalar(select(func.count()).select_from(ReviewLabel))
    assert stored == 1 + MAX_CORRECTIONS


def test_a_correction_that_makes_a_done_item_disagree_reopens_it_once(sqlite_url: str) -> None:
    engine = _engine(sqlite_url, review={"reviewers_per_item": 2})
    (item,) = add_items(engine, "ticket_classify", 1, reviews_needed=2)
    for n, reviewer in enumerate(("ann", "bob")):
        assert _claim(engine, reviewer, 10 * n)["id"] == item
        done = actions.label(engine, item, reviewer, verdict="a_correct", now=_at(10 * n + 1))
    assert done["state"] == "done"
    # ann alone turns the agreement into a disagreement: a third reviewer is needed.
    flipped = actions.label(engine, item, "ann", verdict="b_correct", now=_at(30))
    assert (flipped["state"], flipped["reviews_needed"]) == ("queued", 3)
    assert _claim(engine, "ann", 31) is None and _claim(engine, "bob", 32) is None
    assert _claim(engine, "cat", 33)["id"] == item
    closed = actions.label(engine, item, "cat", verdict="a_correct", now=_at(34))
    assert (closed["state"], closed["reviews_needed"]) == ("done", 3)
    # It had its extra reviewer: a further flip leaves it done.
    again = actions.label(engine, item, "bob", verdict="b_correct", now=_at(40))
    assert (again["state"], again["reviews_needed"]) == ("done", 3)
    with session_scope(engine) as session:
        row = session.get(ReviewItem, item)
        assert row is not None and row.state == "done"


REPLY = {
    **TICKET_TASK,
    "task": "reply_text",
    "comparator": {"kind": "text_conservation"},
    "payload_policy": "redacted",
}


def test_a_correction_written_against_the_view_is_stored_in_the_stored_numbering(
    sqlite_url: str,
) -> None:
    engine = get_engine(sqlite_url)
    with session_scope(engine) as session:
        apply_config(session, REPLY, actor="test")
    # The stored input numbers bob's address first; the view shows ann's first.
    (item,) = add_items(
        engine,
        "reply_text",
        1,
        policy="redacted",
        comparator="text_conservation",
        input={"text": "from <EMAIL_2>, cc <EMAIL_1>"},
        edge_output="Hello <EMAIL_2>.",
        cloud_output="Hello <EMAIL_1>.",
        diff=None,
        a_is_edge=True,
    )
    shown = actions.claim(engine, "reply_text", "ann", _at(0), lease_seconds=600.0)
    assert shown is not None and shown["input"] == {"text": "from <EMAIL_1>, cc <EMAIL_2>"}
    assert (shown["a"], shown["b"]) == ("Hello <EMAIL_1>.", "Hello <EMAIL_2>.")
    # The reviewer answers the sender as shown (<EMAIL_1>): stored, that is <EMAIL_2>.
    actions.label(
        engine,
        item,
        "ann",
        verdict="both_wrong",
        corrected="Dear <EMAIL_1>, cc <EMAIL_2>.",
        now=_at(1),
    )
    with session_scope(engine) as session:
        (stored,) = session.scalars(select(ReviewLabel.corrected))
    assert stored == "Dear <EMAIL_2>, cc <EMAIL_1>."
    # A placeholder the view never showed stands for no known value.
    with pytest.raises(ActionError) as refused:
        actions.label(
            engine, item, "ann", verdict="both_wrong", corrected="Dear <EMAIL_3>.", now=_at(2)
        )
    assert refused.value.status == 422 and "corrected: <EMAIL_3>" in str(refused.value)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_correction_holding_a_number_that_is_not_finite_is_refused(
    sqlite_url: str, number: str
) -> None:
    for api in make_api(sqlite_url):
        (item,) = add_items(api.engine, "ticket_classify", 1)
        headers = {**api.headers("review"), "Content-Type": "application/json"}
        assert api.client.get("/v1/review/next", headers=headers).json()["item"]["id"] == item
        for body in (
            f'{{"verdict": "both_wrong", "corrected": {number}}}',
            f'{{"verdict": "both_wrong", "corrected": {{"amount": [{number}]}}}}',
        ):
            answer = api.client.post(f"/v1/review/{item}/label", content=body, headers=headers)
            assert answer.status_code == 422, answer.text
            assert "corrected" in answer.text and "not finite" in answer.text
        with session_scope(api.engine) as session:
            assert session.scalar(select(func.count()).select_from(ReviewLabel)) == 0

"""The review page refuses a verdict that contradicts the task's comparator with the reason
in the buttons' words, keeps the item for another verdict, and stores the one that stands
(the eval set then expects the right answer)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.evalsets import service as evalsets
from controlplane.review.repository import item_labels
from tests.dashboard.conftest import Seeded, item_button, open_page, page_text, shown
from tests.review.queuedata import add_items

pytestmark = pytest.mark.integration

LABEL = {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]}


def held_item(seeded: Seeded, n: int, a: str, b: str) -> int:
    """A ticket_classify pair (A the edge's) whose lease the `review` key holds already, so
    the page shows it: of the items a reviewer holds the claim renews the oldest."""
    found = compare(LABEL, a, b)
    (item,) = add_items(
        seeded.engine,
        "ticket_classify",
        1,
        start=900_000 + n,
        a_is_edge=True,
        edge_output=a,
        cloud_output=b,
        outcome=found.outcome,
        diff=found.diff,
        claimed_by="review",
        lease_expires_at=datetime.now(UTC) + timedelta(hours=1),
    )
    return item


def verdicts(seeded: Seeded, item: int) -> list[str]:
    with session_scope(seeded.engine) as session:
        return [x.verdict for x in item_labels(session, item)]


def refusal(at: Any) -> str:
    assert not at.exception, at.exception
    assert len(at.error) == 1, [e.value for e in at.error]
    return shown(at.error[0].value)


def test_a_verdict_the_comparator_contradicts_is_refused_on_the_page(seeded: Seeded) -> None:
    different = held_item(seeded, 1, "inquiry", "refund")
    same = held_item(seeded, 2, "refund", "refund")
    at = open_page(seeded, "review", "app_pages/review.py")
    assert at.session_state["review_item"]["id"] == different

    # "Both right" on two different labels: refused with why, the item stays.
    item_button(at, "verdict-both_correct").click().run()
    said = refusal(at)
    assert said.startswith("Not stored: “Both right” calls A and B right, but they are different")
    assert 'A reads "inquiry", B "refund"' in said
    assert "choose “A is right”, “B is right” or “Both wrong”" in said
    assert at.session_state["review_item"]["id"] == different
    assert verdicts(seeded, different) == []
    # "A is right" stands, and the next item comes.
    item_button(at, "verdict-a_correct").click().run()
    assert not at.error and verdicts(seeded, different) == ["a_correct"]
    assert f"Item {different} labelled a_correct." in page_text(at)
    assert at.session_state["review_item"]["id"] == same

    # "A is right" on two identical answers: refused; "Both right" stands.
    item_button(at, "verdict-a_correct").click().run()
    said = refusal(at)
    assert said.startswith("Not stored: “A is right” calls only A right, but A and B are the same")
    assert 'both read "refund"' in said and "choose “Both right” or “Both wrong”" in said
    assert verdicts(seeded, same) == []
    item_button(at, "verdict-both_correct").click().run()
    assert not at.error and verdicts(seeded, same) == ["both_correct"]

    # The eval set expects what the verdicts that stood name right.
    with session_scope(seeded.engine) as session:
        evalsets.backfill(session, task="ticket_classify")
        task = evalsets.task_named(session, "ticket_classify")
        lines = evalsets.layer_lines(session, task, "boundary")
    expected = {line["input"]["text"]: line["expected"] for line in lines}
    assert expected["please help with order 900001"] == "inquiry"
    assert expected["please help with order 900002"] == "refund"

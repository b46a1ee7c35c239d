"""The review page's frame around the item: an admin's page claims nothing until Start
reviewing; the task's guidelines above the item; today's counts named for the task they
count; the session's and the regression set's progress bars."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from streamlit.testing.v1 import AppTest

from controlplane.db import session_scope
from controlplane.evalsets import gate
from controlplane.models import ReviewItem
from controlplane.review import actions
from controlplane.rollout.configs import apply_tasks
from controlplane.sim.evalset_example import CONFIGS
from tests.dashboard.conftest import Seeded, item_button, open_page, page_text, shown

pytestmark = pytest.mark.integration

PAGE = "app_pages/review.py"
GUIDELINES = (
    "**refund**: they want their money back.\n\n![the refund form](https://example.com/form.png)"
)


def claimed(seeded: Seeded) -> int:
    with session_scope(seeded.engine) as session:
        return session.scalar(
            select(func.count()).select_from(ReviewItem).where(ReviewItem.claimed_by.is_not(None))
        )


def progress_bars(at: AppTest) -> list[tuple[float, str]]:
    """The page's progress bars: (value as a share, text as shown)."""
    return [(bar.proto.value / 100, shown(bar.proto.text)) for bar in at.get("progress")]


def queued(task: str | None = None, seeded: Seeded | None = None) -> int:
    assert seeded is not None
    return sum(
        row["queued"]
        for row in actions.queue_overview(seeded.engine)
        if row["has_queue"] and task in (None, row["task"])
    )


def test_an_admin_opening_the_page_claims_nothing_until_start_reviewing(seeded: Seeded) -> None:
    assert claimed(seeded) == 0
    at = open_page(seeded, "admin", PAGE)
    assert not at.exception
    assert "review_item" not in at.session_state
    assert claimed(seeded) == 0
    assert "Opening this page claims nothing" in page_text(at)
    # Picking a task claims nothing either.
    at.selectbox(key="review_task").select("ticket_classify").run()
    assert claimed(seeded) == 0 and "review_item" not in at.session_state
    start = at.button(key="review_start")
    assert start.proto.label == "Start reviewing"
    start.click().run()
    assert not at.exception
    item = at.session_state["review_item"]
    assert item["task"] == "ticket_classify"
    with session_scope(seeded.engine) as session:
        assert session.get(ReviewItem, item["id"]).claimed_by == "admin"
    assert claimed(seeded) == 1


def test_the_guidelines_counts_and_session_bar_of_the_task_picked(seeded: Seeded) -> None:
    """The task's guidelines sit above the item (open until one of its items is labelled
    today, an image written out, not fetched); the counts and the session bar name the
    task they count; the session bar reads the labels given since it started against the
    items queued then."""
    config: dict[str, Any] = {**CONFIGS[0], "review": {**CONFIGS[0]["review"]}}
    config["review"]["guidelines"] = GUIDELINES
    apply_tasks(seeded.engine, [config], actor="test")
    at = open_page(seeded, "admin", PAGE)
    at.selectbox(key="review_task").select("ticket_classify").run()
    at.button(key="review_start").click().run()
    assert at.session_state["review_item"]["task"] == "ticket_classify"
    # The session began as Start was pressed, with the task's queue then.
    waiting = queued("ticket_classify", seeded) + 1  # and the one the page holds now

    guide = at.expander[0]
    assert guide.label == "Guidelines for ticket_classify" and guide.proto.expanded
    said = " ".join(m.value for m in guide.markdown)
    assert "**refund**: they want their money back." in said
    assert "![" not in said and "the refund form (image not shown: https" in said
    order = [getattr(e, "value", getattr(e, "label", None)) for e in at.main]
    assert order.index("Guidelines for ticket_classify") < order.index("**Input**")

    for _ in range(2):
        item_button(at, "verdict-unclear").click().run()
        assert not at.exception
    text = page_text(at)
    assert "Today (UTC), in ticket_classify: you labelled **2** items" in text
    session = [(v, t) for v, t in progress_bars(at) if t.startswith("This session")]
    assert len(session) == 1
    value, words = session[0]
    assert f": 2 labelled of the {waiting} items queued in ticket_classify when it started" in (
        words
    )
    assert value == pytest.approx(2 / waiting, abs=0.01)
    # Labelled today: the guidelines are one click away now.
    assert not at.expander[0].proto.expanded

    at.selectbox(key="review_task").select("any task").run()
    assert "Today (UTC), in all tasks: you labelled **2** items" in page_text(at)


def test_the_regression_set_bar_counts_and_names_no_model(seeded: Seeded) -> None:
    """The seed's rollback blocked ticket_classify's edge model: a review key's page shows
    its regression set, labelled of needed, and no model."""
    with session_scope(seeded.engine) as session:
        counts = gate.blind_progress(session)
    assert [row["task"] for row in counts] == ["ticket_classify"]
    at = open_page(seeded, "review", PAGE)
    assert not at.exception
    bars = [(v, t) for v, t in progress_bars(at) if t.startswith("Regression set")]
    row = counts[0]
    labelled, needed = int(str(row["labelled"])), int(str(row["needed"]))
    assert bars == [
        (
            pytest.approx(labelled / needed, abs=0.01),
            f"Regression set of ticket_classify: {labelled} of {needed} labelled",
        )
    ]
    assert not any("@" in t for _, t in progress_bars(at))

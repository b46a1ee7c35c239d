"""A hostile review of c6b756c (the Review page: every button that acts on an item keyed
by the item's id; "Change item N's verdict", U, to correct the last verdict) by a fast,
error-prone reviewer: double and triple presses in a real headless Chromium against a real
`shadowplane dashboard`, and the change view's edges through Streamlit's AppTest.

Defect, a strict xfail until it was fixed (now a plain test): the change view showed the
item "as it was seen" but with its optional fields empty: the failure class and note the
reviewer typed with the verdict were gone, and pressing the right verdict stored a
correction without them (the reviewer's vote lost them, silently).

A race seen in Chromium (not kept as a test: it does not happen on every run, and a test
that cannot fail proves nothing): keys sent
back to back ("555", "5555", ActionChains' speed) labelled, in 1 run of 6, an item whose
heading was never read on the screen before the keys were sent (item 18 'unclear'); in 2
runs of 6, after U and "44" (the correction stored once, the held item unlabelled) the
page was left showing the changed item rather than the item held.

Held: a second press sent from the change view, or from the item just labelled, stores
nothing more; the held item's typed fields survive the change view (AppTest); a correction
the comparator contradicts is refused with the change view kept and K going back; U once
nothing is left for the reviewer; a correction while another reviewer took the held item
(said, nothing labelled unseen); the change view shows A and B as the first view did."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from streamlit.testing.v1 import AppTest

from controlplane.db import session_scope
from controlplane.models import ReviewItem
from controlplane.review import actions
from controlplane.review.repository import item_labels
from tests.dashboard.conftest import (  # noqa: F401  (pg_seed, seeded: fixtures)
    Seeded,
    item_button,
    label_first_unclear,
    open_page,
    page_text,
    pg_seed,
    seeded,
    shown,
)
from tests.dashboard.test_review_verdicts import held_item

pytestmark = pytest.mark.integration

PAGE = "app_pages/review.py"


def review_page(
    seeded: Seeded,  # noqa: F811
) -> AppTest:
    at = open_page(seeded, "review", PAGE)
    assert not at.exception, at.exception
    return at


def held(at: AppTest) -> dict[str, Any]:
    return dict(at.session_state["review_item"])


def labels_of(data: Seeded, item_id: int, reviewer: str = "review") -> list[Any]:
    with session_scope(data.engine) as session:
        return [
            (x.verdict, x.failure_class, x.corrected, x.note)
            for x in item_labels(session, item_id)
            if x.reviewer == reviewer
        ]


def change_last(at: AppTest) -> None:
    at.button(key="review_change_last").click().run()
    assert not at.exception, at.exception


def labelled_unclear(data: Seeded) -> tuple[AppTest, dict[str, Any], dict[str, Any]]:
    """The page after its first item was labelled Unclear: the page, that item, the next."""
    at = review_page(data)
    first, following = label_first_unclear(at)
    return at, first, following


def subheading(at: AppTest) -> str:
    return " ".join(str(s.value) for s in at.subheader)


def item_view(at: AppTest) -> list[str]:
    """What the page shows of the item itself: every markdown from the input on."""
    texts = [str(m.value) for m in at.markdown]
    start = texts.index("**Input**")
    return texts[start:]


def test_the_change_view_keeps_the_fields_given_with_the_verdict(
    seeded: Seeded,  # noqa: F811
) -> None:
    at = review_page(seeded)
    first = held(at)
    assert first["kind"] == "pair"
    # Typed a failure class and a note, meant "Both wrong" (4), pressed "Unclear" (5).
    at.text_input(key=f"fc-{first['id']}").input("wrong_label")
    at.text_input(key=f"note-{first['id']}").input("asks for money back")
    item_button(at, "verdict-unclear").click().run()
    assert labels_of(seeded, first["id"]) == [
        ("unclear", "wrong_label", None, "asks for money back")
    ]
    change_last(at)
    assert subheading(at).startswith(f"Item {first['id']} ·")
    fields = {t.key: t.value for t in at.text_input}
    # "As it was seen": what the reviewer typed with the verdict is there again.
    assert fields.get(f"fix-fc-{first['id']}") == "wrong_label", fields
    assert fields.get(f"fix-note-{first['id']}") == "asks for money back", fields
    item_button(at, "fix-verdict-both_wrong").click().run()
    assert not at.exception
    assert labels_of(seeded, first["id"])[-1] == (
        "both_wrong",
        "wrong_label",
        None,
        "asks for money back",
    )


def test_the_item_held_comes_back_with_what_was_typed_on_it(
    seeded: Seeded,  # noqa: F811
) -> None:
    at, first, following = labelled_unclear(seeded)
    # The reviewer starts on the next item, then remembers the first was wrong.
    at.text_input(key=f"fc-{following['id']}").input("wrong_label")
    at.text_input(key=f"note-{following['id']}").input("half written note")
    at.text_input(key=f"skip-reason-{following['id']}").input("cannot read it")
    change_last(at)
    at.button(key="review_keep_last").click().run()
    assert not at.exception
    assert held(at)["id"] == following["id"]
    fields = {t.key: t.value for t in at.text_input}
    assert fields.get(f"fc-{following['id']}") == "wrong_label", fields
    assert fields.get(f"note-{following['id']}") == "half written note", fields
    assert fields.get(f"skip-reason-{following['id']}") == "cannot read it", fields
    item_button(at, "verdict-both_wrong").click().run()
    assert labels_of(seeded, following["id"]) == [
        ("both_wrong", "wrong_label", None, "half written note")
    ]


def test_a_change_pressed_twice_stores_one_correction_and_leaves_the_held_item(
    seeded: Seeded,  # noqa: F811
) -> None:
    at, first, following = labelled_unclear(seeded)
    change_last(at)
    # U pressed twice: the second U, sent from the change view, finds no such button.
    at.button(key="review_keep_last")  # the change view is up
    assert not [b for b in at.button if b.key == "review_change_last"]
    stale = item_button(at, "fix-verdict-both_wrong")
    stale.click().run()
    assert not at.exception
    assert [x[0] for x in labels_of(seeded, first["id"])] == ["unclear", "both_wrong"]
    assert held(at)["id"] == following["id"]
    # The digit's second press, sent from the change view (its fields as they were).
    for field in stale.root.text_input:
        field.set_value("")
    stale.click().run()
    assert not at.exception
    assert [x[0] for x in labels_of(seeded, first["id"])] == ["unclear", "both_wrong"]
    assert labels_of(seeded, following["id"]) == []
    assert held(at)["id"] == following["id"]
    assert subheading(at).startswith(f"Item {following['id']} ·")


def test_the_change_view_shows_a_and_b_as_the_first_view_did(
    seeded: Seeded,  # noqa: F811
) -> None:
    at = review_page(seeded)
    first = held(at)
    before = item_view(at)
    item_button(at, "verdict-unclear").click().run()
    change_last(at)
    assert subheading(at).startswith(f"Item {first['id']} ·")
    assert item_view(at) == before
    assert not re.search(r"\b(edge|cloud)\b", page_text(at), re.IGNORECASE)


def test_a_correction_the_comparator_contradicts_is_refused_and_the_view_stays(
    seeded: Seeded,  # noqa: F811
) -> None:
    different = held_item(seeded, 1, "inquiry", "refund")
    at = review_page(seeded)
    assert held(at)["id"] == different
    item_button(at, "verdict-a_correct").click().run()
    following = held(at)
    assert following["id"] != different
    change_last(at)
    item_button(at, "fix-verdict-both_correct").click().run()
    assert not at.exception
    [error] = at.error
    assert shown(error.value).startswith("Not stored: “Both right” calls A and B right")
    assert subheading(at).startswith(f"Item {different} ·")
    assert [x[0] for x in labels_of(seeded, different)] == ["a_correct"]
    # Another verdict, refused again, then kept as it is: the held item comes back.
    item_button(at, "fix-verdict-both_correct").click().run()
    assert len(at.error) == 1
    at.button(key="review_keep_last").click().run()
    assert not at.exception and not at.error
    assert held(at)["id"] == following["id"]
    assert [x[0] for x in labels_of(seeded, different)] == ["a_correct"]
    assert labels_of(seeded, following["id"]) == []


def test_a_change_once_nothing_is_left_to_review(
    seeded: Seeded,  # noqa: F811
) -> None:
    at = review_page(seeded)
    first = held(at)
    item_button(at, "verdict-unclear").click().run()
    # Everything else is skipped elsewhere (the reviewer's other window).
    while (item := actions.claim(seeded.engine, None, "review")) is not None:
        actions.release(seeded.engine, item["id"], "review", skip=True, reason="elsewhere")
    at.run()
    assert "Nothing left for you to review" in page_text(at)
    change_last(at)
    assert subheading(at).startswith(f"Item {first['id']} ·")
    item_button(at, "fix-verdict-both_wrong").click().run()
    assert not at.exception
    assert [x[0] for x in labels_of(seeded, first["id"])] == ["unclear", "both_wrong"]
    assert "Nothing left for you to review" in page_text(at)
    assert "now “Both wrong”" in shown(at.success[0].value)


def test_a_change_while_another_reviewer_took_the_held_item(
    seeded: Seeded,  # noqa: F811
) -> None:
    at, first, following = labelled_unclear(seeded)
    change_last(at)
    # The held item's lease runs out while the change view is open, and another reviewer
    # takes it.
    later = datetime.now(UTC) + timedelta(minutes=10)
    with session_scope(seeded.engine) as session:
        session.execute(
            update(ReviewItem)
            .where(ReviewItem.id == following["id"])
            .values(claimed_by="reviewer2", lease_expires_at=later)
        )
    item_button(at, "fix-verdict-both_wrong").click().run()
    assert not at.exception
    assert [x[0] for x in labels_of(seeded, first["id"])] == ["unclear", "both_wrong"]
    warning = shown(at.warning[0].value)
    assert f"lease on item {following['id']} ended" in warning, warning
    # ... and the correction it stored is confirmed above that warning (the slot for a
    # message held one, and the warning took it).
    successes = [shown(str(s.value)) for s in at.success]
    assert any("now “Both wrong”" in s for s in successes), (successes, warning)
    now_held = held(at)
    assert now_held["id"] not in (first["id"], following["id"])
    assert labels_of(seeded, following["id"]) == []
    assert labels_of(seeded, now_held["id"]) == []

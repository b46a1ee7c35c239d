"""The review page: blind items claimed one at a time, labelled with a key press, stored
with the reviewer's key name; skip, give back, the progress line, and the empty states
(queue empty, a task that keeps no text, a lease lost)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from controlplane.audit.service import entries
from controlplane.db import session_scope
from controlplane.evalsets import service as evalsets
from controlplane.models import ReviewItem
from controlplane.review import actions
from controlplane.review.labels import PAIR_VERDICTS
from controlplane.review.progress import reviewer_progress
from controlplane.review.queue import MAX_CORRECTIONS
from controlplane.review.repository import item_labels
from controlplane.rollout.configs import apply_tasks
from controlplane.settings import get_settings
from controlplane.sim.evalset_example import CONFIGS
from shadowplane_dashboard import reviewing
from shadowplane_dashboard.common import SESSION_TOKEN
from tests.dashboard.conftest import (
    APP,
    Seeded,
    item_button,
    label_first_unclear,
    open_page,
    page_text,
    session_of,
    shown,
)

pytestmark = pytest.mark.integration

PAGE = "app_pages/review.py"
SIDES = re.compile(r"\b(edge|cloud)\b", re.IGNORECASE)


def review_page(seeded: Seeded, key: str = "review") -> AppTest:
    at = open_page(seeded, key, PAGE)
    assert not at.exception, at.exception
    return at


def held(at: AppTest) -> dict[str, Any]:
    return at.session_state["review_item"]


def model_names(seeded: Seeded) -> set[str]:
    """The model versions of the seeded results, as the eval sets' provenance keeps them."""
    names: set[str] = set()
    with session_scope(seeded.engine) as session:
        for row in evalsets.sets(session)["sets"]:
            task = evalsets.task_named(session, row["task"])
            for line in evalsets.layer_lines(session, task, row["layer"]):
                p = line["provenance"]
                names |= {p["edge_model"], p["cloud_model"]} - {None}
    assert names, "the seed names no models"
    return names


def labels_of(seeded: Seeded, item_id: int) -> list[Any]:
    with session_scope(seeded.engine) as session:
        return [
            (x.reviewer, x.verdict, x.failure_class, x.corrected, x.note)
            for x in item_labels(session, item_id)
        ]


def audit(seeded: Seeded, action: str) -> list[dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return [
            dict(e.details or {}) for e in entries(session, actor="review") if e.action == action
        ]


def test_the_next_item_shows_its_input_and_answers_as_a_and_b(seeded: Seeded) -> None:
    at = review_page(seeded)
    item = held(at)
    # A claim by the same reviewer answers the item they hold: the page's blind view.
    again = actions.claim(seeded.engine, None, "review")
    assert again is not None and again["id"] == item["id"]
    text = page_text(at)
    assert f"Item {item['id']} · {item['task']}" in text
    shown = [m.value for m in at.markdown]
    for value in (again["input"], again["a"], again["b"]):
        words = reviewing.as_text(value).split()
        assert any(all(reviewing.escape(w) in m for w in words) for m in shown), value
    with session_scope(seeded.engine) as session:
        assert session.get(ReviewItem, item["id"]).claimed_by == "review"
    # Every verdict has its key: 1-5 in the order shown.
    keys = [item_button(at, f"verdict-{v}").proto.shortcut for v in PAIR_VERDICTS]
    assert keys == ["1", "2", "3", "4", "5"]


def test_the_diff_is_highlighted_in_a_and_b_terms() -> None:
    diff = {
        "failed": ["numbers", "spans"],
        "numbers": {"a": ["12", "30"], "b": ["13", "30"], "only_in_a": ["12"], "only_in_b": ["13"]},
        "spans": {"a": ["Berlin"], "b": [], "only_in_a": ["Berlin"], "only_in_b": []},
    }
    item = {"a": "Paid 12 of 30 in Berlin (112 left).", "b": "Paid 13 of 30.", "diff": diff}
    a = reviewing.highlighted(item["a"], reviewing.marks(item, "a"))
    assert a == (
        "Paid :orange-background[12] of 30 in :orange-background[Berlin] \\(112 left\\)\\."
    )
    assert reviewing.differences(diff) == [
        "numbers only in A: 12; only in B: 13",
        "spans only in A: Berlin; only in B: none",
    ]
    assert reviewing.corrected_value(" refund ") == "refund"
    assert reviewing.corrected_value('{"amount": 1}') == {"amount": 1}
    assert reviewing.corrected_value("") is None
    with pytest.raises(ValueError, match="corrected: not valid JSON"):
        reviewing.corrected_value("[1,")


def test_nothing_on_the_page_names_a_side_or_a_model_over_many_items(seeded: Seeded) -> None:
    models = model_names(seeded)
    at = review_page(seeded)
    seen = set()
    for _ in range(8):
        item = held(at)
        seen.add(item["id"])
        text = page_text(at)
        assert f"Item {item['id']}" in text
        assert not SIDES.search(text), SIDES.search(text)
        assert not [m for m in models if m in text or reviewing.escape(m) in text]
        item_button(at, "verdict-unclear").click().run()
        assert not at.exception
    assert len(seen) == 8


def test_a_verdict_key_labels_the_item_as_the_reviewer_and_the_next_comes_at_once(
    seeded: Seeded,
) -> None:
    at = review_page(seeded)
    item = held(at)
    assert item["kind"] == "pair"
    at.text_input(key=f"fc-{item['id']}").input("wrong_label")
    at.text_input(key=f"note-{item['id']}").input("the ticket asks for money back")
    button = item_button(at, "verdict-a_correct")
    assert button.proto.shortcut == "1"
    button.click().run()
    assert not at.exception
    assert labels_of(seeded, item["id"]) == [
        ("review", "a_correct", "wrong_label", None, "the ticket asks for money back")
    ]
    [entry] = audit(seeded, "review.label")
    assert entry["item"] == item["id"] and entry["verdict"] == "a_correct"
    # The next item is on the page already, without another click.
    following = held(at)
    assert following["id"] != item["id"]
    assert f"Item {following['id']}" in page_text(at)
    assert f"Item {item['id']} labelled a_correct." in page_text(at)


def test_the_progress_line_counts_todays_labels_and_the_queue(seeded: Seeded) -> None:
    at = review_page(seeded)
    for _ in range(2):
        item_button(at, "verdict-both_wrong").click().run()
    from datetime import UTC, datetime

    with session_scope(seeded.engine) as session:
        mine = sum(r["mine_today"] for r in reviewer_progress(session, "review", datetime.now(UTC)))
    queue = actions.queue_overview(seeded.engine)
    assert mine == 2
    text = page_text(at)
    everyone = sum(r["labelled_today"] for r in queue)
    assert f"in all tasks: you labelled **{mine}** items, everyone **{everyone}**" in text
    assert f"left in queue: **{sum(r['queued'] for r in queue)}**" in text
    # No item of the seed has two reviewers: agreement says so instead of a number.
    assert "none yet (no item has two reviewers" in text.replace("\\", "")


def test_a_wrong_verdict_with_the_corrected_answer(seeded: Seeded) -> None:
    at = review_page(seeded)
    at.selectbox(key="review_task").select("ticket_classify").run()
    item = held(at)
    assert item["task"] == "ticket_classify"
    with session_scope(seeded.engine) as session:
        spec = evalsets.comparator_spec(session, evalsets.task_named(session, "ticket_classify"))
    right = spec["labels"][-1]
    at.text_input(key=f"corr-{item['id']}").input(right)
    item_button(at, "verdict-both_wrong").click().run()
    assert not at.exception
    assert labels_of(seeded, item["id"]) == [("review", "both_wrong", None, right, None)]


def test_a_corrected_answer_the_task_refuses_is_a_sentence_and_the_item_stays(
    seeded: Seeded,
) -> None:
    at = review_page(seeded)
    at.selectbox(key="review_task").select("ticket_classify").run()
    item = held(at)
    at.text_input(key=f"corr-{item['id']}").input('{"broken": ')
    item_button(at, "verdict-both_wrong").click().run()
    assert "corrected: not valid JSON" in shown(at.error[0].value)
    at.text_input(key=f"corr-{item['id']}").input("not-a-label")
    item_button(at, "verdict-both_wrong").click().run()
    assert not at.exception
    assert "corrected" in shown(at.error[0].value)
    assert held(at)["id"] == item["id"]
    assert labels_of(seeded, item["id"]) == []


def test_skip_with_a_reason_and_the_item_is_not_offered_again(seeded: Seeded) -> None:
    at = review_page(seeded)
    item = held(at)
    at.text_input(key=f"skip-reason-{item['id']}").input("cannot read the scan")
    button = item_button(at, "review_skip")
    assert button.proto.shortcut.upper() == "S"
    button.click().run()
    assert not at.exception
    [entry] = audit(seeded, "review.skip")
    assert entry == {"item": item["id"], "reason": "cannot read the scan"}
    assert held(at)["id"] != item["id"]
    assert labels_of(seeded, item["id"]) == []


def test_give_back_releases_the_item_and_waits_for_the_next_key(seeded: Seeded) -> None:
    at = review_page(seeded)
    item = held(at)
    item_button(at, "review_release").click().run()
    assert not at.exception
    [entry] = audit(seeded, "review.release")
    assert entry["item"] == item["id"]
    with session_scope(seeded.engine) as session:
        assert session.get(ReviewItem, item["id"]).claimed_by is None
    assert "review_item" not in at.session_state
    assert "given back" in page_text(at)
    at.button(key="review_next").click().run()
    assert not at.exception
    assert "review_item" in at.session_state


def test_a_rerun_keeps_the_item_it_holds(seeded: Seeded) -> None:
    at = review_page(seeded)
    item = held(at)
    at.run()
    at.run()
    assert held(at)["id"] == item["id"]
    with session_scope(seeded.engine) as session:
        claimed = session.query(ReviewItem).filter(ReviewItem.claimed_by == "review").all()
    assert [x.id for x in claimed] == [item["id"]]


def test_a_lost_lease_says_so_and_brings_the_next_item(seeded: Seeded) -> None:
    at = review_page(seeded)
    item = held(at)
    # The lease ends elsewhere (it expired, or the reviewer's other window gave it back).
    actions.release(seeded.engine, item["id"], "review", skip=True, reason="elsewhere")
    item_button(at, "verdict-a_correct").click().run()
    assert not at.exception
    warning = shown(at.warning[0].value)
    assert "lease on item" in warning and "that label was not stored" in warning
    assert labels_of(seeded, item["id"]) == []
    assert held(at)["id"] != item["id"]


def test_a_press_on_an_item_labelled_already_says_so_and_labels_nothing_else(
    seeded: Seeded,
) -> None:
    """The page still holds an item its reviewer has labelled (their first press labelled
    it, and the second press came before the page let go of it): the second press is said
    to be one, not a lost lease, and nothing more is stored."""
    at = review_page(seeded)
    item = held(at)
    actions.label(seeded.engine, item["id"], "review", verdict="unclear")
    item_button(at, "verdict-both_wrong").click().run()
    assert not at.exception
    warning = shown(at.warning[0].value)
    assert f"You labelled item {item['id']} already" in warning, warning
    assert "that second label was not stored" in warning
    assert [x[1] for x in labels_of(seeded, item["id"])] == ["unclear"]
    following = held(at)
    assert following["id"] != item["id"]
    assert labels_of(seeded, following["id"]) == []


def change_last(at: AppTest) -> None:
    at.button(key="review_change_last").click().run()
    assert not at.exception


def labelled_unclear(seeded: Seeded) -> tuple[AppTest, dict[str, Any], dict[str, Any]]:
    """The page after its first item was labelled Unclear: the page, that item, the next."""
    at = review_page(seeded)
    first, following = label_first_unclear(at)
    return at, first, following


def test_the_last_verdict_is_shown_again_and_kept_or_changed_while_the_next_item_waits(
    seeded: Seeded,
) -> None:
    at, first, following = labelled_unclear(seeded)
    offer = at.button(key="review_change_last")
    assert f"item {first['id']}" in offer.label and "Unclear" in offer.label
    assert offer.proto.shortcut.upper() == "U"
    # Shown again, then kept as it is: the item held comes back, nothing more stored.
    change_last(at)
    assert str(at.subheader[0].value).startswith(f"Item {first['id']} ·")
    assert not [b for b in at.button if (b.key or "").startswith(("verdict-", "review_skip"))]
    at.button(key="review_keep_last").click().run()
    assert not at.exception
    assert held(at)["id"] == following["id"]
    assert str(at.subheader[0].value).startswith(f"Item {following['id']} ·")
    assert [x[1] for x in labels_of(seeded, first["id"])] == ["unclear"]
    # Shown again and changed: the newer label is the reviewer's vote, audited as a
    # correction, and the item held is shown again, untouched.
    change_last(at)
    item_button(at, "fix-verdict-both_wrong").click().run()
    assert not at.exception
    assert [x[1] for x in labels_of(seeded, first["id"])] == ["unclear", "both_wrong"]
    corrections = [
        (e["item"], e["verdict"], e["correction"]) for e in audit(seeded, "review.label")
    ]
    assert (first["id"], "both_wrong", True) in corrections
    assert (first["id"], "unclear", False) in corrections
    assert "now “Both wrong” (it was “Unclear”)" in shown(at.success[0].value)
    assert held(at)["id"] == following["id"]
    assert labels_of(seeded, following["id"]) == []
    assert "Both wrong" in at.button(key="review_change_last").label


def test_a_change_past_the_limit_is_refused_on_the_page_and_the_item_held_stays(
    seeded: Seeded,
) -> None:
    at, first, following = labelled_unclear(seeded)
    verdicts = ["both_wrong", "unclear", "both_wrong", "unclear"]
    for n, verdict in enumerate(verdicts):
        change_last(at)
        item_button(at, f"fix-verdict-{verdict}").click().run()
        assert not at.exception
        if n < MAX_CORRECTIONS:
            continue
        # The server's refusal, said; still shown again, the item held untouched.
        assert "corrected your label" in shown(at.error[0].value)
        assert str(at.subheader[0].value).startswith(f"Item {first['id']} ·")
    assert [x[1] for x in labels_of(seeded, first["id"])] == [
        "unclear",
        *verdicts[:MAX_CORRECTIONS],
    ]
    at.button(key="review_keep_last").click().run()
    assert held(at)["id"] == following["id"]


def time_passes(seeded: Seeded, seconds: float) -> None:
    """`seconds` pass for the review leases: every lease held ends that much sooner (the
    page reads the real clock, so the leases move instead)."""
    with session_scope(seeded.engine) as session:
        held = session.query(ReviewItem).filter(ReviewItem.lease_expires_at.is_not(None))
        for item in held.all():
            item.lease_expires_at -= timedelta(seconds=seconds)


def lease_of(seeded: Seeded, item_id: int) -> tuple[str | None, bool]:
    """Who holds the item's lease, and whether it is unexpired now."""
    with session_scope(seeded.engine) as session:
        item = session.get(ReviewItem, item_id)
        assert item is not None
        expires = item.lease_expires_at
        return item.claimed_by, expires is not None and expires > datetime.now(UTC)


def test_the_item_held_stays_yours_while_the_change_view_is_open_past_a_lease(
    seeded: Seeded,
) -> None:
    """The change view renews the lease of the item held on each run, as the item's own
    view does: more than a lease spent changing the last verdict loses nothing."""
    at, first, following = labelled_unclear(seeded)
    lease = get_settings().review_lease_seconds
    change_last(at)
    # Most of a lease goes by in the change view; the reviewer types a note there (the
    # page is drawn again), and as much time goes by again.
    time_passes(seeded, 0.6 * lease)
    at.text_input(key=f"fix-note-{first['id']}").input("meant both wrong").run()
    assert not at.exception
    time_passes(seeded, 0.6 * lease)
    assert lease_of(seeded, following["id"]) == ("review", True)
    # Another reviewer works through the queue meanwhile: never handed the item held.
    while (other := actions.claim(seeded.engine, None, "reviewer2")) is not None:
        assert other["id"] != following["id"]
        actions.release(seeded.engine, other["id"], "reviewer2", skip=True, reason="later")
    # The verdict changed, the held item comes back, and its label is taken.
    item_button(at, "fix-verdict-both_wrong").click().run()
    assert not at.exception and not at.warning
    assert [x[1] for x in labels_of(seeded, first["id"])] == ["unclear", "both_wrong"]
    assert held(at)["id"] == following["id"]
    item_button(at, "verdict-unclear").click().run()
    assert not at.exception and not at.warning
    assert [x[:2] for x in labels_of(seeded, following["id"])] == [("review", "unclear")]


def test_a_held_item_lost_while_the_change_view_is_open_is_said_there(seeded: Seeded) -> None:
    at, first, following = labelled_unclear(seeded)
    change_last(at)
    # The held item's lease ran out and another reviewer took it.
    with session_scope(seeded.engine) as session:
        taken = session.get(ReviewItem, following["id"])
        assert taken is not None
        taken.claimed_by = "reviewer2"
    at.text_input(key=f"fix-note-{first['id']}").input("meant both wrong").run()
    assert not at.exception
    warning = shown(at.warning[0].value)
    assert f"lease on item {following['id']} ended" in warning, warning
    # Still the change view, the note as typed; the next item held meanwhile.
    assert str(at.subheader[0].value).startswith(f"Item {first['id']} ·")
    assert at.text_input(key=f"fix-note-{first['id']}").value == "meant both wrong"
    now_held = held(at)["id"]
    assert now_held not in (first["id"], following["id"])
    assert lease_of(seeded, now_held) == ("review", True)
    at.button(key="review_keep_last").click().run()
    assert not at.exception
    assert str(at.subheader[0].value).startswith(f"Item {now_held} ·")
    assert labels_of(seeded, following["id"]) == []


def test_an_empty_queue_says_to_come_back_later(seeded: Seeded) -> None:
    while (item := actions.claim(seeded.engine, None, "review")) is not None:
        actions.release(seeded.engine, item["id"], "review", skip=True, reason="test")
    at = review_page(seeded)
    assert "Nothing left for you to review" in shown(at.info[0].value)
    assert "Come back later" in shown(at.info[0].value)
    assert not [b for b in at.button if (b.key or "").startswith("verdict-")]


def test_a_task_that_keeps_no_text_has_no_queue(seeded: Seeded) -> None:
    config = {**CONFIGS[1], "task": "notes_private", "payload_policy": "none"}
    apply_tasks(seeded.engine, [config], actor="test")
    at = review_page(seeded)
    at.selectbox(key="review_task").select("notes_private").run()
    assert not at.exception
    assert "notes_private keeps no text (payload_policy none)" in shown(at.info[0].value)
    assert "no review queue" in shown(at.info[0].value)


def test_a_task_switched_to_no_text_refuses_the_claim_with_a_sentence(seeded: Seeded) -> None:
    # Shown from the queue's counts, or from the claim's refusal when they are a few
    # seconds old: either way a sentence, never a traceback.
    at = review_page(seeded)
    at.selectbox(key="review_task").select("invoice_extract").run()
    item = held(at)
    assert item["task"] == "invoice_extract"
    config = {**CONFIGS[1], "payload_policy": "none"}
    apply_tasks(seeded.engine, [config], actor="test")
    # The queue's counts are still cached: the claim refuses the task.
    at.session_state["review_item"] = None
    at.run()
    assert not at.exception
    assert "invoice_extract keeps no text" in shown(at.info[0].value)
    # Once the counts are read again, the item held on any task is given back, unseen.
    at.session_state["review_item"] = item
    st.cache_data.clear()
    at.selectbox(key="review_task").select("any task").run()
    assert not at.exception
    assert held(at)["task"] != "invoice_extract"
    with session_scope(seeded.engine) as session:
        assert session.get(ReviewItem, item["id"]).claimed_by is None


def test_a_review_key_sees_only_review_and_eval_sets(seeded: Seeded) -> None:
    at = open_page(seeded, "review")
    pages = sorted(p["script_path"].rsplit("/", 1)[-1] for p in at._registered_pages.values())
    assert pages == ["evalsets.py", "review.py"]
    for other in ("overview.py", "task.py", "audit.py"):
        with pytest.raises(ValueError, match="Could not find a navigation page"):
            at.switch_page(f"app_pages/{other}")
    # The default page is the review page.
    assert "Item " in page_text(at)
    # Opened directly, a read page refuses a review key.
    page = AppTest.from_file(
        APP.replace("streamlit_app.py", "app_pages/overview.py"), default_timeout=60
    )
    page.session_state[SESSION_TOKEN] = session_of(seeded, "review")
    page.run()
    assert "needs a key of scope read" in page.error[0].value


def test_a_read_key_has_no_review_page(seeded: Seeded) -> None:
    at = open_page(seeded, "read")
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page(PAGE)
    page = AppTest.from_file(APP.replace("streamlit_app.py", PAGE), default_timeout=60)
    page.session_state[SESSION_TOKEN] = session_of(seeded, "read")
    page.run()
    assert "needs a key of scope review" in page.error[0].value
    with session_scope(seeded.engine) as session:
        assert session.query(ReviewItem).filter(ReviewItem.claimed_by == "read").count() == 0


def test_the_page_labels_on_sqlite_too(seeded_sqlite: Seeded) -> None:
    at = review_page(seeded_sqlite)
    item = held(at)
    item_button(at, "verdict-unclear").click().run()
    assert not at.exception
    assert labels_of(seeded_sqlite, item["id"]) == [("review", "unclear", None, None, None)]
    assert held(at)["id"] != item["id"]


def test_a_single_answer_asks_whether_it_is_right(seeded: Seeded) -> None:
    # Skip the pairs ahead of the first single answer in the queue.
    while (item := actions.claim(seeded.engine, None, "review")) is not None:
        if item["kind"] == "single":
            break
        actions.release(seeded.engine, item["id"], "review", skip=True, reason="test")
    assert item is not None, "the seed queues no single answer"
    at = review_page(seeded)
    assert held(at)["id"] == item["id"]
    text = page_text(at)
    assert "Is this answer right?" in text
    assert "**A**" not in text and "**B**" not in text
    buttons = {b.key: b.proto.shortcut for b in at.button if (b.key or "").startswith("verdict-")}
    mine = f"-{item['id']}"
    assert buttons == {
        f"verdict-correct{mine}": "1",
        f"verdict-wrong{mine}": "2",
        f"verdict-unclear{mine}": "3",
    }
    item_button(at, "verdict-correct").click().run()
    assert not at.exception
    assert labels_of(seeded, item["id"]) == [("review", "correct", None, None, None)]

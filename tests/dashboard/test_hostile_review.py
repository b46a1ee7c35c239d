"""A hostile reviewer's review of the Review and Eval sets pages: untrusted text rendered
as markup (checked with CommonMark's renderer, markdown-it-py, which rich and Streamlit's
stack bring), leases lost mid-item, odd inputs, hostile run files. Each test is a defect found, and kept fixed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from markdown_it import MarkdownIt
from sqlalchemy import update
from streamlit.testing.v1 import AppTest

from controlplane.compare.jsonutil import dumps
from controlplane.db import session_scope
from controlplane.evalsets import service as evalsets
from controlplane.models import ReviewItem
from controlplane.review import actions
from shadowplane_dashboard import reviewing
from tests.dashboard.conftest import Seeded, item_button, open_page, page_text

pytestmark = pytest.mark.integration

REVIEW = "app_pages/review.py"
EVALSETS = "app_pages/evalsets.py"
IMAGE = "![img](http://evil.example/x.png)"


def rendered(markdown: str) -> str:
    """CommonMark's HTML of a markdown body (Streamlit renders with a CommonMark parser)."""
    return MarkdownIt("commonmark").render(markdown)


def hostile_item(**over: Any) -> dict[str, Any]:
    item = {
        "id": 999999,
        "task": "ticket_classify",
        "kind": "pair",
        "input": {"text": "hello"},
        "a": "refund",
        "b": "complaint",
        "diff": {"label": {"a": "refund", "b": "complaint"}},
        "lease_expires_at": None,
    }
    item.update(over)
    return item


def review_with(seeded: Seeded, monkeypatch: pytest.MonkeyPatch, item: dict[str, Any]) -> AppTest:
    """The review page with the claim answering `item` (as a stored result would)."""
    monkeypatch.setattr(actions, "claim", lambda *a, **k: item)
    at = open_page(seeded, "review", REVIEW)
    assert not at.exception, at.exception
    return at


def lines_of(seeded: Seeded, task: str, layer: str) -> list[dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return list(evalsets.layer_lines(session, evalsets.task_named(session, task), layer))


def run_file(lines: list[dict[str, Any]], model: str) -> bytes:
    return b"".join(
        dumps({"id": x["id"], "output": x["expected"], "model": model}) + b"\n" for x in lines
    )


# ---- Untrusted text as markup ----------------------------------------------------------


def test_an_indented_paragraph_is_not_shown_as_code_with_backslashes(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "Order status:\n\n    total (EUR): 12.50 - paid"
    at = review_with(seeded, monkeypatch, hostile_item(input={"text": text}))
    [body] = [m.value for m in at.markdown if "Order status" in m.value]
    html = rendered(body)
    assert "<code>" not in html and "\\(" not in html, html


def test_a_run_files_ids_are_not_rendered_as_markdown(seeded: Seeded) -> None:
    line = dumps({"id": IMAGE, "output": "x"}) + b"\n"
    at = open_page(seeded, "review", EVALSETS)
    at.file_uploader(key="evalsets_run_a").upload("a.jsonl", line * 2).run()
    at.file_uploader(key="evalsets_run_b").upload("b.jsonl", line).run()
    assert not at.exception
    [error] = at.error
    assert "<img" not in rendered(error.value), error.value


def test_a_run_model_name_cannot_break_out_of_its_code_span(seeded: Seeded) -> None:
    lines = lines_of(seeded, "ticket_classify", "regression")
    at = open_page(seeded, "review", EVALSETS)
    at.file_uploader(key="evalsets_run_a").upload("a.jsonl", run_file(lines, "m")).run()
    at.file_uploader(key="evalsets_run_b").upload("b.jsonl", run_file(lines, f"x` {IMAGE} `")).run()
    assert not at.exception and not at.error
    [body] = [m.value for m in at.markdown if "A = " in m.value]
    assert "<img" not in rendered(body), body


# ---- Leases, corrected answers ---------------------------------------------------------


def expire_lease(seeded: Seeded, item_id: int) -> None:
    with session_scope(seeded.engine) as session:
        session.execute(
            update(ReviewItem)
            .where(ReviewItem.id == item_id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=5))
        )


def test_skip_after_the_lease_expired_moves_on(seeded: Seeded) -> None:
    at = open_page(seeded, "review", REVIEW)
    item = at.session_state["review_item"]
    expire_lease(seeded, item["id"])
    item_button(at, "review_skip").click().run()
    assert not at.exception
    assert at.session_state["review_item"]["id"] != item["id"], page_text(at)


def test_give_back_after_the_lease_expired_moves_on(seeded: Seeded) -> None:
    at = open_page(seeded, "review", REVIEW)
    item = at.session_state["review_item"]
    expire_lease(seeded, item["id"])
    item_button(at, "review_release").click().run()
    assert not at.exception
    assert "review_item" not in at.session_state or (
        at.session_state["review_item"]["id"] != item["id"]
    ), page_text(at)


def test_an_item_whose_lease_another_reviewer_took_is_not_shown_on_rerun(seeded: Seeded) -> None:
    at = open_page(seeded, "review", REVIEW)
    item = at.session_state["review_item"]
    expire_lease(seeded, item["id"])
    # Lock every other item away from reviewer2 so it must take this one.
    other = actions.claim(seeded.engine, item["task"], "reviewer2")
    assert other is not None
    with session_scope(seeded.engine) as session:
        holder = session.get(ReviewItem, item["id"]).claimed_by
    assert holder == "reviewer2"
    at.run()
    assert not at.exception
    assert at.session_state["review_item"]["id"] != item["id"]


def test_a_nul_in_a_note_is_refused_as_input(seeded: Seeded) -> None:
    at = open_page(seeded, "review", REVIEW)
    item = at.session_state["review_item"]
    at.text_input(key=f"note-{item['id']}").input("a\x00b")
    item_button(at, "verdict-a_correct").click().run()
    assert not at.exception
    assert not [e for e in at.error if "did not answer" in e.value], at.error[0].value


def test_a_multiline_diff_value_stays_on_its_line() -> None:
    value = "title\n\nsub"
    diff = {"label": {"a": value, "b": "x"}, "numbers": {"only_in_a": ["1"], "only_in_b": []}}
    body = "\n".join(f"- {reviewing.escape(x)}" for x in reviewing.differences(diff))
    html = rendered(body)
    assert html.count("<li>") == 2 and html.count("<p>") == 0, html

"""The review page marks every difference the comparator names in both answers: a rewrite's
numbers, negations and named spans (in English and Chinese, whichever answer is the
edge's), its sentence count and length as notes, a JSON answer's differing fields. Read
from the markdown the page writes, on items stored as sampling stores them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from controlplane.compare.comparators import compare
from controlplane.rollout.configs import apply_tasks
from controlplane.sim.evalset_example import CONFIGS
from tests.dashboard.conftest import Seeded, item_button, open_page, page_text, shown
from tests.review.queuedata import add_items

pytestmark = pytest.mark.integration

PAGE = "app_pages/review.py"
MARKED = re.compile(r":orange-background\[((?:\\.|[^\\\]])*)\]")
REWRITE = {**CONFIGS[1], "task": "reply_rewrite", "comparator": {"kind": "text_conservation"}}
INVOICE = {**CONFIGS[1], "task": "invoice_marks"}


def add_pair(seeded: Seeded, config: dict[str, Any], edge: Any, cloud: Any, **over: Any) -> None:
    """A queued pair of the task, its diff the comparator's (as sampling stores it)."""
    diff = compare(config["comparator"], edge, cloud).diff
    kind = config["comparator"]["kind"]
    n = over.pop("n", 0)
    add_items(
        seeded.engine, config["task"], 1, n, comparator=kind, edge_output=edge,
        cloud_output=cloud, diff=diff, **over,
    )  # fmt: skip


def answer_marks(at: AppTest, title: str) -> list[str]:
    """The highlighted pieces of answer `title` ("A" or "B"), as the reader sees them."""
    for column in at.columns:
        values = [m.value for m in column.markdown]
        if values[:1] == [f"**{title}**"]:
            return [shown(x) for value in values[1:] for x in MARKED.findall(value)]
    raise AssertionError(f"no answer {title} on the page")


def test_every_difference_of_a_rewrite_and_of_json_fields_is_marked_in_both_answers(
    seeded: Seeded,
) -> None:
    apply_tasks(seeded.engine, [REWRITE, INVOICE], actor="test")
    # The first: A is the edge's answer; the second: A is the cloud's (and Chinese).
    add_pair(
        seeded,
        REWRITE,
        "You can return the 90 EUR order to Anna Lee. Call us.",
        "You can't return the 126 EUR order to Bob Smith.",
        a_is_edge=True,
        input={"text": "Customer: can I return the 126 EUR order?"},
    )
    add_pair(
        seeded,
        REWRITE,
        "七天内可以退货。",
        "三十天内不可以退货，请您保留好购物小票和原包装，谢谢合作。",
        a_is_edge=False,
        n=1,
    )
    add_pair(
        seeded,
        INVOICE,
        {"amount": 90, "currency": "EUR"},
        {"amount": 126, "currency": "EUR"},
        a_is_edge=True,
    )
    at = open_page(seeded, "review", PAGE)
    at.selectbox(key="review_task").select("reply_rewrite").run()
    assert not at.exception, at.exception

    # Numbers, the negation (and the verb it negates in the other), the names.
    assert answer_marks(at, "A") == ["can", "90", "Anna Lee"]
    assert answer_marks(at, "B") == ["can't", "126", "Bob Smith"]
    # The sentence count is a note: no place to mark.
    assert "A has 2 sentences, B has 1" in page_text(at)
    # The input marks what one answer holds and the other lacks.
    [source] = [m.value for m in at.markdown if "Customer" in m.value]
    assert [shown(x) for x in MARKED.findall(source)] == ["126"]

    item_button(at, "verdict-both_wrong").click().run()
    assert not at.exception, at.exception
    # Chinese, A the cloud's answer: 三十 vs 七 (30 and 7), 不 and 可 of 可以 it negates.
    assert answer_marks(at, "A") == ["三十", "不"]
    assert answer_marks(at, "B") == ["七", "可"]
    # Lengths 25 and 7 (a Chinese character is a word, a number one): a note.
    assert "A is 25 words long, B 7" in page_text(at)

    at.selectbox(key="review_task").select("invoice_marks").run()
    assert not at.exception, at.exception
    assert (answer_marks(at, "A"), answer_marks(at, "B")) == (['"amount": 90'], ['"amount": 126'])

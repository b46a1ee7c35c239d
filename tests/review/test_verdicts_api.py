"""Verdicts that cannot contradict the comparator, through POST /v1/review/{id}/label: each
refused verdict is a 422 whose reason speaks of A and B only and stores nothing (the lease
is kept); each accepted one gives the eval set the right `expected` answer; a reviewer's
correction of their own label is checked the same way."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.evalsets import service as evalsets
from controlplane.review.repository import item_labels
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, Api
from tests.review.queuedata import add_items

LABEL = TICKET_TASK["comparator"]
EXACT = {"kind": "exact"}
FIELDS = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "note": "string"},
    "required": ["amount", "currency"],
}
TEXT = {"kind": "text_conservation"}
SPECS = {"ticket_classify": LABEL, "v_exact": EXACT, "v_fields": FIELDS, "v_text": TEXT}
INVOICE = {"amount": 12.5, "currency": "EUR", "note": "Paid in full."}
# What a review key must never read: a side, or the models item_row stores.
BLIND = re.compile(r"\b(edge|cloud|served|decision)\b|small@3|large@7", re.IGNORECASE)


@dataclass(frozen=True)
class Case:
    task: str
    a: Any
    b: Any
    # The verdict that stands, and the answer the eval set then expects.
    stands: str
    expected: Any
    # A verdict refused first, and what its reason says.
    refused: tuple[str, str] | None = None
    # The item's hidden order: A is the edge's answer.
    a_is_edge: bool = True
    kind: str = "pair"


TICKETS, EXACT_TASK, FIELDS_TASK, TEXT_TASK = SPECS
REWRITE, SAME_REWRITE = "Your refund was sent today.", "We sent your refund today."
CASES = [
    # Found on main: "Both right" on two different labels of a single-label task...
    Case(TICKETS, "inquiry", "refund", "a_correct", "inquiry", ("both_correct", 'A reads "inquiry"')),
    # ...and "A is right" on two identical answers.
    Case(TICKETS, "refund", "refund", "both_correct", "refund", ("a_correct", 'both read "refund"'), a_is_edge=False),
    # Equal as the comparator reads them; both right, the eval set expects the cloud's.
    Case(TICKETS, " Refund ", "refund", "both_correct", "refund", ("b_correct", 'both read "refund"')),
    Case(EXACT_TASK, {"b": [1], "a": 1.0}, {"a": 1, "b": [1]}, "both_correct", {"a": 1, "b": [1]}, ("a_correct", "the same JSON value")),
    Case(FIELDS_TASK, {**INVOICE, "amount": 125}, INVOICE, "b_correct", INVOICE, ("both_correct", "they differ on amount")),
    # An undeclared field is no difference; A is the cloud's here, so it is expected.
    Case(FIELDS_TASK, {**INVOICE, "seller": "X"}, INVOICE, "both_correct", {**INVOICE, "seller": "X"}, ("a_correct", "same values"), a_is_edge=False),
    # A valid answer against an invalid one: not equal, so only the valid one is right.
    Case(FIELDS_TASK, {"amount": 12.5}, INVOICE, "b_correct", INVOICE, ("both_correct", "A is not an answer")),
    # Two different valid rewrites may both be right; one may be right alone.
    Case(TEXT_TASK, REWRITE, SAME_REWRITE, "both_correct", SAME_REWRITE),
    Case(TEXT_TASK, REWRITE, REWRITE, "a_correct", REWRITE, a_is_edge=False),
    # A single answer ("is this right?") is not a pair: nothing to contradict.
    Case(TICKETS, "refund", "refund", "correct", "refund", kind="single", a_is_edge=False),
]  # fmt: skip


def add_item(engine: Engine, n: int, case: Case) -> int:
    """A queued item of the case, its diff as the task's comparator reads the answers."""
    edge, cloud = (case.a, case.b) if case.a_is_edge else (case.b, case.a)
    found = compare(SPECS[case.task], edge, cloud)
    (item,) = add_items(
        engine,
        case.task,
        1,
        start=n,
        kind=case.kind,
        a_is_edge=case.a_is_edge,
        edge_output=edge,
        cloud_output=cloud,
        comparator=SPECS[case.task]["kind"],
        outcome=found.outcome,
        diff=found.diff,
    )
    return item


def stored(api: Api, item: int) -> list[tuple[str, str]]:
    with session_scope(api.engine) as session:
        return [(x.reviewer, x.verdict) for x in item_labels(session, item)]


def expected_by_input(api: Api, task: str) -> dict[str, Any]:
    with session_scope(api.engine) as session:
        evalsets.backfill(session, task=task)
        lines = evalsets.layer_lines(session, evalsets.task_named(session, task), "boundary")
    return {line["input"]["text"]: line["expected"] for line in lines}


def label(api: Api, item: int, verdict: str) -> Any:
    return api.client.post(
        f"/v1/review/{item}/label", json={"verdict": verdict}, headers=api.headers("review")
    )


def test_each_refused_verdict_is_a_422_with_its_reason_and_the_accepted_one_is_expected(
    api: Api,
) -> None:
    with session_scope(api.engine) as session:
        for task, spec in SPECS.items():
            apply_config(session, {"task": task, "comparator": spec}, actor="test")
    h = api.headers("review")
    for n, case in enumerate(CASES):
        item = add_item(api.engine, n, case)
        claimed = api.client.get(f"/v1/review/next?task={case.task}", headers=h)
        assert claimed.json()["item"]["id"] == item, case
        if case.refused is not None:
            verdict, why = case.refused
            refused = label(api, item, verdict)
            assert refused.status_code == 422, (case, refused.text)
            reason = refused.json()["detail"]
            assert reason.startswith(f"verdict: {verdict} calls ") and why in reason, reason
            assert not BLIND.search(reason), reason
            assert stored(api, item) == []
        # The lease is kept: the verdict that stands needs no new claim.
        stands = label(api, item, case.stands)
        assert stands.status_code == 200, (case, stands.text)
        assert stored(api, item) == [("review-key", case.stands)]
    for task in SPECS:
        expected = expected_by_input(api, task)
        wanted = {
            f"please help with order {n}": case.expected
            for n, case in enumerate(CASES)
            if case.task == task
        }
        assert expected == wanted, task


def test_a_reviewers_correction_of_their_label_is_checked_the_same_way(api: Api) -> None:
    case = Case(TICKETS, "inquiry", "refund", "both_wrong", None)
    item = add_item(api.engine, 0, case)
    api.client.get("/v1/review/next?task=ticket_classify", headers=api.headers("review"))
    assert label(api, item, "both_wrong").status_code == 200
    # No lease now: a correction. Both right on two different labels is refused...
    refused = label(api, item, "both_correct")
    assert refused.status_code == 422
    assert 'A reads "inquiry", B "refund"' in refused.json()["detail"]
    # ...and A is right stands, the eval set expecting A's label.
    assert label(api, item, "a_correct").status_code == 200
    assert stored(api, item) == [("review-key", "both_wrong"), ("review-key", "a_correct")]
    assert expected_by_input(api, "ticket_classify") == {"please help with order 0": "inquiry"}

"""The simulated reviewer's knowledge (pure): it knows an input however its whitespace was
kept, and answers a run of an edge model on an eval set's tickets with as many wrong
answers as the model's error profile expects."""

from __future__ import annotations

from controlplane.evalsets.items import item_id
from controlplane.sim.profiles import (
    EDGE_MODEL,
    EDGE_MODEL_FIX,
    FIX_TICKET_MISS,
    LABELS,
    LONG_TICKET,
)
from controlplane.sim.reviewer import Known, SimulatedReviewer, ticket_answers


def _result(text: str, truth: str, tokens: int = 100) -> dict[str, object]:
    return {
        "task": "ticket_classify",
        "input": {"text": text},
        "input_tokens": tokens,
        "cloud": {"output": truth},
    }


def test_it_knows_an_input_by_its_eval_item_id() -> None:
    reviewer = SimulatedReviewer([_result("Where is  my\nrefund?", "refund", 42)])
    # Whitespace runs collapse as in the eval item id; another task's input is unknown.
    assert reviewer.known("ticket_classify", {"text": "Where is my refund?"}) == Known("refund", 42)
    assert reviewer.known("invoice_extract", {"text": "Where is my refund?"}) is None
    reviewer.learn(_result("A second ticket", "inquiry"))
    item = {"kind": "pair", "input": {"text": "A second ticket"}, "a": "Refund", "b": "inquiry"}
    assert reviewer.label("ticket_classify", item).verdict == "b_correct"


def test_a_run_misses_as_many_items_as_the_error_profile_expects() -> None:
    keys = [item_id("ticket_classify", f"ticket {i}") for i in range(40)]
    items = [(k, Known(LABELS[i % 4], LONG_TICKET + i)) for i, k in enumerate(keys)]
    fixed = ticket_answers(EDGE_MODEL_FIX, items, "long_tickets")
    wrong = [k for k, known in items if fixed[k] != known.truth]
    # small-int4@4 misses 2% of tickets whatever their length: 40 × 0.02 = 0.8, one miss.
    assert round(40 * FIX_TICKET_MISS) == 1 and len(wrong) == 1
    assert all(answer in LABELS for answer in fixed.values())
    assert ticket_answers(EDGE_MODEL_FIX, items, "long_tickets") == fixed
    # small-int4@3 misses 35% of long tickets under long_tickets: 40 × 0.35 = 14.
    today = ticket_answers(EDGE_MODEL, items, "long_tickets")
    assert sum(today[k] != known.truth for k, known in items) == 14


def test_an_input_the_simulator_never_sent_gets_no_answer() -> None:
    answers = ticket_answers(
        EDGE_MODEL_FIX, [("a" * 64, None), ("b" * 64, Known("refund", 9))], "none"
    )
    assert answers == {"a" * 64: None, "b" * 64: "refund"}

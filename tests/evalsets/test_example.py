"""The example export in the repository (evalsets/example/) is what the simulator's
deterministic run writes (traffic, a canary rolled back by the long-ticket regression,
review sampling, a simulated reviewer, backfill, export): regenerated here and compared
byte for byte, every line valid against the schema, and the simulated reviewer's labels
agree with the known truth."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from controlplane.catalog.schemas import REGRESSION_ITEMS
from controlplane.evalsets.items import SCHEMA
from controlplane.sim.evalset_example import build
from controlplane.sim.reviewer import SimulatedReviewer, judge

EXAMPLE = Path(__file__).resolve().parents[2] / "evalsets" / "example"


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_the_example_export_is_regenerated_byte_for_byte(tmp_path: Path) -> None:
    build(tmp_path / "example")
    fresh, kept = files(tmp_path / "example"), files(EXAMPLE)
    assert (
        sorted(fresh)
        == sorted(kept)
        == [
            "invoice_extract/anomaly.jsonl",
            "invoice_extract/boundary.jsonl",
            "manifest.json",
            "schema.json",
            "ticket_classify/anomaly.jsonl",
            "ticket_classify/boundary.jsonl",
            "ticket_classify/regression.jsonl",
        ]
    )
    for name in fresh:
        assert fresh[name] == kept[name], (
            f"{name} differs: run python -m controlplane.sim.evalset_example evalsets/example"
        )
    validator = jsonschema.Draft202012Validator(SCHEMA)
    lines = [
        json.loads(line)
        for name, data in fresh.items()
        if name.endswith(".jsonl")
        for line in data.decode().splitlines()
    ]
    assert len(lines) == 116
    for line in lines:
        validator.validate(line)
        # The truth of every simulated task is its cloud answer: the reviewer's expected
        # answer is right by it, and a wrong edge answer of a pair is named with its
        # failure class (a single item asks about the cloud answer alone).
        assert judge(line["task"], line["cloud_output"], line["expected"]) is None
        if line["provenance"]["kind"] == "pair":
            edge_wrong = judge(line["task"], line["cloud_output"], line["edge_output"])
            assert line["failure_class"] == edge_wrong
    assert {x["provenance"]["reason"] for x in lines} >= {
        "conflict",
        "low_confidence",
        "invalid",
        "regression",
    }
    # The canary's rollback queued a sample of review.regression_items (100) of its
    # breaching windows' results for the regression layer, the breaching cell first: all 34
    # long tickets of those windows, then the other buckets. Every such item names the
    # rule, the cell and the window that fired.
    regression = [x for x in lines if x["layer"] == "regression"]
    assert len(regression) == REGRESSION_ITEMS == 100
    fired = {
        (r["decision_id"], r["rule"], r["cell"])
        for r in (x["provenance"]["regression"] for x in regression)
    }
    assert fired == {(2, "agreement >= 0.9 per bucket", "2048+")}
    assert sum(x["bucket"] == "2048+" for x in regression) == 34
    assert {x["bucket"] for x in regression} == {"0-127", "128-511", "512-2047", "2048+"}
    assert any(x["provenance"]["consensus"] == "cloud_correct" for x in lines)


def test_the_simulated_reviewer_judges_blind_answers_by_the_truth() -> None:
    sent = [
        {"task": "ticket_classify", "input": {"text": "t1"}, "cloud": {"output": "refund"}},
        {
            "task": "invoice_extract",
            "input": {"text": "i1"},
            "cloud": {"output": {"amount": 12.5, "currency": "EUR", "invoice_id": "INV-1"}},
        },
    ]
    reviewer = SimulatedReviewer(sent)
    pair = {"kind": "pair", "input": {"text": "t1"}}
    assert (
        reviewer.label("ticket_classify", {**pair, "a": " Refund ", "b": "refund"}).verdict
        == "both_correct"
    )
    wrong = reviewer.label("ticket_classify", {**pair, "a": "refund", "b": "exchange"})
    assert (wrong.verdict, wrong.failure_class) == ("a_correct", "wrong_label")
    assert (
        reviewer.label("ticket_classify", {**pair, "a": "inquiry", "b": "refund"}).verdict
        == "b_correct"
    )
    invoice = {
        "kind": "pair",
        "input": {"text": "i1"},
        "b": {"amount": 12.5, "currency": "EUR", "invoice_id": "INV-1"},
    }
    shifted = reviewer.label(
        "invoice_extract",
        {**invoice, "a": '{"amount": 125.0, "currency": "EUR", "invoice_id": "INV-1"}'},
    )
    assert (shifted.verdict, shifted.failure_class) == ("b_correct", "amount")
    single = {
        "kind": "single",
        "input": {"text": "i1"},
        "a": {"amount": 12.5, "currency": "EUR", "invoice_id": "INV-1"},
        "b": None,
    }
    assert reviewer.label("invoice_extract", single).verdict == "correct"
    assert (
        reviewer.label(
            "ticket_classify", {**pair, "input": {"text": "unknown"}, "a": "x", "b": "y"}
        ).verdict
        == "unclear"
    )
    assert (
        judge(
            "reply_rewrite",
            "Hi, your refund of $12 was sent today. We will email a@b.co when it arrives.",
            "Hello, we sent your refund of $12 today. We will write to a@b.co once it arrives.",
        )
        is None
    )
    assert (
        judge(
            "reply_rewrite",
            "Hi, your refund of $12 was sent today. We will email a@b.co when it arrives.",
            "Hello, we sent your refund of $13 today. We will write to a@b.co once it arrives.",
        )
        == "meaning_changed"
    )

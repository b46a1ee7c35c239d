"""Scoring runs (pure): reading run lines, refusing different item sets, the comparator as
judge, the paired difference and its interval."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.evalsets.items import expected_answer, item_id, normalise
from controlplane.evalsets.scoring import (
    Item,
    Run,
    RunError,
    compare_runs,
    paired,
    read_run,
    same_items,
    score,
)
from controlplane.metrics.stats import wilson

LABEL = {"kind": "label", "labels": ["refund", "exchange"]}
FIELDS = {"kind": "json_fields", "fields": {"amount": "number"}, "required": ["amount"]}


def test_item_ids_read_the_normalised_input_text_of_their_task() -> None:
    assert normalise(" Ｒｅｆｕｎｄ\u3000 me\n\tnow ") == "Refund me now"
    one = item_id("t", {"text": "Refund  me now", "segments": [1]})
    assert one == item_id("t", {"text": "Ｒｅｆｕｎｄ me\nnow"}) == item_id("t", "Refund me now")
    assert one != item_id("u", {"text": "Refund me now"})
    assert item_id("t", {"a": 1, "b": 2}) == item_id("t", {"b": 2, "a": 1})
    assert len(one) == 64 and int(one, 16) >= 0


def test_the_expected_answer_is_the_right_side_or_the_correction() -> None:
    sides = {"edge_output": "e", "cloud_output": "c"}
    assert expected_answer("edge_correct", corrected=None, **sides) == (True, "e")
    assert expected_answer("cloud_correct", corrected=None, **sides) == (True, "c")
    assert expected_answer("both_correct", corrected=None, **sides) == (True, "c")
    assert expected_answer("correct", corrected=None, **sides) == (True, "c")
    for needs in ("both_wrong", "unclear", "wrong"):
        assert expected_answer(needs, corrected=None, **sides) == (False, None)
        assert expected_answer(needs, corrected="x", **sides) == (True, "x")
    assert expected_answer("cloud_correct", corrected={"amount": 1}, **sides) == (
        True,
        {"amount": 1},
    )


def test_read_run_names_the_line_and_the_problem() -> None:
    run = read_run(
        ['{"id": "a", "output": "refund", "model": "m@1"}', "", '{"id": "b", "output": null}']
    )
    assert run.outputs == {"a": "refund", "b": None} and run.model == "m@1"
    for lines, words in (
        (["{nope"], "run:1: not a JSON object"),
        (["[1]"], "run:1: not a JSON object"),
        (['{"output": 1}'], "run:1: id"),
        (['{"id": "a"}'], "run:1: output"),
        (['{"id": "a", "output": 1}', '{"id": "a", "output": 2}'], "run:2: id: a is given twice"),
        (
            ['{"id": "a", "output": 1, "model": "x"}', '{"id": "b", "output": 1, "model": "y"}'],
            "x, y",
        ),
    ):
        with pytest.raises(RunError) as refused:
            read_run(lines)
        assert words in str(refused.value)


def test_runs_on_different_items_are_refused_naming_what_differs() -> None:
    same_items(["a", "b"], ["b", "a"], what="B", against="A")
    with pytest.raises(RunError) as refused:
        same_items(["a", "b", "c"], ["b", "c", "d", "e"], what="B.jsonl", against="A.jsonl")
    message = str(refused.value)
    assert "1 (a) of A.jsonl missing from B.jsonl" in message
    assert "2 (d, e) in B.jsonl not in A.jsonl" in message
    many = [f"x{i:02d}" for i in range(9)]
    with pytest.raises(RunError) as refused:
        same_items(many, [], what="B", against="A")
    assert "9 (x00, x01, x02, x03, x04, …)" in str(refused.value)


def test_outputs_are_judged_by_the_task_s_comparator_against_the_expected_answer() -> None:
    items = [
        Item("1", "regression", "0-127", "refund"),
        Item("2", "regression", "0-127", "exchange"),
        Item("3", "boundary", "2048+", "refund"),
    ]
    run = Run({"1": "  REFUND ", "2": "refund", "3": "nonsense"}, "m")
    scored = score(LABEL, items, run)
    assert scored.right == {"1": True, "2": False, "3": False}
    assert scored.total.view() == {"n": 3, "correct": 1, "accuracy": 1 / 3}
    assert {b: s.view()["correct"] for b, s in scored.per_bucket.items()} == {
        "0-127": 1,
        "2048+": 0,
    }
    fields = score(
        FIELDS,
        [Item("1", "boundary", "0-127", {"amount": 12.5})],
        Run({"1": '{"amount": 12.50}'}, None),
    )
    assert fields.total.correct == 1


def test_the_paired_interval_is_newcombe_s_from_the_two_wilson_intervals() -> None:
    # 12 both right, 5 only A, 1 only B, 2 neither.
    a = [True] * 17 + [False] * 3
    b = [True] * 12 + [False] * 5 + [True] + [False] * 2
    p = paired(a, b)
    assert (p.n, p.a, p.b, p.only_a, p.only_b) == (20, 0.85, 0.65, 5, 1)
    assert p.diff == pytest.approx(-0.2)
    (l1, u1), (l2, u2) = wilson(17, 20), wilson(13, 20)  # type: ignore[misc]
    phi = (12 * 2 - 5 * 1) / math.sqrt(17 * 3 * 13 * 7)
    low = -0.2 - math.sqrt(
        (0.65 - l2) ** 2 - 2 * phi * (0.65 - l2) * (u1 - 0.85) + (u1 - 0.85) ** 2
    )
    high = -0.2 + math.sqrt(
        (u2 - 0.65) ** 2 - 2 * phi * (u2 - 0.65) * (0.85 - l1) + (0.85 - l1) ** 2
    )
    assert (p.low, p.high) == (pytest.approx(low), pytest.approx(high))
    assert p.low == pytest.approx(-0.4118, abs=1e-4) and p.high == pytest.approx(0.0301, abs=1e-4)
    # No discordant items: no difference, and an interval that still admits one.
    same = paired([True] * 30 + [False] * 10, [True] * 30 + [False] * 10)
    assert same.diff == 0 and same.low is not None and same.high is not None
    assert same.low < 0 < same.high
    assert paired([], []).diff is None


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=200))
def test_the_paired_interval_holds_the_difference_and_stays_in_bounds(
    pairs: list[tuple[bool, bool]],
) -> None:
    p = paired([x for x, _ in pairs], [y for _, y in pairs])
    assert p.low is not None and p.high is not None and p.diff is not None
    assert -1.0 <= p.low <= p.diff + 1e-12 and p.diff - 1e-12 <= p.high <= 1.0
    mirrored = paired([y for _, y in pairs], [x for x, _ in pairs])
    assert mirrored.low == pytest.approx(-p.high) and mirrored.high == pytest.approx(-p.low)


def test_compare_runs_rows_per_layer_and_bucket_then_totals() -> None:
    items = [
        Item("1", "boundary", "0-127", "refund"),
        Item("2", "boundary", "128-511", "refund"),
        Item("3", "regression", "0-127", "exchange"),
        Item("4", "regression", "0-127", "refund"),
    ]
    a = Run({"1": "refund", "2": "exchange", "3": "refund", "4": "refund"}, "old")
    b = Run({"1": "refund", "2": "refund", "3": "exchange", "4": "exchange"}, "new")
    rows = compare_runs(LABEL, items, a, b)
    assert [(r["layer"], r["bucket"], r["n"], r["a"], r["b"]) for r in rows] == [
        ("boundary", "0-127", 1, 1.0, 1.0),
        ("boundary", "128-511", 1, 0.0, 1.0),
        ("boundary", "all", 2, 0.5, 1.0),
        ("regression", "0-127", 2, 0.5, 0.5),
        ("regression", "all", 2, 0.5, 0.5),
        ("all", "all", 4, 0.5, 0.75),
    ]
    assert rows[-1]["diff"] == 0.25 and rows[-1]["only_a"] == 1 and rows[-1]["only_b"] == 2

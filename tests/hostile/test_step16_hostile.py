"""Hostile review of step 16 (issue 26): regression first, blind everywhere, verdicts that
cannot contradict the comparator, highlighting. Each test pins one defect found by feeding
the new code what a curious reviewer, an SRE after a rollback, a routing-service author or a
careless key holder would, and is kept as its regression test once fixed.

Blindness is checked as a symmetry: an item whose edge answered x and cloud y, shown with A
as the edge's answer, and the item whose edge answered y and cloud x, shown with A as the
cloud's answer, put the same x as A and the same y as B in front of the reviewer. Anything a
review key reads that differs between the two tells the sides apart.

Pure tests first, then a few on a real (SQLite) database through the actions the API and the
dashboard call (their refusals are the API's 422 details)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.service import task_runtimes
from controlplane.compare import conservation
from controlplane.compare.comparators import compare
from controlplane.compare.redaction import redact_payload
from controlplane.db import session_scope
from controlplane.errors import ActionError
from controlplane.evalsets import items as evalitems
from controlplane.evalsets import repository as evalrepo
from controlplane.evalsets import scoring
from controlplane.evalsets import service as evalsets
from controlplane.evalsets.gate import check_unblock
from controlplane.models import Task
from controlplane.models.review import PRIORITY_BREACHING, ReviewLabel
from controlplane.models.rollout import BlockedModel
from controlplane.review import actions as review
from controlplane.review.blind import view
from controlplane.review.calibration import task_calibration
from controlplane.review.labels import contradiction
from controlplane.rollout.actions import unblock
from controlplane.rollout.configs import apply_config
from shadowplane_dashboard import locate, reviewing
from tests.conftest import Api, make_api
from tests.review.queuedata import T0, add_items, task_id

LABELS = {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]}
FIELDS = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string"},
    "required": ["amount"],
}
TEXT = {"kind": "text_conservation"}


def stored_item(
    spec: dict[str, Any], edge: Any, cloud: Any, a_is_edge: bool, **extra: Any
) -> SimpleNamespace:
    """A pair review item as the sampler stores it: the diff is the comparator's."""
    values = {
        "id": 1,
        "kind": "pair",
        "a_is_edge": a_is_edge,
        "comparator": spec["kind"],
        "input": {"text": "Order 1234: please help."},
        "edge_output": edge,
        "cloud_output": cloud,
        "diff": compare(spec, edge, cloud).diff,
        "lease_expires_at": None,
        "policy": "full",
    }
    return SimpleNamespace(**{**values, **extra})


def both_views(spec: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a reviewer is shown of (edge x, cloud y, A = edge) and (edge y, cloud x, A =
    cloud): A is x and B is y in both."""
    return (
        view(stored_item(spec, x, y, True), "t"),
        view(stored_item(spec, y, x, False), "t"),
    )


# --- blindness ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "x", "y"),
    [
        (LABELS, "n/a", "maybe"),  # neither is one of the task's labels
        (FIELDS, "no invoice found", "unreadable scan"),  # neither is a JSON object
        (FIELDS, {"amount": "12"}, {"amount": "x"}),  # amount not a number in either
        (TEXT, " ", ""),  # neither is a text
    ],
    ids=["label", "json-text", "json-schema", "text"],
)
def test_two_invalid_answers_are_shown_the_same_whichever_is_the_edges(
    spec: dict[str, Any], x: Any, y: Any
) -> None:
    as_edge_first, as_cloud_first = both_views(spec, x, y)
    # Today: {"a": "label 'n/a' is not one of [...]"} against {"b": "label 'maybe' ..."}.
    assert as_edge_first["diff"] == as_cloud_first["diff"]


def eval_line(spec: dict[str, Any], edge: Any, cloud: Any, a_is_edge: bool) -> dict[str, Any]:
    """The blind eval-set line of a pair both reviewers' verdict called right."""
    item = stored_item(
        spec,
        edge,
        cloud,
        a_is_edge,
        result_id=1,
        request_id="r-1",
        reason="conflict",
        inclusion_probability=1.0,
        comparator_version=1,
        config_version=1,
        flag_version=1,
        window_start=T0,
        result_ts=T0,
        decision="edge",
        served="cloud",
        outcome="conflict",
        edge_error=None,
        edge_model="small@3",
        cloud_model="large@7",
        layer="boundary",
        provenance=None,
        bucket="0-127",
    )
    label = SimpleNamespace(
        id=1,
        reviewer="rev",
        resolved="both_correct",
        failure_class=None,
        corrected=None,
        note=None,
        created_at=T0,
    )
    values = evalsets.eval_values(SimpleNamespace(name="t", id=1), item, [label])
    assert values is not None
    return evalitems.blind_line(SimpleNamespace(**values), "t", a_is_edge)


@pytest.mark.parametrize(
    ("spec", "x", "y"),
    [
        (TEXT, "Your refund of 90 EUR was sent today.", "We sent your refund of 90 EUR today."),
        (
            FIELDS,
            {"amount": 12, "currency": "EUR", "note": "paid by card"},
            {"amount": 12, "currency": "EUR"},
        ),
    ],
    ids=["text-rewrites", "json-undeclared-field"],
)
def test_the_blind_eval_line_of_a_both_correct_pair_does_not_name_the_cloud(
    spec: dict[str, Any], x: Any, y: Any
) -> None:
    # Both verdicts stand: the comparator has nothing against calling both right.
    assert contradiction("both_correct", spec, x, y) is None
    as_edge_first = eval_line(spec, x, y, True)
    as_cloud_first = eval_line(spec, y, x, False)
    assert (as_edge_first["a"], as_edge_first["b"]) == (as_cloud_first["a"], as_cloud_first["b"])
    # Today the first expects y (B, the cloud's), the second x (A, the cloud's).
    assert as_edge_first["expected"] == as_cloud_first["expected"]


# --- highlighting -------------------------------------------------------------------------


def test_highlighting_a_long_input_reads_a_bounded_part_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    real = conservation.spans

    def counted(text: str) -> Any:
        nonlocal calls
        calls += 1
        return real(text)

    monkeypatch.setattr(conservation, "spans", counted)
    # 10,000 order references (INV-1, INV-2, ...) in the input; A says 7 days, B 30.
    item = {
        "input": {"text": " ".join(f"INV-{k}" for k in range(10_000))},
        "a": "Refund within 7 days.",
        "b": "Refund within 30 days.",
        "diff": {"failed": ["numbers"], "numbers": {"only_in_a": ["7"], "only_in_b": ["30"]}},
    }
    reviewing.input_marks(item)
    # The module's own bound on what one text is read for (numbers, negation characters).
    assert calls <= locate.MAX_PLACES, calls


# --- on a database: blindness under `redacted` ---------------------------------------------


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


CALLBACK = {"task": "callback", "comparator": {"kind": "label"}, "payload_policy": "redacted"}


def masked_item(engine: Any, n: int, edge: str, cloud: str, a_is_edge: bool) -> int:
    """A redacted pair of the callback task as ingest stores it (one masker numbers the
    input, then the edge's answer, then the cloud's)."""
    raw = {
        "input": {"text": f"Customer {'ABCDEFGH'[n]} asks which number to call back."},
        "edge_output": edge,
        "cloud_output": cloud,
        "diff": compare(CALLBACK["comparator"], edge, cloud).diff,
    }
    stored = redact_payload(raw)
    [item] = add_items(
        engine,
        "callback",
        1,
        start=n,
        comparator="label",
        policy="redacted",
        a_is_edge=a_is_edge,
        **stored,
    )
    return item


def refusal(engine: Any, reviewer: str, item: int) -> str:
    with pytest.raises(ActionError) as refused:
        review.label(engine, item, reviewer, verdict="both_correct")
    assert refused.value.status == 422
    return str(refused.value.detail)


def test_a_refusal_under_redacted_quotes_the_answers_as_shown(api: Api) -> None:
    with session_scope(api.engine) as session:
        apply_config(session, CALLBACK, actor="test")
    one, two = "call +44 20 7946 0958", "call +44 20 7946 0959"
    # Shown the same (A: call <PHONE_1>, B: call <PHONE_2>): A is the edge's, then the cloud's.
    edge_first = masked_item(api.engine, 1, one, two, a_is_edge=True)
    cloud_first = masked_item(api.engine, 2, two, one, a_is_edge=False)
    shown = {
        reviewer: review.claim(api.engine, "callback", reviewer) for reviewer in ("rev-1", "rev-2")
    }
    assert {v["id"] for v in shown.values()} == {edge_first, cloud_first}
    assert [(v["a"], v["b"]) for v in shown.values()] == [("call <PHONE_1>", "call <PHONE_2>")] * 2
    said = {v["id"]: refusal(api.engine, reviewer, v["id"]) for reviewer, v in shown.items()}
    # Today: 'A reads "call <phone_1>", B "call <phone_2>"' for the first and
    # 'A reads "call <phone_2>", B "call <phone_1>"' for the second.
    assert said[edge_first] == said[cloud_first]


def test_comparing_runs_of_the_blind_answers_does_not_tell_the_sides_apart(api: Api) -> None:
    with session_scope(api.engine) as session:
        apply_config(session, CALLBACK, actor="test")
    one, two = "call +44 20 7946 0958", "call +44 20 7946 0959"
    edge_first = masked_item(api.engine, 1, one, two, a_is_edge=True)
    cloud_first = masked_item(api.engine, 2, two, one, a_is_edge=False)
    for reviewer in ("rev-1", "rev-2"):
        held = review.claim(api.engine, "callback", reviewer)
        # The same verdict on the same view: A is right.
        review.label(api.engine, held["id"], reviewer, verdict="a_correct")
    with session_scope(api.engine) as session:
        evalsets.backfill(session, task="callback")
        task = evalsets.task_named(session, "callback")
        lines = evalsets.layer_lines(session, task, "boundary", blind=True)
        by_item = {
            x.review_item_id: x.item_id for x in evalsets.layer_items(session, task, "boundary")
        }
        spec = evalsets.comparator_spec(session, task)
        right = {}
        for review_item in (edge_first, cloud_first):
            [line] = [x for x in lines if x["id"] == by_item[review_item]]
            assert (line["a"], line["expected"]) == ("call <PHONE_1>", "call <PHONE_1>")
            # What the page does for a review key with two uploaded runs: blind `a` against
            # blind `b`, scored on the blind form's expected answers.
            runs = [scoring.Run({line["id"]: line[k]}, k) for k in ("a", "b")]
            found_task, found = evalsets.compare_items(session, [line["id"]])
            scored = evalsets.blind_scoring_items(session, found_task, found)
            rows = scoring.compare_runs(spec, scored, *runs)
            right[review_item] = rows[-1]["a"]
    # Today 1.0 when A is the edge's answer, 0.0 when it is the cloud's.
    assert right[edge_first] == right[cloud_first]


@pytest.mark.parametrize(
    ("verdict", "item", "corrected"),
    [
        ("both_wrong", {}, " Refund"),  # A or B reads "refund" (item_row: refund vs exchange)
        ("wrong", {"kind": "single", "a_is_edge": False}, "EXCHANGE"),  # shown: exchange
    ],
    ids=["both-wrong", "single-wrong"],
)
def test_a_correction_equal_to_an_answer_called_wrong_is_refused(
    api: Api, verdict: str, item: dict[str, Any], corrected: str
) -> None:
    [found] = add_items(api.engine, "ticket_classify", 1, **item)
    held = review.claim(api.engine, "ticket_classify", "rev")
    assert held["id"] == found
    assert corrected.strip().casefold() in (held["a"], held["b"])
    with pytest.raises(ActionError) as refused:
        review.label(api.engine, found, "rev", verdict=verdict, corrected=corrected)
    assert refused.value.status == 422


# --- on a database: regression first, the gate, the estimates -------------------------------


def regression_items(api: Api, count: int, start: int = 0, **overrides: Any) -> list[int]:
    """Regression items of ticket_classify's blocked small@3 (a block naming no rollback:
    every regression item of the task counts), as a rollback queues them."""
    values = {"layer": "regression", "reason": "regression", "priority": PRIORITY_BREACHING}
    ids = add_items(api.engine, "ticket_classify", count, start, **{**values, **overrides})
    with session_scope(api.engine) as session:
        tid = task_id(api.engine, "ticket_classify")
        if session.scalar(select(BlockedModel.id).where(BlockedModel.task_id == tid)) is None:
            session.add(BlockedModel(task_id=tid, model="small@3", decision_id=None))
    return ids


@pytest.mark.parametrize(
    ("verdict", "item"),
    [
        ("unclear", {}),
        ("both_wrong", {}),
        # A single item shows the cloud's answer, here no label of the task.
        ("correct", {"kind": "single", "a_is_edge": False, "cloud_output": "n/a", "diff": None}),
        # A is right, but too long (35,000 characters) for any run to be scored against it.
        (
            "a_correct",
            {
                "a_is_edge": True,
                "edge_output": "refund " * 5000,
                "diff": {"too_long": {"edge": 35000, "cloud": 8, "max_chars": 32000}},
            },
        ),
    ],
    ids=["unclear", "both-wrong", "single-correct-on-invalid", "a-correct-too-long"],
)
def test_a_regression_item_without_an_expected_answer_can_still_get_one(
    api: Api, verdict: str, item: dict[str, Any]
) -> None:
    [found] = regression_items(api, 1, **item)
    assert review.claim(api.engine, "ticket_classify", "rev-1")["id"] == found
    review.label(api.engine, found, "rev-1", verdict=verdict, note="cannot tell from this")
    with session_scope(api.engine) as session:
        evalsets.fill_waiting(session)
        task = session.scalars(select(Task).where(Task.name == "ticket_classify")).one()
        config = task_runtimes(session, {task.name})[task.name].config
        refused = check_unblock(session, task, config, "small@3")
    assert refused is not None and "a valid correction on 1 item" in refused
    # Another reviewer is the only one who could give it (rev-1 may have left): today none.
    offered = review.claim(api.engine, "ticket_classify", "rev-2")
    assert offered is not None and offered["id"] == found


def test_a_pass_does_not_come_back_forever_to_a_duplicate_it_can_never_add(api: Api) -> None:
    same = {"input": {"text": "Where is my refund for order 1234?"}}
    regression_items(api, 2, **same)
    for reviewer in ("rev-1", "rev-1"):
        held = review.claim(api.engine, "ticket_classify", reviewer)
        verdict = "a_correct" if held["a"] == "exchange" else "b_correct"
        review.label(api.engine, held["id"], reviewer, verdict=verdict)
    with session_scope(api.engine) as session:
        assert evalsets.fill_waiting(session) == 1  # one input, one eval item
    with session_scope(api.engine) as session:
        # The next pass: nothing can be added, and nothing should be read again.
        assert evalsets.fill_waiting(session) == 0
        assert evalrepo.tasks_waiting_for_regression(session) == []


def test_a_lifted_rollbacks_leftovers_do_not_queue_before_a_waiting_one(api: Api) -> None:
    # ticket_classify's rollback: small@3 blocked, then lifted with force; 3 items unlabelled.
    regression_items(api, 3)
    unblock(api.engine, "ticket_classify", model="small@3", actor="sre", reason="r", force=True)
    # A later rollback of callback: its model is blocked, waiting on this sample.
    with session_scope(api.engine) as session:
        apply_config(session, CALLBACK, actor="test")
    values = {"layer": "regression", "reason": "regression", "priority": PRIORITY_BREACHING}
    [waiting] = add_items(api.engine, "callback", 1, 10, **values)
    with session_scope(api.engine) as session:
        session.add(BlockedModel(task_id=task_id(api.engine, "callback"), model="small@4"))
    # A reviewer of any task: the sample a block waits on comes first.
    assert review.claim(api.engine, None, "rev")["id"] == waiting


REWRITE = {"task": "rewrite", "comparator": TEXT}


def judged(api: Api, n: int, real: bool, probability: float, **overrides: Any) -> None:
    """A done conflict of the rewrite task (two rewrites differing in length) with one
    label: a real difference (the cloud's was right) or none (both rewrites right)."""
    a, b = "Your refund was sent today.", "We have sent your refund to your card today."
    found = compare(TEXT, a, b)
    assert found.outcome == "conflict"
    values = {
        "state": "done",
        "outcome": "conflict",
        "inclusion_probability": probability,
        "comparator": "text_conservation",
        "edge_output": a,
        "cloud_output": b,
        "diff": found.diff,
    }
    [item] = add_items(api.engine, "rewrite", 1, n, **{**values, **overrides})
    with session_scope(api.engine) as session:
        session.add(
            ReviewLabel(
                item_id=item,
                task_id=task_id(api.engine, "rewrite"),
                reviewer="rev",
                verdict="b_correct" if real else "both_correct",
                resolved="cloud_correct" if real else "both_correct",
                created_at=T0,
            )
        )


def test_a_rollbacks_regression_sample_does_not_skew_comparator_calibration(api: Api) -> None:
    """Two windows of 20 conflicts each; the sampler drew 2 of each (p = 0.1). Window 1's are
    real differences; window 2's one real, one not. Weighted: (2 x 10 + 1 x 10) / (4 x 10) =
    0.75. The rollback's regression sample of window 2: 2 of its 20 (p = 0.1), one real,
    one not: counted too, (30 + 10) / (40 + 20) = 0.667, though no result changed."""
    with session_scope(api.engine) as session:
        apply_config(session, REWRITE, actor="test")
    judged(api, 1, True, 0.1)
    judged(api, 2, True, 0.1)
    judged(api, 3, True, 0.1)
    judged(api, 4, False, 0.1)
    with session_scope(api.engine) as session:
        [before] = task_calibration(session, task_id(api.engine, "rewrite"))
    assert before["conflict_precision"]["estimate"] == pytest.approx(0.75)
    sample = {"reason": "regression", "layer": "regression", "priority": PRIORITY_BREACHING}
    judged(api, 5, True, 0.1, **sample)
    judged(api, 6, False, 0.1, **sample)
    with session_scope(api.engine) as session:
        [after] = task_calibration(session, task_id(api.engine, "rewrite"))
    assert after["conflict_precision"]["estimate"] == pytest.approx(0.75)

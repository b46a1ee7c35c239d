"""Hostile use of grading and cloud repeats: each test holds one defect found by feeding
them what a hostile or careless user would send (a free repeat against a resend never
stored, blank inputs as one input, a min_days no span can hold, a 5,000-digit span, a
weight that underflows, forbid declared in canary), fixed since."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from controlplane.catalog.schemas import ConfigError, parse_config
from controlplane.grading.grade import Traffic, grade
from tests.conftest import TICKET_TASK, Api, make_result
from tests.grading_support import give_offload_grade
from tests.rollout.test_grade_gate import apply, config, pass_the_gate, promote, stage


def repeat_columns(api: Api) -> dict[str, tuple[Any, Any]]:
    """request id → (repeat_source, repeat_outcome) of every stored result."""
    with api.engine.connect() as conn:
        rows = conn.execute(text("SELECT request_id, repeat_source, repeat_outcome FROM results"))
        return {r[0]: (r[1], r[2]) for r in rows}


# --- free repeats ------------------------------------------------------------------------


def test_a_free_repeat_is_never_scored_against_a_resend_that_is_not_stored(api: Api) -> None:
    """`orig` is stored with a cloud error (no cloud answer, no print). Its resend, now with
    a cloud answer, is a duplicate and is not stored (the first write wins) — yet the later
    result in the same batch is scored as a free repeat (a conflict) against the resend's
    answer: a repeat pair against an answer that exists nowhere, counted against the
    cloud's self-agreement."""
    same_input = {"text": "Where is my parcel 77?"}
    first = make_result(
        request_id="orig",
        input=same_input,
        ts="2026-11-30T02:00:00Z",
        served="edge",
        cloud={"error": "timeout"},
    )
    assert api.post_results(first).json()["accepted"] == 1
    resend = make_result(
        request_id="orig", input=same_input, ts="2026-11-30T02:00:00Z", cloud={"output": "exchange"}
    )
    later = make_result(
        request_id="later", input=same_input, ts="2026-11-30T02:00:05Z", cloud={"output": "refund"}
    )
    report = api.post_results({"results": [resend, later]}).json()
    assert (report["accepted"], report["duplicates"]) == (1, 1), report
    stored = repeat_columns(api)
    assert stored["orig"] == (None, None)
    # No stored result answered by the cloud came before `later`: it has no repeat pair.
    assert stored["later"] == (None, None), stored["later"]


def test_inputs_of_only_whitespace_are_not_one_input_for_free_repeats(api: Api) -> None:
    """An input without text (`{"text": null}`) has no identity ("every such input would
    look alike"); one whose text is empty or only whitespace normalises to "" and gets one
    shared hash, so unrelated requests whose router sent no real text are scored as free
    repeats of each other: conflicts the cloud never made."""
    results = [
        make_result(
            request_id=f"ws{i}",
            input={"text": blank},
            ts=f"2026-11-30T03:00:0{i}Z",
            cloud={"output": label},
        )
        for i, (blank, label) in enumerate(
            [("   ", "refund"), ("\n\t", "complaint"), ("", "inquiry")]
        )
    ]
    assert api.post_results({"results": results}).json()["accepted"] == 3
    stored = repeat_columns(api)
    assert [stored[f"ws{i}"] for i in range(3)] == [(None, None)] * 3, stored


# --- task config: grading ----------------------------------------------------------------


def post_task(api: Api, grading: dict[str, Any], name: str) -> Any:
    body = {**TICKET_TASK, "task": name, "grading": grading}
    return api.client.post("/v1/tasks", json=body, headers=api.headers("admin"))


def test_min_days_a_span_can_never_hold_is_refused_naming_the_field(api: Api) -> None:
    """`span: 1d` touches at most two UTC days, so `min_days: 30` can never be met: every
    grade of the task is `insufficient` for ever and it can never leave shadow unforced.
    The config is accepted (201) instead of refused naming grading.min_days."""
    response = post_task(api, {"span": "1d", "min_days": 30}, "never_enough_days")
    assert response.status_code == 422, response.text
    assert "grading.min_days" in response.text


def test_a_span_of_too_many_digits_is_refused_with_the_span_rule(api: Api) -> None:
    """A span of 5,000 digits is refused, but with Python's own message and advice to the
    API user ("use sys.set_int_max_str_digits() to increase the limit") instead of the
    span's rule."""
    response = post_task(api, {"span": "9" * 5000 + "d"}, "long_span")
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert len(detail) == 1 and detail[0].startswith("grading.span: must be whole days or hours")
    assert "sys.set_int_max_str_digits" not in response.text


NOW = datetime(2026, 12, 1, tzinfo=UTC)
# P95 / P50 = 5: the input-length score is 0.5 (ramp 2 → 8), every other figure plenty.
TRAFFIC = Traffic(
    since=NOW - timedelta(days=7),
    until=NOW,
    results=100_000,
    days=7,
    input_p50=100.0,
    input_p95=500.0,
    input_tokens_sum=1e7,
    repeat_pairs=1000,
    repeat_agree=990,
    repeat_invalid=0,
    repeat_diffs={},
)


def test_a_tiny_weight_grades_as_its_ratio_says_or_is_refused() -> None:
    """Weights: "the score divides by their sum, so only their ratios matter". With the
    input-length weight alone, 1 and 5e-324 are the same ratio, yet 5e-324 (accepted)
    grades 0.0 / keep_cloud where 1 grades 0.5 / shadow: w·s underflows to 0."""
    only = {"determinism": 0, "error_cost": 0, "frequency": 0}
    one = parse_config(
        {**TICKET_TASK, "task": "x", "grading": {"weights": {**only, "input_length": 1}}}
    )
    expected = grade("x", TRAFFIC, one, veto=0.7, computed_at=NOW)
    assert (expected["tier"], expected["score"]) == ("shadow", 0.5)
    try:
        tiny = parse_config(
            {**TICKET_TASK, "task": "x", "grading": {"weights": {**only, "input_length": 5e-324}}}
        )
    except ConfigError as exc:  # refusing such a weight is a fix too
        assert "grading.weights" in str(exc.errors)
        return
    found = grade("x", TRAFFIC, tiny, veto=0.7, computed_at=NOW)
    assert (found["tier"], found["score"]) == (expected["tier"], expected["score"])


# --- the promotion gate ------------------------------------------------------------------


def test_forbid_declared_in_canary_refuses_even_a_forced_promotion(api: Api) -> None:
    """`forbid` means "never offloaded, whatever the traffic says", and nothing overrides
    it. The veto is checked at every stage past cloud; forbid only when leaving shadow, so a
    task in canary whose config now declares `forbid: planning` is forced on to `full`."""
    apply(api, config("planner_c"))
    give_offload_grade(api.url, "planner_c")
    pass_the_gate(api, "planner_c")
    assert promote(api, "planner_c").status_code == 200
    assert stage(api, "planner_c") == "canary"

    apply(api, config("planner_c", forbid="planning"))
    forced = promote(api, "planner_c", force=True)
    assert forced.status_code == 409, forced.text
    assert "forbid" in forced.text
    assert stage(api, "planner_c") == "canary"

"""A refused action read by people (the CLI, the dashboard): `refusal_text`."""

from __future__ import annotations

from controlplane.rollout.actions import refusal_text


def test_a_sentence_is_said_as_it_is() -> None:
    assert refusal_text("stage: t is in full; nothing follows") == (
        "stage: t is in full; nothing follows"
    )


def test_what_forcing_cannot_pass_says_so() -> None:
    for detail in (
        {"grade": {"tier": "forbid", "reason": "the task declares forbid", "forceable": False}},
        {"needs_regrade": "t needs a re-grade: its inputs shifted"},
        {"veto": "error_cost 9 is at or over the error-cost veto 5"},
        {"forbid": "the task declares forbid: pii"},
    ):
        lines = refusal_text(detail, force="F").splitlines()
        assert lines[0] == "promotion refused:"
        assert lines[-1] == "Forcing does not go past this.", detail
        assert len(lines) == 3


def test_the_gate_and_a_forceable_grade_each_have_their_line() -> None:
    detail = {
        "gate": {"stage": "canary", "reasons": ["3 of the 12 windows", "bucket all: low"]},
        "grade": {"tier": "shadow", "reason": "agreement 0.81 < 0.9", "forceable": True},
    }
    assert refusal_text(detail, force="F").splitlines() == [
        "promotion refused:",
        "- the grade is shadow: agreement 0.81 < 0.9",
        "- the gate (canary): 3 of the 12 windows; bucket all: low",
        "F goes past these (audited, with its reason).",
    ]


def test_any_other_structure_is_compact_json() -> None:
    assert refusal_text({"unknown": [1, 2]}) == '{"unknown":[1,2]}'
    assert refusal_text(["a"]) == '["a"]'

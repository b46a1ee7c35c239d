"""shadowplane_dashboard.task.actions: the refusals a click can meet, in sentences, and what it did."""

from __future__ import annotations

import pytest

from controlplane.errors import ActionError
from shadowplane_dashboard.task import actions


def refuse(detail: object) -> None:
    raise ActionError(409, detail)


def test_the_gates_refusal_is_a_sentence() -> None:
    with pytest.raises(ActionError) as said:
        actions.readable(refuse)({"gate": {"reasons": ["too few pairs", "agreement 0.8"]}})
    assert said.value.status == 409
    assert said.value.detail == (
        "promotion refused:\n- the gate: too few pairs; agreement 0.8\nTicking 'force past "
        "the gate' goes past these (audited, with its reason)."
    )


def test_the_vetos_refusal_is_its_sentence() -> None:
    with pytest.raises(ActionError) as said:
        actions.readable(refuse)({"veto": "error cost 0.9 over the veto 0.7"})
    assert said.value.detail == (
        "promotion refused:\n- veto: error cost 0.9 over the veto 0.7\n"
        "Forcing does not go past this."
    )


def test_other_refusals_and_answers_pass_through() -> None:
    with pytest.raises(ActionError) as said:
        actions.readable(refuse)("it has moved since you looked")
    assert said.value.detail == "it has moved since you looked"
    assert actions.readable(lambda x: x + 1)(1) == 2


def test_what_was_done() -> None:
    assert actions.done_text({"kind": "rearm"}, {"reason": "re-armed to shadow: fixed"}) == (
        "re-armed to shadow: fixed"
    )
    assert actions.done_text({"model": "edge-a"}, {"blocked": ["edge-b"]}) == (
        "Unblocked edge-a; still blocked: edge-b."
    )
    assert actions.done_text({"model": "edge-a"}, {"blocked": []}).endswith("still blocked: none.")

"""What the Task page's buttons do: a click queues the action with the stage the page
showed; the next run performs it through `controlplane.rollout.actions` with the reason
typed, and says what was done (or why not) in a sentence."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

from controlplane.auth.service import Principal
from controlplane.errors import ActionError
from controlplane.rollout import actions
from controlplane.settings import Settings
from shadowplane_dashboard import common

PENDING = "task_action"
FLASH = "task_flash"
REASON = "action_reason"
FORCE_PROMOTION = "promote_force"
REASON_MAX_CHARS = actions.REASON_MAX_CHARS


def force_unblock(model: str) -> str:
    """The session key of the box that unblocks `model` without a passing run."""
    return f"unblock_force_{model}"


def queue(kind: str, task: str, expected_stage: str, **extra: Any) -> None:
    """Button callback: remember what was asked and the stage the page showed then (a
    promotion sends it, so a page that went stale gets a conflict, not a surprise)."""
    st.session_state[PENDING] = {
        "kind": kind,
        "task": task,
        "expected_stage": expected_stage,
        **extra,
    }


def refusal(exc: ActionError) -> ActionError | None:
    """A refused promotion as sentences, one per thing in its way (the gate, the grade, the
    veto...), and whether ticking 'force past the gate' goes past them (None: the refusal
    reads as is)."""
    detail = exc.detail
    if isinstance(detail, dict) and detail and set(detail) <= set(actions.PROMOTION_REFUSALS):
        return ActionError(
            exc.status, actions.refusal_text(detail, force="Ticking 'force past the gate'")
        )
    return None


def readable(action: Callable[..., Any]) -> Callable[..., Any]:
    """The action, with its refusals turned into sentences by `refusal`."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return action(*args, **kwargs)
        except ActionError as exc:
            said = refusal(exc)
            if said is None:
                raise
            raise said from None

    return run


def done_text(pending: Mapping[str, Any], done: Mapping[str, Any]) -> str:
    """What an action did: the decision's sentence, or what an unblock left blocked."""
    if "reason" in done:
        return str(done["reason"])
    still = ", ".join(done["blocked"]) or "none"
    return f"Unblocked {pending['model']}; still blocked: {still}."


def perform(pending: Mapping[str, Any], principal: Principal) -> None:
    """Run the queued action with the reason typed; when done, forget cached reads, untick
    the force boxes and show the page again with what was done."""
    reason = str(st.session_state.get(REASON) or "").strip()
    if not reason:
        st.error("Give a reason first: it is recorded with the action and shown in the decision.")
        return
    done = apply(pending, principal, reason)
    if done is None:
        return
    st.cache_data.clear()
    st.session_state[FLASH] = done_text(pending, done)
    st.session_state[REASON] = ""
    # A forced action is decided each time: the boxes are unticked once it is done.
    st.session_state[FORCE_PROMOTION] = False
    if pending["kind"] == "unblock":
        st.session_state.pop(force_unblock(pending["model"]), None)
    st.rerun()


def apply(pending: Mapping[str, Any], principal: Principal, reason: str) -> Any:
    """Run the action `pending` names under the key's name with `reason` (any page's
    button: the Task page's, the Overview's roll back); what it did, or None when it was
    refused (the refusal is on the page)."""
    who = common.actor(principal)
    kind, task = pending["kind"], pending["task"]
    if kind == "promote":
        return common.act(
            readable(actions.promote),
            task,
            actor=who,
            reason=reason,
            veto=Settings().error_cost_veto,
            force=bool(st.session_state.get(FORCE_PROMOTION)),
            expected_stage=pending["expected_stage"],
        )
    if kind in ("rollback", "rearm"):
        move = actions.rollback if kind == "rollback" else actions.rearm
        return common.act(move, task, actor=who, reason=reason)
    if kind == "unblock":
        return common.act(
            actions.unblock,
            task,
            model=pending["model"],
            actor=who,
            reason=reason,
            force=bool(st.session_state.get(force_unblock(pending["model"]))),
        )
    return None

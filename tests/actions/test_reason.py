"""A person's reason is checked by the action itself, so every door refuses alike: empty
after stripping, longer than the API's limit, or holding a control character other than
tab and line feed is a 422 naming the field — and nothing is written (no decision, no audit
entry, no outbox event, no flag version)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.db import session_scope
from controlplane.errors import ActionError
from controlplane.models import AuditEntry, Decision, FlagHistory, OutboxEvent, Task
from controlplane.rollout import actions, repository
from controlplane.rollout.endpoints import ActionIn, KillIn, UnblockIn
from tests.actions.test_doors import cli, create_task
from tests.conftest import Api

VETO = 0.7
LIMIT = actions.REASON_MAX_CHARS

REFUSED = {
    "empty": "",
    "blank": " \t\n ",
    "too long": "x" * (LIMIT + 1),
    "a megabyte": "x" * 1_000_000,
    "NUL": "rolled back\x00",
    "bell": "why\x07",
    "escape": "\x1b[31mred",
    "carriage return": "one\rtwo",
    "DEL": "a\x7fb",
}
ACCEPTED = ("x" * LIMIT, "two lines\nand a\ttab", "unicode β ✓ \u202e")


def counts(api: Api) -> tuple[int, ...]:
    with session_scope(api.engine) as session:
        return tuple(
            session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Decision, AuditEntry, OutboxEvent, FlagHistory)
        )


def block(api: Api, task: str, model: str) -> None:
    with session_scope(api.engine) as session:
        found = session.scalars(select(Task).where(Task.name == task)).one()
        repository.block(session, found, model, None)


CALLS: dict[str, Callable[[Api, str, str], Any]] = {
    "promote": lambda api, task, reason: actions.promote(
        api.engine, task, actor="t", reason=reason, veto=VETO, force=True
    ),
    "rollback": lambda api, task, reason: actions.rollback(
        api.engine, task, actor="t", reason=reason
    ),
    "rearm": lambda api, task, reason: actions.rearm(api.engine, task, actor="t", reason=reason),
    "unblock": lambda api, task, reason: actions.unblock(
        api.engine, task, model="edge-v1", actor="t", reason=reason, force=True
    ),
    "kill": lambda api, task, reason: actions.kill(api.engine, actor="t", reason=reason),
}


def prepare(api: Api, action: str) -> str:
    """A task where `action` would be done with a good reason."""
    task = f"reason_{action}"
    create_task(api, task, "canary" if action in ("rollback", "rearm", "unblock") else "shadow")
    if action == "rearm":
        actions.rollback(api.engine, task, actor="setup", reason="setup")
    if action == "unblock":
        block(api, task, "edge-v1")
    return task


@pytest.mark.parametrize("action", list(CALLS))
def test_every_action_refuses_a_bad_reason_and_writes_nothing(api: Api, action: str) -> None:
    task = prepare(api, action)
    before = counts(api)
    for what, reason in REFUSED.items():
        with pytest.raises(ActionError) as refused:
            CALLS[action](api, task, reason)
        assert refused.value.status == 422, what
        assert str(refused.value.detail).startswith("reason: "), (what, refused.value.detail)
        assert len(str(refused.value.detail)) < 200, what  # never the reason echoed back
    assert counts(api) == before
    # The same action with a good reason (the longest allowed) is done.
    CALLS[action](api, task, "x" * LIMIT)
    assert counts(api) != before


def test_lift_refuses_a_bad_reason(api: Api) -> None:
    actions.kill(api.engine, actor="t", reason="drill")
    before = counts(api)
    for what, reason in REFUSED.items():
        with pytest.raises(ActionError) as refused:
            actions.lift(api.engine, actor="t", reason=reason)
        assert refused.value.status == 422 and "reason: " in str(refused.value.detail), what
    assert counts(api) == before
    actions.lift(api.engine, actor="t", reason="drill over")


def test_tabs_line_breaks_and_any_printable_text_are_kept(api: Api) -> None:
    for reason in ACCEPTED:
        assert actions.check_reason(reason) == reason


def test_the_api_declares_the_same_limit() -> None:
    for model in (ActionIn, UnblockIn, KillIn):
        assert model.model_fields["reason"].metadata[-1].max_length == LIMIT, model


def test_the_api_and_the_command_refuse_what_the_function_refuses(api: Api) -> None:
    task = prepare(api, "rollback")
    before = counts(api)
    for reason in (" \t ", "stop\x07now"):
        answer = api.client.post(
            f"/v1/tasks/{task}/rollback", json={"reason": reason}, headers=api.headers()
        )
        assert answer.status_code == 422, answer.text
        assert "reason: " in answer.text
    done = cli(api, "rollback", task, "--reason", "   ", ok=False)
    assert done.returncode == 1 and "reason: " in done.stderr, done.stderr
    assert counts(api) == before

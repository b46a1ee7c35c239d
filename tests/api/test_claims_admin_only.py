"""README claim: promote, rollback, rearm, unblock, kill and lift are admin-only. Every key
without `admin` (each other scope alone, and all of them together) gets 403 on each, and
nothing changes: not the stage, not a flag, not the audit log, not a decision."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text

from controlplane.auth.scopes import SCOPES
from controlplane.db import session_scope
from controlplane.keys.service import create_key
from controlplane.models.tasks import Task
from controlplane.rollout import repository
from tests.conftest import Api

NON_ADMIN = [s for s in SCOPES if s != "admin"]
ACTIONS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/tasks/ticket_classify/promote", {"reason": "try", "force": True}),
    ("/v1/tasks/ticket_classify/rollback", {"reason": "try"}),
    ("/v1/tasks/invoice_extract/rearm", {"reason": "try"}),
    ("/v1/tasks/invoice_extract/unblock", {"model": "small@3", "reason": "try", "force": True}),
    ("/v1/kill", {"reason": "try"}),
    ("/v1/kill/lift", {"reason": "try"}),
]
# Every table an action writes to (stage, flags and their history, decisions, blocks,
# audit, outbox).
STATE_TABLES = (
    "tasks",
    "flags",
    "flag_history",
    "flag_state",
    "decisions",
    "blocked_models",
    "audit_log",
    "outbox_events",
)


def state(api: Api) -> dict[str, list[tuple[Any, ...]]]:
    with api.engine.connect() as conn:
        return {
            table: sorted(
                (tuple(row) for row in conn.execute(text(f"SELECT * FROM {table}"))), key=repr
            )
            for table in STATE_TABLES
        }


def admin(api: Api, path: str, body: dict[str, Any]) -> int:
    return int(api.client.post(path, json=body, headers=api.headers("admin")).status_code)


def test_non_admin_keys_are_refused_every_stage_action(api: Api) -> None:
    with session_scope(api.engine) as session:
        _, every = create_key(session, name="all-but-admin", scopes=NON_ADMIN, actor="test")
    # A live rollout to act on: ticket_classify in canary, invoice_extract rolled back
    # with its edge model blocked.
    assert admin(api, "/v1/tasks/ticket_classify/promote", {"reason": "go", "force": True}) == 200
    assert admin(api, "/v1/tasks/invoice_extract/promote", {"reason": "go", "force": True}) == 200
    assert admin(api, "/v1/tasks/invoice_extract/rollback", {"reason": "bad"}) == 200
    with session_scope(api.engine) as session:  # as an automatic rollback leaves it
        task = session.scalars(select(Task).where(Task.name == "invoice_extract")).one()
        repository.block(session, task, "small@3", None)
    keys = {scope: api.keys[scope] for scope in NON_ADMIN} | {"+".join(NON_ADMIN): every}

    before = state(api)
    assert before["audit_log"] and before["decisions"] and before["blocked_models"]
    for name, key in keys.items():
        for path, body in ACTIONS:
            answer = api.client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 403, (name, path, answer.status_code)
            assert "admin" in answer.json()["detail"], (name, path, answer.json())
    assert state(api) == before
    task = api.client.get("/v1/tasks/ticket_classify", headers=api.headers("read")).json()
    assert task["stage"] == "canary"

    # The same requests are well formed: with the admin key each is answered on its merits
    # (no 403, no 422), and those that apply change the state.
    for path, body in ACTIONS:
        assert admin(api, path, body) in (200, 409), path
    assert state(api) != before


@pytest.mark.parametrize("scope", NON_ADMIN)
def test_a_non_admin_key_cannot_act_on_an_unknown_task_either(api: Api, scope: str) -> None:
    # Authorization comes before the lookup: a 403, not a 404 revealing which tasks exist.
    for action in ("promote", "rollback", "rearm"):
        answer = api.client.post(
            f"/v1/tasks/no_such_task/{action}", json={"reason": "try"}, headers=api.headers(scope)
        )
        assert answer.status_code == 403, (scope, action)

"""Every action does the same whichever door calls it: the API, the `shadowplane` command
(a process of its own on the same database, forked from one that imported the app), or the action function itself. For each action
and door: the same audit entry, the same outbox event, the same webhook body — once the
parts that name the door (the actor), the task and the row ids are set aside.

Each test runs the action through the door on one task and through the function on
another task in the same state, and compares what each wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.alerts import actions as alert_actions
from controlplane.db import session_scope
from controlplane.keys import actions as key_actions
from controlplane.models import Alert, AuditEntry, OutboxEvent, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import webhook_body
from controlplane.rollout import actions, repository
from controlplane.rollout.configs import apply_tasks
from tests.conftest import Api, cloned_database
from tests.liveapi import Done, run_cli
from tests.test_isolation import config

ACTOR = "direct-test"
VETO = 0.7
REASON = "the pager went off"


def cli(api: Api, *args: str, ok: bool = True) -> Done:
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": api.url}
    env.pop("SHADOWPLANE_REDIS_URL", None)
    workdir = Path(tempfile.mkdtemp(prefix="shadowplane-cli-"))
    try:
        done = run_cli(list(args), env, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


@dataclass
class Marks:
    audit: int
    outbox: int


def marks(api: Api) -> Marks:
    with session_scope(api.engine) as session:
        return Marks(
            session.scalar(select(func.coalesce(func.max(AuditEntry.id), 0))) or 0,
            session.scalar(select(func.coalesce(func.max(OutboxEvent.id), 0))) or 0,
        )


# Row ids, and the config hash (it covers the task name, which differs by design).
DROPPED = {"decision", "decision_id", "alert", "id", "config_hash"}


def _neutral(value: Any, names: dict[str, str]) -> Any:
    """`value` with the task's (or key's) name and the actor replaced, ids dropped."""
    if isinstance(value, dict):
        return {k: _neutral(v, names) for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list):
        return [_neutral(v, names) for v in value]
    if isinstance(value, str):
        for name, placeholder in names.items():
            value = value.replace(name, placeholder)
    return value


def written(api: Api, since: Marks, names: dict[str, str]) -> dict[str, Any]:
    """The audit entries and outbox events (with their webhook bodies) written since."""
    with session_scope(api.engine) as session:
        audit = session.scalars(
            select(AuditEntry).where(AuditEntry.id > since.audit).order_by(AuditEntry.id)
        ).all()
        events = session.scalars(
            select(OutboxEvent).where(OutboxEvent.id > since.outbox).order_by(OutboxEvent.id)
        ).all()
        rows = {
            "audit": [
                {"actor": a.actor, "action": a.action, "task": a.task, "details": a.details}
                for a in audit
            ],
            "events": [
                {
                    "kind": e.kind,
                    "task": e.task,
                    "document": e.document,
                    "body": webhook_body(
                        e.document,
                        public_url="https://shadowplane.example",
                        event_id=0,
                        delivery_id="d",
                        sent_at=datetime(2026, 12, 1, tzinfo=UTC),
                    ),
                }
                for e in events
            ],
        }
    return _neutral(rows, names)


def create_task(api: Api, name: str, stage: str = "shadow") -> None:
    apply_tasks(api.engine, [{**config(name), "stage": "shadow"}], actor="setup")
    if stage == "canary":
        actions.promote(api.engine, name, actor="setup", reason="setup", force=True, veto=VETO)


def actor_of(door: str, api: Api) -> str:
    return {"api": "admin-key", "cli": f"cli:{os.environ.get('USER') or _user()}"}[door]


def _user() -> str:
    import getpass

    return getpass.getuser()


@dataclass(frozen=True)
class Spec:
    """An action: how to set a task up for it, and how each door calls it."""

    setup: Callable[[Api, str], None]
    api: Callable[[Api, str], Any]
    cli: Callable[[str], list[str]]
    direct: Callable[[Api, str], Any]
    events: list[str]  # the kinds of outbox events it writes
    audit: list[str]  # the audit actions it writes


def _post(path: str, body: dict[str, Any]) -> Callable[[Api, str], Any]:
    def call(api: Api, task: str) -> Any:
        answer = api.client.post(path.format(task=task), json=body, headers=api.headers())
        assert answer.status_code in (200, 201), answer.text
        return answer.json()

    return call


def _rolled_back(api: Api, task: str) -> None:
    create_task(api, task, "canary")
    actions.rollback(api.engine, task, actor="setup", reason="setup")


def _blocked(api: Api, task: str) -> None:
    create_task(api, task, "canary")
    with session_scope(api.engine) as session:
        found = session.scalars(select(Task).where(Task.name == task)).one()
        repository.block(session, found, "small@3", None)


def _alert_open(api: Api, task: str) -> None:
    create_task(api, task, "canary")
    with session_scope(api.engine) as session:
        found = session.scalars(select(Task).where(Task.name == task)).one()
        now = utcnow()
        session.add(
            Alert(
                task_id=found.id,
                kind="no_traffic",
                state="open",
                window_start=datetime(2026, 11, 30, 2, tzinfo=UTC),
                value=0.0,
                baseline=None,
                message=f"No results for 3 windows on {task}",
                opened_at=now,
                updated_at=now,
            )
        )


def _alert_id(api: Api, task: str) -> int:
    with session_scope(api.engine) as session:
        return int(
            session.scalars(
                select(Alert.id).join(Task, Task.id == Alert.task_id).where(Task.name == task)
            ).one()
        )


SPECS: dict[str, Spec] = {
    "promote": Spec(
        setup=lambda api, t: create_task(api, t, "shadow"),
        api=_post(
            "/v1/tasks/{task}/promote",
            {"reason": REASON, "force": True, "expected_stage": "shadow"},
        ),
        cli=lambda t: ["promote", t, "--reason", REASON, "--force", "--expected-stage", "shadow"],
        direct=lambda api, t: actions.promote(
            api.engine,
            t,
            actor=ACTOR,
            reason=REASON,
            force=True,
            expected_stage="shadow",
            veto=VETO,
        ),
        events=["decision"],
        audit=["task.promote"],
    ),
    "rollback": Spec(
        setup=lambda api, t: create_task(api, t, "canary"),
        api=_post("/v1/tasks/{task}/rollback", {"reason": REASON}),
        cli=lambda t: ["rollback", t, "--reason", REASON],
        direct=lambda api, t: actions.rollback(api.engine, t, actor=ACTOR, reason=REASON),
        events=["decision"],
        audit=["task.rollback"],
    ),
    "rearm": Spec(
        setup=_rolled_back,
        api=_post("/v1/tasks/{task}/rearm", {"reason": REASON}),
        cli=lambda t: ["rearm", t, "--reason", REASON],
        direct=lambda api, t: actions.rearm(api.engine, t, actor=ACTOR, reason=REASON),
        events=["decision"],
        audit=["task.rearm"],
    ),
    "unblock": Spec(
        setup=_blocked,
        # Forced: no eval run exists here (tests/evalsets/test_unblock_gate.py has the gate).
        api=_post(
            "/v1/tasks/{task}/unblock", {"model": "small@3", "reason": REASON, "force": True}
        ),
        cli=lambda t: ["unblock", t, "--model", "small@3", "--reason", REASON, "--force"],
        direct=lambda api, t: actions.unblock(
            api.engine, t, model="small@3", actor=ACTOR, reason=REASON, force=True
        ),
        events=["change"],
        audit=["task.unblock"],
    ),
    "acknowledge": Spec(
        setup=_alert_open,
        api=lambda api, t: _post(f"/v1/alerts/{_alert_id(api, t)}/ack", {"note": REASON})(api, t),
        cli=lambda t: [],  # filled in by the test: the alert's id is known after setup
        direct=lambda api, t: alert_actions.acknowledge(
            api.engine, _alert_id(api, t), actor=ACTOR, note=REASON
        ),
        events=["alert"],
        audit=["alert.ack"],
    ),
}


@pytest.mark.parametrize("door", ["api", "cli"])
@pytest.mark.parametrize("action", list(SPECS))
def test_a_task_action_writes_the_same_through_every_door(api: Api, action: str, door: str) -> None:
    spec = SPECS[action]
    through_door, direct = f"{action}_door", f"{action}_direct"
    spec.setup(api, through_door)
    spec.setup(api, direct)

    before = marks(api)
    if door == "api":
        spec.api(api, through_door)
    elif action == "acknowledge":
        cli(api, "alerts", "ack", str(_alert_id(api, through_door)), "--note", REASON)
    else:
        cli(api, *spec.cli(through_door))
    by_door = written(api, before, {through_door: "<task>", actor_of(door, api): "<actor>"})

    before = marks(api)
    spec.direct(api, direct)
    by_function = written(api, before, {direct: "<task>", ACTOR: "<actor>"})

    assert [a["action"] for a in by_door["audit"]] == spec.audit
    assert [e["kind"] for e in by_door["events"]] == spec.events
    assert by_door == by_function


@pytest.mark.parametrize("door", ["api", "cli"])
def test_kill_and_lift_write_the_same_through_every_door(api: Api, door: str) -> None:
    create_task(api, "some_task", "canary")
    names = {actor_of(door, api): "<actor>", ACTOR: "<actor>"}

    def through_door(what: str) -> dict[str, Any]:
        before = marks(api)
        if door == "api":
            path = "/v1/kill" if what == "kill" else "/v1/kill/lift"
            assert api.client.post(path, json={"reason": REASON}, headers=api.headers()).is_success
        else:
            cli(api, what, "--reason", REASON)
        return written(api, before, names)

    def directly(what: str) -> dict[str, Any]:
        before = marks(api)
        getattr(actions, what)(api.engine, actor=ACTOR, reason=REASON)
        return written(api, before, names)

    kill_door = through_door("kill")
    lift_door = through_door("lift")
    kill_direct, lift_direct = directly("kill"), directly("lift")
    assert [e["kind"] for e in kill_door["events"]] == ["decision"]
    assert [a["action"] for a in kill_door["audit"]] == ["flags.kill"]
    assert kill_door == kill_direct and lift_door == lift_direct


@pytest.mark.parametrize("door", ["api", "cli"])
def test_task_apply_writes_the_same_through_every_door(api: Api, door: str, tmp_path: Path) -> None:
    door_task, direct_task = "applied_door", "applied_direct"
    before = marks(api)
    if door == "api":
        answer = api.client.post("/v1/tasks", json=config(door_task), headers=api.headers())
        assert answer.status_code == 201
    else:
        path = tmp_path / "task.json"
        path.write_text(json.dumps(config(door_task)))
        cli(api, "tasks", "apply", "-f", str(path))
    by_door = written(api, before, {door_task: "<task>", actor_of(door, api): "<actor>"})
    before = marks(api)
    apply_tasks(api.engine, [config(direct_task)], actor=ACTOR)
    by_function = written(api, before, {direct_task: "<task>", ACTOR: "<actor>"})
    assert [a["action"] for a in by_door["audit"]] == ["task.create"]
    # A config is no decision, but it is a change: audited and announced.
    assert [(e["kind"], e["document"]["action"]) for e in by_door["events"]] == [
        ("change", "task.create")
    ]
    assert by_door == by_function
    flags = api.client.get("/v1/flags", headers=api.headers("flags:read")).json()["flags"]
    assert flags[door_task]["version"] == flags[direct_task]["version"] == 1


def test_keys_create_and_revoke_write_the_same_through_the_command(api: Api) -> None:
    names = {actor_of("cli", api): "<actor>", ACTOR: "<actor>", "door-key": "<key>"}
    names["direct-key"] = "<key>"
    before = marks(api)
    cli(api, "keys", "create", "--name", "door-key", "--scope", "read")
    cli(api, "keys", "revoke", "door-key")
    by_door = written(api, before, names)
    before = marks(api)
    key_actions.create_key(api.engine, name="direct-key", scopes=["read"], actor=ACTOR)
    key_actions.revoke_key(api.engine, name="direct-key", actor=ACTOR)
    by_function = written(api, before, names)
    assert [a["action"] for a in by_door["audit"]] == ["key.create", "key.revoke"]
    assert [e["document"]["action"] for e in by_door["events"]] == ["key.create", "key.revoke"]
    assert "sp_" not in json.dumps(by_door["events"])  # never the key itself
    assert by_door == by_function


def test_a_refused_action_is_refused_alike_through_every_door(api: Api) -> None:
    create_task(api, "moved_task", "shadow")
    actions.promote(api.engine, "moved_task", actor=ACTOR, reason="first", force=True, veto=VETO)
    before = marks(api)
    answer = api.client.post(
        "/v1/tasks/moved_task/promote",
        json={"reason": REASON, "force": True, "expected_stage": "shadow"},
        headers=api.headers(),
    )
    assert answer.status_code == 409
    assert "moved_task is in canary:50, not shadow" in answer.json()["detail"]
    done = cli(
        api, "promote", "moved_task", "--reason", REASON, "--expected-stage", "shadow", ok=False
    )
    assert done.returncode == 1 and answer.json()["detail"] in done.stderr
    # Nothing written by either refusal.
    assert written(api, before, {}) == {"audit": [], "events": []}


@pytest.fixture
def other_pg_url(pg_template: str) -> Iterator[str]:
    """A second fresh PostgreSQL database (the pg_url fixture's, once more)."""
    with cloned_database() as url:
        yield url


def _regressed(api: Api, task: str, start: datetime) -> datetime:
    """The task in canary since an hour before `start`, with three windows from `start` on
    whose long bucket breaches its rule; returns the clock at which the third one closes."""
    from sqlalchemy import update

    from tests.rollout.test_rollback_e2e import LATENESS, WINDOW, window_results
    from tests.rollout.test_rollback_e2e import config as regressing
    from tests.windowdata import post_all

    apply_tasks(api.engine, [regressing(task)], actor="setup")
    actions.promote(api.engine, task, actor="setup", reason="setup", force=True, veto=VETO)
    with session_scope(api.engine) as session:
        earlier = start - timedelta(hours=1)
        session.execute(
            update(Task)
            .where(Task.name == task)
            .values(created_at=earlier, stage_changed_at=earlier)
        )
    for k in range(3):
        post_all(api, window_results(task, start, k, {"2048+": 0.4}))
    return start + timedelta(seconds=3 * WINDOW + LATENESS)


def _keys(value: Any, depth: int = 2) -> Any:
    """The shape of a document: its keys, `depth` levels down (values set aside; a value
    such as the last window is a dict for the policy and null for a person)."""
    if isinstance(value, dict) and depth > 0:
        return {k: _keys(v, depth - 1) for k, v in value.items()}
    return None


@pytest.mark.integration
def test_a_policy_rollback_writes_the_same_through_the_pass_and_the_tick_command(
    pg_url: str, other_pg_url: str
) -> None:
    """The scheduler is a door too: the same regression, judged by the in-process pass on
    one database and by `shadowplane tick --now` (a process of its own) on another, writes the same
    audit entry and the same outbox event; and the policy's webhook body has the shape of a
    person's rollback through the API."""
    from contextlib import ExitStack, contextmanager

    from controlplane.scheduler import run_pass
    from tests.conftest import make_api
    from tests.rollout.test_rollback_e2e import WINDOW

    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW + 8 * WINDOW)
    task = "regressed"
    names = {task: "<task>"}
    with ExitStack() as stack:
        in_process, by_command = (
            stack.enter_context(contextmanager(make_api)(url)) for url in (pg_url, other_pg_url)
        )
        clock = _regressed(in_process, task, start)
        assert _regressed(by_command, task, start) == clock

        before = marks(in_process)
        report = run_pass(in_process.engine, clock, veto=VETO)
        by_pass = written(in_process, before, names)
        assert [(d["task"], d["action"], d["actor"]) for d in report.decisions] == [
            (task, "rollback", "policy")
        ]

        before = marks(by_command)
        done = cli(by_command, "tick", "--now", clock.isoformat())
        assert "rollback" in done.stdout and task in done.stdout, done.stdout
        by_tick = written(by_command, before, names)

        assert [(a["actor"], a["action"]) for a in by_pass["audit"]] == [
            ("policy", "task.rollback")
        ]
        assert [(e["kind"], e["task"]) for e in by_pass["events"]] == [("decision", "<task>")]
        assert by_pass["audit"][0]["details"].keys() == by_tick["audit"][0]["details"].keys()
        assert by_pass == by_tick

        # A person's rollback through the API: the same document and body, key for key.
        create_task(in_process, "by_hand", "canary")
        before = marks(in_process)
        _post("/v1/tasks/{task}/rollback", {"reason": REASON})(in_process, "by_hand")
        by_hand = written(in_process, before, {"by_hand": "<task>"})
        assert [(e["kind"], e["task"]) for e in by_hand["events"]] == [("decision", "<task>")]
        policy_event, hand_event = by_pass["events"][0], by_hand["events"][0]
        assert _keys(policy_event["document"]) == _keys(hand_event["document"])
        assert _keys(policy_event["body"]) == _keys(hand_event["body"])
        assert by_pass["audit"][0]["details"].keys() == by_hand["audit"][0]["details"].keys()
        assert policy_event["document"]["stage_after"] == hand_event["document"]["stage_after"]

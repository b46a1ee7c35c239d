"""Hostile review of reading stored configs after an upgrade (400b6ee), sending a task whose
stored config does not parse to the cloud (c4a8cdf) and the JSON Schema type check
(`_converted`, changed in 400b6ee), as an SRE upgrading a running system and an operator
applying configs, on real PostgreSQL through the API, the scheduler's functions and the
database. Each defect was a strict xfail, and each is fixed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from controlplane.catalog import service as catalog
from controlplane.catalog.service import RuntimeCache
from controlplane.db import session_scope
from controlplane.models import OutboxEvent
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import ground, run_pass
from tests.conftest import Api, make_api
from tests.test_isolation import store_broken_config

pytestmark = pytest.mark.integration

NAME = "fragile_task"


def label_config(name: str, **extra: Any) -> dict[str, Any]:
    """A label task that goes to canary at 50% in one step."""
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "promotion": {"canary_steps": [50]},
        **extra,
    }


def _config(**extra: Any) -> dict[str, Any]:
    return label_config(NAME, **extra)


def canary_app(pg_url: str, name: str) -> Iterator[Api]:
    """An app whose task `name` (label_config) is in canary at 50%."""
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, label_config(name), actor="test")
        promoted = api.client.post(
            f"/v1/tasks/{name}/promote",
            json={"reason": "test canary", "force": True},
            headers=api.headers(),
        )
        assert promoted.status_code == 200, promoted.text
        yield api


@pytest.fixture
def canary(pg_url: str) -> Iterator[Api]:
    """An app whose `fragile_task` is in canary at 50%."""
    yield from canary_app(pg_url, NAME)


def _store_unparsable(engine: Engine) -> int:
    """A new current version of the task's config that this release cannot parse."""
    return store_broken_config(engine, NAME)


def flag_of(api: Api, name: str) -> dict[str, Any]:
    """The task's flag, as a router reads it."""
    answer = api.client.get(f"/v1/flags/{name}", headers=api.headers("flags:read"))
    assert answer.status_code == 200, answer.text
    flag: dict[str, Any] = answer.json()
    return flag


def flag_announcements(api: Api, name: str) -> list[dict[str, Any]]:
    """The task's `flag.*` change events in the outbox (flag.grounded, flag.ungrounded),
    oldest first."""
    with session_scope(api.engine) as session:
        documents = session.scalars(
            select(OutboxEvent.document)
            .where(OutboxEvent.task == name, OutboxEvent.kind == "change")
            .order_by(OutboxEvent.id)
        ).all()
    return [dict(d) for d in documents if str(d["action"]).startswith("flag.")]


def _flag(api: Api) -> dict[str, Any]:
    return flag_of(api, NAME)


def _wait_for_a_lock_wait(engine: Engine) -> None:
    """Until another backend of this database waits on a lock (the flag state row)."""
    deadline = time.monotonic() + 30
    with engine.connect() as connection:
        while time.monotonic() < deadline:
            waiting = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
            if waiting:
                return
            connection.rollback()
            time.sleep(0.02)
    raise AssertionError("no pass waited on the flag state lock")


# --- 1. ground_unparsed decides before it locks: a fix applied meanwhile is undone -----


def test_a_fix_applied_while_a_pass_grounds_the_task_is_not_undone(canary: Api) -> None:
    api = canary
    broken = _store_unparsable(api.engine)
    catalog._runtimes.clear()  # as after an upgrade: nothing parsed in memory
    assert ground(api.engine) == [NAME]
    assert _flag(api)["killed"] is True
    # The operator applies a valid config; its transaction holds the flag state lock
    # while a pass (the Celery plan job, another process) grounds the broken tasks.
    fix = Session(api.engine)
    grounded: list[list[str]] = []
    other = threading.Thread(target=lambda: grounded.append(ground(api.engine)))
    try:
        applied = apply_config(fix, _config(shadow_rate=0.2), actor="operator")
        assert applied.version == broken + 1 and applied.changed
        other.start()
        _wait_for_a_lock_wait(api.engine)
        fix.commit()
    finally:
        fix.close()
    other.join(timeout=30)
    assert not other.is_alive()
    # Later passes, in a process that reads the configs afresh: the config parses.
    catalog._runtimes.clear()
    report = run_pass(api.engine, datetime.now(UTC))
    assert report.failed == []
    flag = _flag(api)
    assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("canary", False, 50), (
        grounded,
        flag,
    )


def test_a_pass_just_after_a_fix_does_not_ground_the_fixed_task(canary: Api) -> None:
    api = canary
    _store_unparsable(api.engine)
    # The process's cache of configs, its current versions read again after an hour rather
    # than a second: what a pass within that second after the apply reads, made certain.
    key = api.engine.url.render_as_string(hide_password=False)
    catalog._runtimes[key] = RuntimeCache(current_seconds=3600)
    run_pass(api.engine, datetime.now(UTC))
    assert _flag(api)["killed"] is True
    fixed = api.client.post("/v1/tasks", json=_config(shadow_rate=0.2), headers=api.headers())
    assert fixed.status_code in (200, 201), fixed.text
    assert _flag(api)["killed"] is False  # the apply publishes its stage's flag
    run_pass(api.engine, datetime.now(UTC))
    # Later passes, the current versions read again.
    catalog._runtimes.pop(key)
    report = run_pass(api.engine, datetime.now(UTC))
    assert report.failed == []
    flag = _flag(api)
    assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("canary", False, 50), flag


# --- 2. after a kill and a lift, the flag of a task left killed says the kill's reason ---


def test_a_task_left_killed_by_a_lift_says_why(canary: Api) -> None:
    api = canary
    # The SRE throws the kill switch for the upgrade; the new release cannot parse the task's
    # stored config; the SRE lifts the kill switch.
    killed = api.client.post("/v1/kill", json={"reason": "upgrade"}, headers=api.headers())
    assert killed.status_code == 200, killed.text
    version = _store_unparsable(api.engine)
    catalog._runtimes.clear()
    run_pass(api.engine, datetime.now(UTC))
    lifted = api.client.post("/v1/kill/lift", json={"reason": "upgraded"}, headers=api.headers())
    assert lifted.status_code == 200, lifted.text
    run_pass(api.engine, datetime.now(UTC))
    flag = _flag(api)
    assert flag["killed"] is True  # as documented: left on the cloud
    assert f"stored config version {version} does not parse" in flag["reason"], flag


def test_grounding_a_task_whose_config_does_not_parse_is_announced(canary: Api) -> None:
    api = canary
    version = _store_unparsable(api.engine)
    catalog._runtimes.clear()
    run_pass(api.engine, datetime.now(UTC))
    run_pass(api.engine, datetime.now(UTC))  # grounded once: announced once
    audit = api.client.get(f"/v1/audit?task={NAME}", headers=api.headers())
    assert audit.status_code == 200, audit.text
    grounded = [e for e in audit.json()["entries"] if e["action"] == "flag.grounded"]
    assert [e["details"]["cause"] for e in grounded] == ["config_unparsed"], grounded
    said = flag_announcements(api, NAME)
    explanations = [d["explanation"] for d in said if d["action"] == "flag.grounded"]
    assert len(explanations) == 1, said
    assert f"stored config version {version} does not parse" in explanations[0], explanations


def test_a_canary_whose_config_does_not_parse_is_rolled_back_before_its_fix(
    canary: Api,
) -> None:
    """The SRE rolls the canary back first: applying the fix would publish the canary's
    flag again (the edge serving) before a rollback could follow it."""
    api = canary
    _store_unparsable(api.engine)
    catalog._runtimes.clear()
    run_pass(api.engine, datetime.now(UTC))
    rolled = api.client.post(
        f"/v1/tasks/{NAME}/rollback", json={"reason": "upgrade broke it"}, headers=api.headers()
    )
    assert rolled.status_code == 200, rolled.text
    assert (rolled.json()["stage_before"], rolled.json()["stage_after"]) == (
        "canary",
        "rolled_back",
    )
    flag = _flag(api)
    assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("rolled_back", True, 0)
    run_pass(api.engine, datetime.now(UTC))
    assert _flag(api)["version"] == flag["version"]  # the pass leaves it as it is
    # Rolled back once: a second is refused as for any task.
    again = api.client.post(
        f"/v1/tasks/{NAME}/rollback", json={"reason": "again"}, headers=api.headers()
    )
    assert again.status_code == 409, again.text
    # The fix applied: the flag follows the stage, which keeps the edge out.
    fixed = api.client.post("/v1/tasks", json=_config(shadow_rate=0.2), headers=api.headers())
    assert fixed.status_code in (200, 201), fixed.text
    flag = _flag(api)
    assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("rolled_back", False, 0)
    # Any other move still needs a config that parses.
    broken = _store_unparsable(api.engine)
    catalog._runtimes.clear()
    rearm = api.client.post(
        f"/v1/tasks/{NAME}/rearm", json={"reason": "try again"}, headers=api.headers()
    )
    assert rearm.status_code == 409, rearm.text
    assert f"stored config version {broken} of {NAME} does not parse" in rearm.text, rearm.text


# --- 3. the JSON Schema type check passes over values of the wrong type -----------------


BASE = {"task": "typed_task", "comparator": {"kind": "label"}}
RULE = {"metric": "agreement", "op": ">=", "threshold": 0.9}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BASE, "fixed_costs": {"gpu": "10"}}, "fixed_costs"),
        ({**BASE, "fixed_costs": {"gpu": True}, "fixed_cost_per_day": 1}, "fixed_costs"),
        ({**BASE, "rollback": {"confidence": "0.95"}}, "rollback.confidence"),
        ({**BASE, "rollback": {"rules": [{**RULE, "confidence": " 0.9 "}]}}, "confidence"),
    ],
    ids=["price-as-text", "price-as-true", "confidence-as-text", "rule-confidence-as-text"],
)
def test_a_value_of_the_wrong_json_type_is_refused(
    pg_api: Api, body: dict[str, Any], field: str
) -> None:
    answer = pg_api.client.post("/v1/tasks", json=body, headers=pg_api.headers())
    assert answer.status_code == 422, answer.text
    assert field in answer.text, answer.text
    listed = pg_api.client.get("/v1/tasks/typed_task", headers=pg_api.headers("read"))
    assert listed.status_code == 404, listed.text

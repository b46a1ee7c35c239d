"""The flag publishes the task's `grading.repeat_rate`: in every stage (`cloud` too) and
under the kill switch; a change of it is a new flag version kept in the flag's history; a
flag stored before flags carried it is killed with a rate of 0; OFREP carries it as a
number in its metadata."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from controlplane.catalog.schemas import parse_config
from controlplane.db import session_scope
from controlplane.models import Flag, FlagState, Task
from controlplane.rollout import flags
from controlplane.rollout.flags import ROUTING_FIELDS, derive
from tests.conftest import TICKET_TASK, Api
from tests.liveapi import wait_until


def settled(api: Api) -> None:
    """Wait until the app's flag copy holds the database's current revision."""
    with api.engine.connect() as conn:
        revision = conn.scalar(select(FlagState.revision).where(FlagState.id == 1))
    copy = api.client.app.state.flag_copy  # type: ignore[attr-defined]
    wait_until(lambda: copy.snapshot().revision == revision, "the flag copy to catch up")


CONFIG = parse_config({**TICKET_TASK, "grading": {"repeat_rate": 0.2}})


def test_every_stage_and_the_kill_switch_publish_the_repeat_rate() -> None:
    assert "repeat_rate" in ROUTING_FIELDS
    for stage, step in (("cloud", 0), ("shadow", 0), ("canary", 1), ("full", 0)):
        assert derive(stage, step, CONFIG, False)["repeat_rate"] == 0.2, stage
        assert derive(stage, step, CONFIG, True)["repeat_rate"] == 0.2, stage
    assert derive("rolled_back", 0, CONFIG, True)["repeat_rate"] == 0.2
    # The default of a config that says nothing: the field guide's 1%.
    assert derive("shadow", 0, parse_config(TICKET_TASK), False)["repeat_rate"] == 0.01


def _flag(api: Api) -> dict[str, Any]:
    response = api.client.get("/v1/flags/ticket_classify", headers=api.headers("flags:read"))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_new_repeat_rate_is_a_new_flag_version_in_the_history(api: Api) -> None:
    before = _flag(api)
    assert before["repeat_rate"] == 0.01
    changed = api.client.post(
        "/v1/tasks", json={**TICKET_TASK, "grading": {"repeat_rate": 0.25}}, headers=api.headers()
    )
    assert changed.status_code == 201, changed.text
    after = _flag(api)
    assert (after["version"], after["repeat_rate"]) == (before["version"] + 1, 0.25)
    history = api.client.get("/v1/flags/ticket_classify/history", headers=api.headers("read"))
    versions = history.json()["versions"]
    assert [v["fields"]["repeat_rate"] for v in versions] == [0.01, 0.25]
    assert versions[-1]["version"] == after["version"]
    # Another grading setting is not a routing field: the flag stays as it is.
    same = api.client.post(
        "/v1/tasks",
        json={**TICKET_TASK, "grading": {"repeat_rate": 0.25, "min_results": 7}},
        headers=api.headers(),
    )
    assert same.status_code == 201, same.text
    assert _flag(api)["version"] == after["version"]


def test_the_kill_switch_keeps_the_repeat_rate(api: Api) -> None:
    killed = api.client.post("/v1/kill", json={"reason": "incident"}, headers=api.headers())
    assert killed.status_code == 200, killed.text
    flag = _flag(api)
    assert (flag["killed"], flag["shadow_rate"], flag["repeat_rate"]) == (True, 0.0, 0.01)


def test_a_flag_stored_without_a_repeat_rate_is_killed_with_none(api: Api) -> None:
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == "ticket_classify")).one()
        flag = session.get(Flag, task.id)
        assert flag is not None
        flag.document = {k: v for k, v in flag.document.items() if k != "repeat_rate"}
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == "ticket_classify")).one()
        stored = flags.publish_killed(session, task, "config unreadable")
        assert stored is not None
        assert (stored.document["killed"], stored.document["repeat_rate"]) == (True, 0.0)


def test_ofrep_metadata_carries_the_repeat_rate_as_a_number(api: Api) -> None:
    changed = api.client.post(
        "/v1/tasks", json={**TICKET_TASK, "grading": {"repeat_rate": 0.125}}, headers=api.headers()
    )
    assert changed.status_code == 201, changed.text
    settled(api)
    response = api.client.post(
        "/ofrep/v1/evaluate/flags/ticket_classify",
        json={"context": {"targetingKey": "s-1", "input_tokens": 10}},
        headers=api.headers("flags:read"),
    )
    assert response.status_code == 200, response.text
    metadata = response.json()["metadata"]
    assert metadata["repeat_rate"] == 0.125 and type(metadata["repeat_rate"]) is float
    # The other fields as the flag has them (null ones are left out of OFREP metadata).
    assert metadata == {k: v for k, v in _flag(api).items() if v is not None}

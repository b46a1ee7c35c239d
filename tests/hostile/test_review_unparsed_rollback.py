"""Hostile review of rolling back a task whose stored config does not parse (4a23793:
`_move(..., unparsed=True)`, `change_stage(config=None)` keeping the flag on the cloud
under rolled_back) and of announcing `flag.ungrounded` when a valid config frees a flag
(e99ff74, rollout/configs.py), as an SRE woken at night and a webhook receiver, on real
PostgreSQL through the API and the scheduler's functions.

The announcements follow the policy's hold on a flag, "so a start is always paired with
its end" (tests/hostile/test_review_grounding_announced.py; docs/http-api.md). Each defect
was a strict xfail, and each is fixed: the hold of a config that does not parse is
announced once by whichever path finds it first, and ended by the apply that fixes it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.catalog import service as catalog
from controlplane.scheduler import run_pass
from tests.conftest import Api
from tests.hostile.test_review_upgrade_configs import (
    canary_app,
    flag_announcements,
    flag_of,
    label_config,
)
from tests.test_isolation import store_broken_config

pytestmark = pytest.mark.integration

NAME = "unparsed_rollback_task"


@pytest.fixture
def canary(pg_url: str) -> Iterator[Api]:
    """An app whose `unparsed_rollback_task` is in canary at 50%."""
    yield from canary_app(pg_url, NAME)


def _flag(api: Api) -> dict[str, Any]:
    return flag_of(api, NAME)


def _announced(api: Api) -> list[str]:
    return [d["action"] for d in flag_announcements(api, NAME)]


def _post(api: Api, path: str, reason: str) -> dict[str, Any]:
    answer = api.client.post(path, json={"reason": reason}, headers=api.headers())
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _break(api: Api) -> int:
    """As after an upgrade: the current stored config does not parse, nothing in memory."""
    version = store_broken_config(api.engine, NAME)
    catalog._runtimes.clear()
    return version


def _fix(api: Api) -> None:
    fixed = api.client.post(
        "/v1/tasks", json=label_config(NAME, shadow_rate=0.2), headers=api.headers()
    )
    assert fixed.status_code in (200, 201), fixed.text


# --- 1. rolled back before a pass grounds it: flag.ungrounded alone at the fix ----------


def test_a_rollback_before_the_pass_grounds_it_pairs_the_announcements(canary: Api) -> None:
    api = canary
    _break(api)
    # The SRE rolls the canary back at once, as docs/operations.md advises, before the
    # next pass grounds it: the rollback kills its flag (config None).
    _post(api, f"/v1/tasks/{NAME}/rollback", "upgrade broke it")
    flag = _flag(api)
    assert (flag["stage"], flag["killed"]) == ("rolled_back", True), flag
    run_pass(api.engine, datetime.now(UTC))
    _fix(api)
    flag = _flag(api)
    assert (flag["stage"], flag["killed"], flag["edge_percent"]) == ("rolled_back", False, 0)
    actions = _announced(api)
    # The webhook hears the hold end (flag.ungrounded, cause config_applied) that it never
    # heard start: a start must be paired with its end.
    assert actions in ([], ["flag.grounded", "flag.ungrounded"]), actions


# --- 2. grounded, then the kill switch, then the fix: the end is never announced --------


def test_a_config_fixed_under_the_kill_switch_announces_the_end_of_the_hold(
    canary: Api,
) -> None:
    api = canary
    _break(api)
    run_pass(api.engine, datetime.now(UTC))
    assert _announced(api) == ["flag.grounded"]
    _post(api, "/v1/kill", "incident")
    _fix(api)  # the config no longer holds the flag; the kill switch does
    _post(api, "/v1/kill/lift", "resolved")
    run_pass(api.engine, datetime.now(UTC))
    flag = _flag(api)
    assert (flag["killed"], flag["edge_percent"]) == (False, 50), flag
    actions = _announced(api)
    assert actions == ["flag.grounded", "flag.ungrounded"], actions


# --- 3. the rollback overwrites why the flag is killed -------------------------------------


def test_the_rollback_flag_of_an_unparsed_task_says_why_it_is_killed(canary: Api) -> None:
    api = canary
    version = _break(api)
    run_pass(api.engine, datetime.now(UTC))
    assert f"stored config version {version} does not parse" in _flag(api)["reason"]
    _post(api, f"/v1/tasks/{NAME}/rollback", "upgrade broke it")
    flag = _flag(api)
    # killed True under rolled_back (a rolled_back flag is otherwise killed False, with the
    # edge in shadow): a router author or an SRE reading it must see why.
    assert (flag["stage"], flag["killed"]) == ("rolled_back", True), flag
    assert f"stored config version {version} does not parse" in flag["reason"], flag["reason"]


def test_a_config_broken_and_fixed_before_any_pass_announces_nothing(canary: Api) -> None:
    """Nothing held the flag (no pass saw the broken version): no start, so no end."""
    api = canary
    store_broken_config(api.engine, NAME)
    catalog._runtimes.clear()
    fixed = api.client.post(
        "/v1/tasks", json=label_config(NAME, shadow_rate=0.2), headers=api.headers()
    )
    assert fixed.status_code in (200, 201), fixed.text
    run_pass(api.engine, datetime.now(UTC))
    assert flag_announcements(api, NAME) == []
    assert _flag(api)["killed"] is False

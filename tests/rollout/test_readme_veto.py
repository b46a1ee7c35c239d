"""README, "Settings": `SHADOWPLANE_ERROR_COST_VETO` — "a task whose `error_cost` is at or
above it never leaves shadow, forced or not". The veto is the setting, and a task exactly at
it is vetoed; a task below it is promoted when forced. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api


def register(api: Api, name: str, error_cost: float) -> None:
    config = {"task": name, "comparator": {"kind": "exact"}, "error_cost": error_cost}
    with session_scope(api.engine) as session:
        apply_config(session, config, actor="test")


def promote(api: Api, task: str) -> Any:
    return api.client.post(
        f"/v1/tasks/{task}/promote",
        json={"reason": "forced by hand", "force": True},
        headers=api.headers("admin"),
    )


def stage(api: Api, task: str) -> str:
    return str(api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"])


def test_the_veto_is_the_setting_and_a_task_at_it_never_leaves_shadow(db_url: str) -> None:
    for api in make_api(db_url, error_cost_veto=0.5):
        register(api, "at_veto", 0.5)
        register(api, "under_default", 0.6)  # under the default veto (0.7), over this one
        register(api, "below_veto", 0.49)
        for task in ("at_veto", "under_default"):
            refused = promote(api, task)
            assert refused.status_code == 409, refused.text
            assert "error-cost veto" in refused.json()["detail"]["veto"]
            assert stage(api, task) == "shadow"
        assert promote(api, "below_veto").status_code == 200
        assert stage(api, "below_veto") != "shadow"

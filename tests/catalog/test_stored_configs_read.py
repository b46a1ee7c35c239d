"""A config version an older release stored, outside bounds this release added to the
rollback rules' arithmetic, is still read (its values taken as the nearest allowed ones),
while the same document applied now is refused naming each field. Without this, a task
whose stored `rollback.confidence` was 1.0 (or below 0.5, or a `min_effect` below 1e-5)
stopped parsing at the upgrade: skipped everywhere, its results rejected, its flag left
serving the edge with no rule judging it."""

from __future__ import annotations

from typing import Any

from controlplane.catalog.schemas import MAX_CONFIDENCE, MIN_CONFIDENCE, MIN_EFFECT_LEAST, MIN_H
from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from tests.conftest import Api
from tests.test_isolation import store_config_version


def _store_as_an_older_release(api: Api, name: str, rollback: dict[str, Any]) -> dict[str, Any]:
    return store_config_version(api.engine, name, {"rollback": rollback})[1]


def test_a_stored_config_past_the_new_bounds_is_read_and_the_same_applied_now_is_refused(
    api: Api,
) -> None:
    rules = [
        {"metric": "agreement", "op": ">=", "threshold": 0.9, "min_effect": 1e-7, "h": 1e-9},
        {"metric": "degrade_rate", "op": "<=", "threshold": 0.05, "confidence": 0.3},
    ]
    document = _store_as_an_older_release(
        api, "ticket_classify", {"confidence": 1.0, "rules": rules}
    )
    with session_scope(api.engine) as session:
        found = task_runtimes(session, {"ticket_classify"})
    assert "ticket_classify" in found, "the stored config no longer parses"
    rollback = found["ticket_classify"].config.rollback
    assert rollback.confidence == MAX_CONFIDENCE
    assert rollback.rules[0].min_effect == MIN_EFFECT_LEAST and rollback.rules[0].h == MIN_H
    assert rollback.rules[1].confidence == MIN_CONFIDENCE

    refused = api.client.post("/v1/tasks", json=document, headers=api.headers())
    assert refused.status_code == 422, refused.text
    said = str(refused.json())
    for field in (
        "rollback.confidence",
        "rollback.rules.0.min_effect",
        "rollback.rules.0.h",
        "rollback.rules.1.confidence",
    ):
        assert field in said, (field, said)

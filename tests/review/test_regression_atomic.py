"""A rollback and the regression items it queues are one transaction (PostgreSQL): when
queueing fails inside the firing, nothing of the firing is left (no decision, the flag and
stage unchanged, no blocked model, no announcement, no regression item); when it works, the
decision and the items are there together, the items naming the decision."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.db import session_scope
from controlplane.models import BlockedModel, Decision, OutboxEvent, ReviewItem, Task
from controlplane.rollout import evaluation
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api
from tests.rollout.test_rollback_e2e import close, config, promote, rewind, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
TASK = "canary_task"


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, config(TASK), actor="test")
        yield api


def _state(api: Api) -> dict[str, Any]:
    flag = api.client.get(f"/v1/flags/{TASK}", headers=api.headers("flags:read")).json()
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == TASK))
        items = list(session.scalars(select(ReviewItem).where(ReviewItem.task_id == tid)))
        return {
            "flag": flag,
            "stage": session.scalar(select(Task.stage).where(Task.id == tid)),
            "decisions": list(
                session.scalars(
                    select(Decision.action).where(Decision.task_id == tid).order_by(Decision.id)
                )
            ),
            "blocked": session.scalar(
                select(func.count()).select_from(BlockedModel).where(BlockedModel.task_id == tid)
            ),
            "announced": session.scalar(
                select(func.count())
                .select_from(OutboxEvent)
                .where(OutboxEvent.kind == "decision", OutboxEvent.task == TASK)
            ),
            "items": {i.id: (i.layer, i.provenance) for i in items},
            "regression": [i for i in items if i.layer == "regression"],
        }


def test_a_failing_regression_queue_undoes_the_whole_rollback(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert promote(api, TASK).status_code == 200
    start = rewind(api)
    for k in range(3):
        post_all(api, window_results(TASK, start, k, {"2048+": 0.4}))
        if k < 2:
            assert close(api, start, k).decisions == []

    real = evaluation.queue_regression
    queued: list[int] = []

    def queue_then_fail(session: Any, *args: Any, **kwargs: Any) -> int:
        done = real(session, *args, **kwargs)
        # The items and the decision are written (in this transaction) before the failure.
        assert session.scalar(select(func.count()).select_from(Decision)) >= 2
        queued.append(done)
        raise RuntimeError("regression queue failed")

    monkeypatch.setattr(evaluation, "queue_regression", queue_then_fail)
    # The sampler's own transaction for the last window runs (and commits) before the rules.
    before_fire = _state(api)
    report = close(api, start, 2)
    assert queued and queued[0] > 0  # the firing did queue items before it failed
    assert report.decisions == []
    assert [(f.stage, "regression queue failed" in f.error) for f in report.failed] == [
        ("rollout", True)
    ]
    after = _state(api)
    assert after["stage"] == "canary" and after["flag"] == before_fire["flag"]
    assert (after["flag"]["stage"], after["flag"]["edge_percent"]) == ("canary", 50)
    assert after["decisions"] == ["promote"]
    assert after["blocked"] == 0
    assert after["regression"] == []
    # No item was moved either: every item (those of earlier passes and the sampler's draw
    # of this pass, committed in its own transaction) is where the sampler put it.
    assert all(after["items"][i] == v for i, v in before_fire["items"].items())
    assert all(layer != "regression" and p is None for layer, p in after["items"].values())
    assert after["announced"] == before_fire["announced"] == 1  # the promote only

    # Working again, the retried evaluation fires: decision and items commit together.
    monkeypatch.undo()
    retried = run_pass(api.engine, report.now, retry=report.unevaluated)
    report_ids = [d["id"] for d in retried.decisions]
    assert [d["action"] for d in retried.decisions] == ["rollback"]
    final = _state(api)
    assert final["stage"] == "rolled_back" and final["decisions"] == ["promote", "rollback"]
    assert final["blocked"] == 1 and final["announced"] == 2
    assert len(final["regression"]) == queued[0]
    assert {i.provenance["decision_id"] for i in final["regression"]} == set(report_ids)

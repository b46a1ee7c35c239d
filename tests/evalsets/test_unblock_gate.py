"""The regression gate end to end on PostgreSQL: a canary rolls back, its breaching windows'
results become the regression layer (labelled blind through the review queue, backfilled),
and the blocked edge model is let back in only with a stored run on that set at or above
`promotion.regression_min_accuracy` — refused without one, allowed with one, and forced
(audited as forced) through the API and `shadowplane unblock --force`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from controlplane.cli import app
from controlplane.db import session_scope
from controlplane.evalsets import actions
from controlplane.models import AuditEntry, ReviewItem, Task
from controlplane.review import actions as review
from controlplane.rollout import repository
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.evalsets.helpers import cli_env
from tests.rollout.test_rollback_e2e import close, config, promote, rewind, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
TASK = "gate_task"
MODEL = "small@3"


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for one in make_api(pg_url):
        with session_scope(one.engine) as session:
            # No sampled items: the queue holds only what the rollback queued.
            apply_config(session, config(TASK, review={"quota_per_window": 0}), actor="test")
        yield one


def traffic(start: Any, k: int) -> list[dict[str, Any]]:
    """A canary window whose long tickets the edge gets wrong 40% of the time; every
    ticket its own text (an eval set holds an input once)."""
    out = window_results(TASK, start, k, {"2048+": 0.4})
    for r in out:
        r["input"] = {"text": f"ticket {r['request_id']}: where is my refund?"}
    return out


def unblock(api: Api, model: str, force: bool = False) -> Any:
    return api.client.post(
        f"/v1/tasks/{TASK}/unblock",
        json={"model": model, "reason": "regression set", "force": force},
        headers=api.headers(),
    )


def post_run(api: Api, outputs: dict[str, Any]) -> Any:
    return api.client.post(
        f"/v1/evalsets/{TASK}/runs",
        json={"model": MODEL, "lines": [{"id": k, "output": v} for k, v in outputs.items()]},
        headers=api.headers("read"),
    )


def test_a_rollback_s_regression_set_lets_the_blocked_model_back_only_when_it_passes(
    api: Api,
) -> None:
    assert promote(api, TASK).status_code == 200
    start = rewind(api)
    decisions = []
    for k in range(3):
        post_all(api, traffic(start, k))
        decisions += close(api, start, k).decisions
    assert [d["action"] for d in decisions] == ["rollback"]
    decision = decisions[0]

    refused = unblock(api, MODEL)
    assert refused.status_code == 409
    assert "no regression eval items yet" in str(refused.json()["detail"])

    # The reviewers label what the rollback queued, blind: the cloud said refund, and was right.
    clock = start + timedelta(hours=1)
    n = 0
    while (item := review.claim(api.engine, TASK, "rev", clock)) is not None:
        verdict = {
            ("refund", "refund"): "both_correct",
            ("refund", "exchange"): "a_correct",
            ("exchange", "refund"): "b_correct",
        }[(item["a"], item["b"])]
        review.label(api.engine, item["id"], "rev", verdict=verdict, now=clock)
        n += 1
    with session_scope(api.engine) as session:
        queued = list(session.scalars(select(ReviewItem).where(ReviewItem.layer == "regression")))
    # Every conflict of the three breaching windows (24 each), and the agreeing results
    # whose payload was kept.
    assert n == len(queued) > 24 * 3
    assert {q.provenance["decision_id"] for q in queued if q.provenance} == {decision["id"]}

    added = actions.backfill(api.engine, layer="regression", actor="rev")
    assert added["tasks"] == {TASK: {"regression": n}}
    lines = api.client.get(
        f"/v1/evalsets/{TASK}/regression", params={"limit": 1000}, headers=api.headers("read")
    ).json()["items"]
    assert len(lines) == n and all(x["expected"] == "refund" for x in lines)
    assert {x["provenance"]["regression"]["rule"] for x in lines} == {decision["rule"]}

    refused = unblock(api, MODEL)
    assert refused.status_code == 409 and "no stored run of small@3" in str(
        refused.json()["detail"]
    )

    # The model as it was: wrong on every conflict of the breaching windows.
    old = post_run(api, {x["id"]: x["edge_output"] for x in lines})
    assert old.status_code == 200 and old.json()["accuracy"] < 0.95
    refused = unblock(api, MODEL)
    assert refused.status_code == 409
    assert f"{old.json()['correct']}/{n}" in str(refused.json()["detail"])

    fixed = post_run(api, {x["id"]: x["expected"] for x in lines})
    assert fixed.json()["accuracy"] == 1.0
    allowed = unblock(api, MODEL)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["blocked"] == []

    # Another version the rollback blocked, let back without a run: forced, and audited so.
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        repository.block(session, task, "small@2", decision["id"])
        repository.block(session, task, "small@1", decision["id"])
    assert unblock(api, "small@2").status_code == 409
    forced = unblock(api, "small@2", force=True)
    assert forced.status_code == 200 and forced.json()["blocked"] == ["small@1"]

    with cli_env(api.url):
        refused_cli = CliRunner().invoke(
            app, ["unblock", TASK, "--model", "small@1", "--reason", "try"]
        )
        assert refused_cli.exit_code == 1 and "no stored run of small@1" in refused_cli.output
        done = CliRunner().invoke(
            app, ["unblock", TASK, "--model", "small@1", "--reason", "known good", "--force"]
        )
        assert done.exit_code == 0, done.output
        assert "unblocked small@1" in done.output and "still blocked: none" in done.output

    with session_scope(api.engine) as session:
        audit = [
            (a.details["model"], bool(a.details.get("forced")))
            for a in session.scalars(
                select(AuditEntry)
                .where(AuditEntry.action == "task.unblock")
                .order_by(AuditEntry.id)
            )
        ]
    assert audit == [(MODEL, False), ("small@2", True), ("small@1", True)]

"""The regression gate end to end on PostgreSQL, with no backfill run by hand and no
force: a canary rolls back and blocks its edge model; its regression sample, labelled blind
through the review queue, fills the `regression` eval set from the labels alone; the
progress (`GET /v1/tasks/{task}/regression`, names models, `read`) and the blind count of
the review queue (`review`) follow it; the successor the routers now serve is named as the
model to run; a poor run of it is refused and a good one lifts the block. A model of
another line still needs its own run, or `force` (audited as forced), through the API and
`shadowplane unblock --force`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from controlplane.cli import app
from controlplane.db import session_scope
from controlplane.models import AuditEntry, Task
from controlplane.review import actions as review
from controlplane.rollout import repository
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api
from tests.evalsets.helpers import cli_env
from tests.rollout.test_rollback_e2e import close, config, promote, rewind, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
TASK = "gate_task"
MODEL = "small@3"
SUCCESSOR = "small@4"
N = 20


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for one in make_api(pg_url):
        with session_scope(one.engine) as session:
            # No sampled items: the queue holds only what the rollback queued.
            review_config = {"quota_per_window": 0, "regression_items": N}
            apply_config(session, config(TASK, review=review_config), actor="test")
        yield one


def traffic(start: datetime, k: int, model: str = MODEL) -> list[dict[str, Any]]:
    """A canary window whose long tickets the edge gets wrong 40% of the time; every
    ticket its own text (an eval set holds an input once)."""
    out = window_results(TASK, start, k, {"2048+": 0.4})
    for r in out:
        r["input"] = {"text": f"ticket {r['request_id']}: where is my refund?"}
        r["edge"]["model"] = model
    return out


def unblock(api: Api, model: str, force: bool = False) -> Any:
    return api.client.post(
        f"/v1/tasks/{TASK}/unblock",
        json={"model": model, "reason": "regression set", "force": force},
        headers=api.headers(),
    )


def progress(api: Api, key: str = "read", task: str = TASK) -> Any:
    return api.client.get(f"/v1/tasks/{task}/regression", headers=api.headers(key))


def blind_count(api: Api) -> Any:
    answer = api.client.get("/v1/review/queue", headers=api.headers("review"))
    assert answer.status_code == 200
    assert "small@" not in answer.text  # a review key never reads a model's name
    [row] = [r for r in answer.json()["tasks"] if r["task"] == TASK]
    return row["regression"]


def post_run(api: Api, model: str, outputs: dict[str, Any]) -> Any:
    return api.client.post(
        f"/v1/evalsets/{TASK}/runs",
        json={"model": model, "lines": [{"id": k, "output": v} for k, v in outputs.items()]},
        headers=api.headers("read"),
    )


def label_blind(api: Api, clock: datetime) -> int:
    """Label every queued item blind: the cloud said refund, and was right."""
    n = 0
    while (item := review.claim(api.engine, TASK, "rev", clock)) is not None:
        a, b = item["a"], item["b"]
        verdict = "both_correct" if a == b else ("a_correct" if a == "refund" else "b_correct")
        review.label(api.engine, item["id"], "rev", verdict=verdict, now=clock)
        n += 1
    return n


def test_labels_alone_fill_the_regression_set_and_a_good_run_of_the_successor_unblocks(
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
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        # An older version of the line, blocked by the same rollback.
        repository.block(session, task, "small@2", decision["id"])

    assert progress(api, "review").status_code == 403
    assert progress(api, task="nope").status_code == 404
    assert progress(api).json() == {
        "task": TASK,
        "min_accuracy": 0.95,
        "blocks": [
            {
                "model": model,
                "decision_id": decision["id"],
                "labelled": 0,
                "needed": N,
                "in_set": 0,
                # No later version of the line in the traffic yet: the model itself.
                "next_model": model,
                "unblock": f"{N} more items labelled, then a run of {model} on this set ≥ 95%",
            }
            for model in ("small@2", MODEL)
        ],
    }
    assert blind_count(api) == {"labelled": 0, "needed": N}
    refused = unblock(api, MODEL)
    assert refused.status_code == 409
    assert f"still needs: {N} more items labelled, then a run of {MODEL}" in refused.text

    # The routers serve the next version after the rollback: it is the model to run.
    post_all(api, traffic(start, 4, SUCCESSOR))
    [older, blocked] = progress(api).json()["blocks"]
    assert (older["next_model"], blocked["next_model"]) == (SUCCESSOR, SUCCESSOR)

    # The reviewers label the sample; nobody backfills: the next scheduler pass puts the
    # labelled items in the set.
    assert label_blind(api, start + timedelta(hours=1)) == N
    assert blind_count(api) == {"labelled": N, "needed": N}
    assert run_pass(api.engine, start + timedelta(hours=1)).filled == N
    lines = api.client.get(
        f"/v1/evalsets/{TASK}/regression", params={"limit": 1000}, headers=api.headers("read")
    ).json()["items"]
    assert len(lines) == N and all(x["expected"] == "refund" for x in lines)
    [older, blocked] = progress(api).json()["blocks"]
    assert (blocked["labelled"], blocked["needed"], blocked["in_set"]) == (N, N, N)
    assert blocked["unblock"] == f"a run of {SUCCESSOR} on this set ≥ 95%"

    # The blocked model's answers (wrong on every conflict): a poor run, refused.
    poor = post_run(api, SUCCESSOR, {x["id"]: x["edge_output"] for x in lines})
    assert poor.status_code == 200 and poor.json()["accuracy"] < 0.95
    refused = unblock(api, MODEL)
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert f"run {poor.json()['id']} of {SUCCESSOR}" in detail
    assert f"scored {poor.json()['correct']}/{N}" in detail
    assert f"still needs: a run of {SUCCESSOR} on this set ≥ 95%" in detail

    good = post_run(api, SUCCESSOR, {x["id"]: x["expected"] for x in lines})
    assert good.json()["accuracy"] == 1.0
    assert progress(api).json()["blocks"][1]["unblock"] is None
    allowed = unblock(api, MODEL)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["blocked"] == ["small@2"]
    # The successor's run lifts the older version of its line too.
    assert unblock(api, "small@2").json()["blocked"] == []
    assert progress(api).json()["blocks"] == [] and blind_count(api) is None

    # A model of another line the rollback blocked needs its own run, or force: audited so.
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        repository.block(session, task, "tiny@2", decision["id"])
        repository.block(session, task, "tiny@1", decision["id"])
    refused = unblock(api, "tiny@2")
    assert refused.status_code == 409
    assert "no stored run of tiny@2 or a later version of its line" in refused.text
    forced = unblock(api, "tiny@2", force=True)
    assert forced.status_code == 200 and forced.json()["blocked"] == ["tiny@1"]

    with cli_env(api.url):
        refused_cli = CliRunner().invoke(
            app, ["unblock", TASK, "--model", "tiny@1", "--reason", "try"]
        )
        assert refused_cli.exit_code == 1 and "a run of tiny@1 on this set" in refused_cli.output
        done = CliRunner().invoke(
            app, ["unblock", TASK, "--model", "tiny@1", "--reason", "known good", "--force"]
        )
        assert done.exit_code == 0, done.output
        assert "unblocked tiny@1" in done.output and "still blocked: none" in done.output

    with session_scope(api.engine) as session:
        audit = [
            (a.details["model"], bool(a.details.get("forced")))
            for a in session.scalars(
                select(AuditEntry)
                .where(AuditEntry.action == "task.unblock")
                .order_by(AuditEntry.id)
            )
        ]
    assert audit == [(MODEL, False), ("small@2", False), ("tiny@2", True), ("tiny@1", True)]

"""The regression layer holds every input a rollback queued, even one that already sits in
another layer: a recurring ticket backfilled into `boundary` still enters `regression`, and
a review item a rollback moved to `regression` after it was backfilled into `boundary`
enters `regression` with the move. Within one layer an input still enters once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.evalsets import actions, service
from controlplane.evalsets.service import fill_regression
from controlplane.models import Task
from controlplane.review.regression import queue_regression
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api, make_result
from tests.evalsets.helpers import (
    T0,
    TASK,
    TASK_CONFIG,
    cloud_verdict,
    label,
    queue,
)

PROVENANCE = {
    "decision_id": 1,
    "rule": "agreement >= 0.9",
    "cell": "all",
    "window_start": T0.isoformat(),
    "window_end": (T0 + timedelta(hours=2)).isoformat(),
}


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    for one in make_api(sqlite_url):
        with session_scope(one.engine) as session:
            apply_config(session, TASK_CONFIG, actor="test")
        yield one


def post(api: Api, rows: list[tuple[str, int, str, str]]) -> None:
    """(request id, minutes after T0, input text, edge answer); the cloud says refund."""
    body = [
        make_result(
            task=TASK,
            request_id=rid,
            ts=(T0 + timedelta(minutes=minutes)).isoformat(),
            input={"text": text},
            edge={"output": edge, "confidence": 0.9, "model": "small@3"},
            cloud={"output": "refund", "model": "large@7"},
        )
        for rid, minutes, text, edge in rows
    ]
    assert api.post_results({"results": body}).json()["accepted"] == len(rows)


def layers(api: Api) -> dict[str, list[dict[str, Any]]]:
    with session_scope(api.engine) as session:
        task = service.task_named(session, TASK)
        return {
            layer: service.layer_lines(session, task, layer) for layer in ("boundary", "regression")
        }


def label_queued(api: Api, request_ids: list[str], **queue_args: Any) -> None:
    with session_scope(api.engine) as session:
        for item in queue(session, TASK, request_ids, **queue_args):
            if item.outcome == "agree":
                label(session, item, "rev", "both_correct")
            else:
                label(session, item, "rev", cloud_verdict(item), failure_class="wrong_label")


def test_a_recurring_input_already_in_boundary_still_enters_regression(api: Api) -> None:
    text = "My parcel 4411 never arrived, I want a refund"
    post(
        api,
        [
            ("day1", 0, text, "refund"),
            ("rollback", 60, text, "exchange"),
            # The same ticket again, spaced differently, in the same rollback.
            ("rollback-2", 61, f"  {text}  ", "exchange"),
        ],
    )
    label_queued(api, ["day1"], layer="boundary")
    first = actions.backfill(api.engine, actor="rev")
    assert first["tasks"] == {TASK: {"boundary": 1}}

    label_queued(api, ["rollback", "rollback-2"], layer="regression", provenance=PROVENANCE)
    second = actions.backfill(api.engine, actor="rev")
    # Deduplicated within the layer only: one regression item, the second one a duplicate.
    assert second["tasks"] == {TASK: {"regression": 1}} and second["duplicates"] == 1
    found = layers(api)
    assert [x["id"] for x in found["regression"]] == [x["id"] for x in found["boundary"]]
    [regression] = found["regression"]
    assert regression["provenance"]["request_id"] == "rollback"
    assert regression["provenance"]["regression"] == PROVENANCE
    assert regression["failure_class"] == "wrong_label"
    again = actions.backfill(api.engine, actor="rev")
    assert again["added"] == 0 and again["duplicates"] == 1


def test_an_item_moved_to_regression_after_its_backfill_enters_regression_with_the_move(
    api: Api,
) -> None:
    post(api, [("c1", 0, "Where is my parcel 7788?", "exchange")])
    label_queued(api, ["c1"], layer="boundary")
    assert actions.backfill(api.engine, actor="rev")["tasks"] == {TASK: {"boundary": 1}}

    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        config = task_runtimes(session, {TASK})[TASK].config
        moved = queue_regression(
            session,
            task,
            config,
            decision_id=1,
            rule="agreement >= 0.9",
            cell="all",
            ranges=[(T0 - timedelta(minutes=5), T0 + timedelta(minutes=5))],
        )
        # As the firing does next (rollout.evaluation), in the same transaction.
        fill_regression(session, task)
    assert moved == 1
    # Already labelled: the rollback put it in the regression set itself, in its own
    # transaction (no backfill run by hand).
    found = layers(api)
    assert len(found["boundary"]) == 1 and len(found["regression"]) == 1
    [regression] = found["regression"]
    assert regression["id"] == found["boundary"][0]["id"]
    assert regression["provenance"]["regression"]["decision_id"] == 1
    assert regression["expected"] == "refund"
    assert actions.backfill(api.engine, actor="rev")["added"] == 0

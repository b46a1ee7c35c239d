"""End to end on PostgreSQL: a canary whose long bucket degrades rolls back, and the same
pass queues every reviewable result of the breaching windows and bucket for the
`regression` layer, naming the decision; items the sampler had already drawn from those
windows are moved, not duplicated."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.models import Decision, Payload, Result, ReviewItem, Task
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.rollout.test_rollback_e2e import WINDOW, close, config, promote, rewind, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("canary_task"), actor="test")
        yield api


def test_a_rollback_queues_its_breaching_windows_for_regression(api: Api) -> None:
    assert promote(api, "canary_task").status_code == 200
    start = rewind(api)
    sampled_before: dict[str, int] = {}
    decisions = []
    for k in range(3):
        post_all(api, window_results("canary_task", start, k, {"2048+": 0.4}))
        if k == 2:
            with session_scope(api.engine) as session:
                sampled_before = {
                    i.request_id: i.id
                    for i in session.scalars(select(ReviewItem).where(ReviewItem.bucket == "2048+"))
                }
        report = close(api, start, k)
        assert report.failed == []
        decisions += report.decisions
    assert [d["action"] for d in decisions] == ["rollback"]
    decision = decisions[0]
    assert decision["bucket"] == "2048+"
    with session_scope(api.engine) as session:
        stored = session.get(Decision, decision["id"])
        assert stored is not None
        tid = session.scalar(select(Task.id).where(Task.name == "canary_task"))
        items = list(session.scalars(select(ReviewItem).where(ReviewItem.task_id == tid)))
        # What the breaching windows hold in the long bucket with a kept payload.
        breaching = set(
            session.scalars(
                select(Result.request_id)
                .join(Payload, Payload.result_id == Result.id)
                .where(
                    Result.task_id == tid,
                    Result.ts >= start,
                    Result.ts < start + timedelta(seconds=3 * WINDOW),
                    Result.input_tokens >= 2048,
                )
            )
        )
    regression = [i for i in items if i.layer == "regression"]
    assert {i.request_id for i in regression} == breaching
    assert len(breaching) >= 3 * 24  # every conflict at least (their payload is always kept)
    assert len({i.request_id for i in items}) == len(items)  # one item per result
    for item in regression:
        assert item.provenance is not None
        assert item.provenance["decision_id"] == decision["id"]
        assert item.provenance["rule"] == "agreement >= 0.9 per bucket"
        assert item.provenance["cell"] == "2048+"
        assert item.bucket == "2048+"
        if item.request_id in sampled_before:
            # Drawn by the sampler before the firing: the same item, moved.
            assert item.id == sampled_before[item.request_id]
            assert item.reason != "regression"
        elif item.reason != "regression":
            # Drawn from the last window by the sampler in the firing's own pass (it runs
            # before the rules), then moved.
            assert item.window_start == start + timedelta(seconds=2 * WINDOW)
        else:
            assert item.inclusion_probability in (1.0, 0.05)
    # The windows' earlier draws reached the long bucket too, and were moved.
    assert any(i.request_id in sampled_before for i in regression)
    windows = {(i.provenance["window_start"], i.provenance["window_end"]) for i in regression}
    assert len(windows) >= 1
    # Items outside the breaching bucket stay where the sampler put them.
    assert all(i.layer in ("boundary", "anomaly") for i in items if i.bucket != "2048+")

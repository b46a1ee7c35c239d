"""End to end on PostgreSQL: a canary whose long bucket degrades rolls back, and the same
pass queues a stratified sample of at most `review.regression_items` of the breaching
windows' reviewable results for the `regression` layer, the breaching bucket first, naming
the decision; items the sampler had already drawn are moved, not duplicated. The queue
then hands out that sample before any other item, the breaching bucket first."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.models import Payload, Result, ReviewItem, Task
from controlplane.models.review import PRIORITY_BREACHING, PRIORITY_OTHER, PRIORITY_REGRESSION
from controlplane.review import actions
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.rollout.test_rollback_e2e import WINDOW, close, config, promote, rewind, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
TASK = "canary_task"
N = 30


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            apply_config(session, config(TASK, review={"regression_items": N}), actor="test")
        yield api


def test_a_rollback_s_sample_is_handed_out_first_breaching_bucket_first(api: Api) -> None:
    assert promote(api, TASK).status_code == 200
    start = rewind(api)
    sampled_before: dict[str, int] = {}
    decisions = []
    for k in range(3):
        post_all(api, window_results(TASK, start, k, {"2048+": 0.4}))
        if k == 2:
            with session_scope(api.engine) as session:
                sampled_before = {i.request_id: i.id for i in session.scalars(select(ReviewItem))}
        report = close(api, start, k)
        assert report.failed == []
        decisions += report.decisions
    assert [d["action"] for d in decisions] == ["rollback"]
    decision = decisions[0]
    assert decision["bucket"] == "2048+"
    end = start + timedelta(seconds=3 * WINDOW)
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == TASK))
        items = list(session.scalars(select(ReviewItem).where(ReviewItem.task_id == tid)))
        # The long bucket's reviewable results of the breaching windows: every conflict (24
        # a window, their payload always kept) and the agreeing ones whose payload was kept.
        long_ones = set(
            session.scalars(
                select(Result.request_id)
                .join(Payload, Payload.result_id == Result.id)
                .where(
                    Result.task_id == tid,
                    Result.ts >= start,
                    Result.ts < end,
                    Result.input_tokens >= 2048,
                )
            )
        )
    assert len(long_ones) >= 3 * 24
    regression = [i for i in items if i.layer == "regression"]
    # N in all: the other judged buckets keep N // 5 = 6 (they hold more), the breaching
    # bucket takes the other 24 of its 72 or more.
    assert len(regression) == N
    hot = [i for i in regression if i.bucket == "2048+"]
    assert len(hot) == N - N // 5 and {i.request_id for i in hot} <= long_ones
    assert {i.priority for i in hot} == {PRIORITY_BREACHING}
    assert {i.priority for i in regression if i not in hot} == {PRIORITY_REGRESSION}
    assert len({i.request_id for i in items}) == len(items)  # one item per result
    for item in regression:
        assert item.provenance is not None
        assert item.provenance["decision_id"] == decision["id"]
        assert item.provenance["rule"] == "agreement >= 0.9 per bucket"
        assert item.provenance["cell"] == "2048+"
        assert start <= item.result_ts < end
        if item.request_id in sampled_before:
            # Drawn by the sampler before the firing: the same item, moved.
            assert item.id == sampled_before[item.request_id]
            assert item.reason != "regression"
    assert all(i.priority == PRIORITY_OTHER for i in items if i.layer != "regression")
    # Some of the sampler's items are older (smaller ids) than some of the sample: oldest
    # first alone would hand one of them out before the sample is done.
    others = [i for i in items if i.layer != "regression"]
    assert min(i.id for i in others) < max(i.id for i in regression)

    # The next N items handed out (to N reviewers, one lease each, across tasks) are the
    # rollback's sample, its breaching bucket first; only then any other item.
    clock = end + timedelta(minutes=5)
    handed = [actions.claim(api.engine, None, f"rev-{n}", clock) for n in range(N + 1)]
    by_id = {i.id: i for i in items}
    order = [by_id[view["id"]] for view in handed if view is not None]
    assert [i.layer for i in order[:N]] == ["regression"] * N
    assert [i.bucket == "2048+" for i in order[:N]] == [True] * (N - N // 5) + [False] * (N // 5)
    assert order[N].layer != "regression"

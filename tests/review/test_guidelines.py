"""A task's review.guidelines travel with each item a reviewer claims (GET /v1/review/next),
so a review key — which cannot read task configs — has them; null for a task without."""

from __future__ import annotations

import pytest

from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, Api
from tests.review.queuedata import add_items

pytestmark = pytest.mark.integration

GUIDELINES = "**refund**: they want their money back.\n\n**exchange**: another item instead."


def test_a_claimed_item_carries_its_tasks_guidelines(api: Api) -> None:
    with session_scope(api.engine) as session:
        apply_config(session, {**TICKET_TASK, "task": "g_plain"}, actor="test")
        guided = {**TICKET_TASK, "task": "g_guided", "review": {"guidelines": GUIDELINES}}
        apply_config(session, guided, actor="test")
    h = api.headers("review")
    assert api.client.get("/v1/tasks", headers=h).status_code == 403  # no configs for review
    for task, expected in (("g_plain", None), ("g_guided", GUIDELINES)):
        [item] = add_items(api.engine, task, 1)
        claimed = api.client.get(f"/v1/review/next?task={task}", headers=h).json()["item"]
        assert claimed["id"] == item and claimed["guidelines"] == expected
        # A reviewer holds one item at a time: give it back before the next task's.
        assert api.client.post(f"/v1/review/{item}/release", headers=h).status_code == 200

"""The regression gate waits for the rollback's own items: a run that passed on an older
regression set does not let a model back while the review items of the rollback that
blocked it (or of a later one) are unlabelled, wait for a correction, or are labelled but
not backfilled; the sentence says how many and why. And backfill leaves out an expected
answer the task's comparator calls invalid (no run could ever match it) and says so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.schemas import parse_config
from controlplane.db import session_scope
from controlplane.evalsets import actions, repository, service
from controlplane.evalsets.gate import check_unblock
from controlplane.models import Decision, ReviewItem, Task
from controlplane.rollout import repository as rollout
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.evalsets.helpers import (
    T0,
    TASK,
    TASK_CONFIG,
    cloud_verdict,
    label,
    post_tickets,
    queue,
)

MODEL = "small@4"


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    for one in make_api(sqlite_url):
        with session_scope(one.engine) as session:
            apply_config(session, TASK_CONFIG, actor="test")
        yield one


def rollback(api: Api, *, block: str | None = None) -> int:
    """A rollback decision of the task (blocking `block`); its id."""
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        decision = Decision(
            task_id=task.id, action="rollback", actor="policy", reason="breach", evidence={}
        )
        session.add(decision)
        session.flush()
        if block is not None:
            rollout.block(session, task, block, decision.id)
        return decision.id


def provenance(decision_id: int) -> dict[str, Any]:
    return {
        "decision_id": decision_id,
        "rule": "agreement >= 0.9",
        "cell": "all",
        "window_start": T0.isoformat(),
        "window_end": (T0 + timedelta(minutes=5)).isoformat(),
    }


def queued(api: Api, seed: int, n: int, decision_id: int) -> list[int]:
    ids = post_tickets(api, n, seed=seed, conflict_every=2)
    with session_scope(api.engine) as session:
        return [
            x.id
            for x in queue(
                session, TASK, ids, layer="regression", provenance=provenance(decision_id)
            )
        ]


def label_items(api: Api, ids: list[int], *, corrected: Any = None, fix: bool = True) -> None:
    """Label the items: the cloud was right (`fix`), else both wrong with `corrected`."""
    with session_scope(api.engine) as session:
        for item_id in ids:
            item = session.get(ReviewItem, item_id)
            assert item is not None
            if fix:
                label(session, item, "rev", cloud_verdict(item), failure_class="wrong_label")
            else:
                label(session, item, "rev", "both_wrong", corrected=corrected)


def gate(api: Api) -> str | None:
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        return check_unblock(session, task, parse_config(TASK_CONFIG), MODEL)


def pass_run(api: Api) -> None:
    with session_scope(api.engine) as session:
        lines = service.layer_lines(session, service.task_named(session, TASK), "regression")
    body = {"model": MODEL, "lines": [{"id": x["id"], "output": x["expected"]} for x in lines]}
    answer = api.client.post(f"/v1/evalsets/{TASK}/runs", json=body, headers=api.headers("read"))
    assert answer.status_code == 200 and answer.json()["accuracy"] == 1.0, answer.text


def test_the_gate_waits_for_every_item_of_the_blocking_rollback(api: Api) -> None:
    first = rollback(api)
    label_items(api, queued(api, 6, 4, first))
    assert actions.backfill(api.engine, layer="regression", actor="rev")["added"] == 4
    pass_run(api)
    # Not blocked yet: every regression item of the task counts, and all are in.
    assert gate(api) is None

    # A later rollback blocks MODEL and queues six more; the old run must not open the gate.
    second = rollback(api, block=MODEL)
    items = queued(api, 7, 6, second)
    why = gate(api)
    assert why == (
        f"6 of the 6 items that the rollback that blocked {MODEL} (decision {second}) and any "
        f"later rollback queued for the regression eval set of {TASK} are not in it yet "
        f"(0 labelled). Unblocking {MODEL} still needs: 6 more items labelled, then a run of "
        f"{MODEL} on this set ≥ 95% (store the run with POST /v1/evalsets/{TASK}/runs)"
    )

    # Three labelled with the right answer, one both wrong without a correction, one with
    # a correction the comparator calls invalid, one still unlabelled. (Labels written
    # here, not through the review queue, which would put them in the set at once.)
    label_items(api, items[:3])
    label_items(api, items[3:4], fix=False)
    label_items(api, items[4:5], fix=False, corrected={"label": "refund"})
    why = gate(api) or ""
    assert why.startswith(f"6 of the 6 items that the rollback that blocked {MODEL}")
    assert why.endswith(
        f"are not in it yet (5 labelled). Unblocking {MODEL} still needs: 1 more item "
        "labelled, then a valid correction on 2 items labelled without a usable expected "
        "answer (no reviewer is offered them again: a reviewer who labelled them may "
        "correct their label with POST /v1/review/{id}/label, else only force lifts the "
        "block), then 3 labelled items put in the set (the next scheduler pass does it), "
        f"then a run of {MODEL} on this set ≥ 95% (store the run with POST "
        f"/v1/evalsets/{TASK}/runs)"
    )

    report = actions.backfill(api.engine, layer="regression", actor="rev")
    assert report["added"] == 3
    assert report["needs_correction"] == 1 and report["invalid_expected"] == 1
    why = gate(api) or ""
    assert why.startswith("3 of the 6 items")
    assert "still needs: 1 more item labelled, then a valid correction on 2 items" in why

    # Corrected and labelled: the items are in; the old run is on an older set now.
    with session_scope(api.engine) as session:
        for item_id in items[3:5]:
            item = session.get(ReviewItem, item_id)
            assert item is not None
            label(session, item, "rev2", "both_wrong", corrected="refund")
    label_items(api, items[5:])
    # Two labels that disagree on the corrected ones: the newest per reviewer counts; both
    # reviewers say both_wrong, one with a valid correction.
    report = actions.backfill(api.engine, layer="regression", actor="rev")
    assert report["invalid_expected"] == 0 and report["added"] == 3, report
    why = gate(api) or ""
    assert "older set" in why and "10 items now" in why
    assert why.endswith(
        f"still needs: a run of {MODEL} on this set ≥ 95% (store the run with POST /v1/evalsets/{TASK}/runs)"
    )
    pass_run(api)
    assert gate(api) is None


def test_an_earlier_rollback_s_unlabelled_items_do_not_hold_a_later_block(api: Api) -> None:
    old = rollback(api)
    queued(api, 8, 2, old)  # never labelled
    blocking = rollback(api, block=MODEL)
    label_items(api, queued(api, 9, 3, blocking))
    actions.backfill(api.engine, layer="regression", actor="rev")
    pass_run(api)
    assert gate(api) is None


def test_with_no_regression_items_the_gate_says_what_the_rollback_queued(api: Api) -> None:
    decision = rollback(api, block=MODEL)
    assert gate(api) == (
        f"{TASK} has no regression eval items yet. Unblocking {MODEL} still needs: regression "
        f"items in the set (none was queued), then a run of {MODEL} on this set ≥ 95% (store "
        f"the run with POST /v1/evalsets/{TASK}/runs)"
    )
    queued(api, 10, 2, decision)
    why = gate(api) or ""
    assert why.startswith(
        f"2 of the 2 items that the rollback that blocked {MODEL} (decision {decision}) and "
        f"any later rollback queued for the regression eval set of {TASK} are not in it yet "
        f"(0 labelled). Unblocking {MODEL} still needs: 2 more items labelled, then a run of "
    )


def test_a_pass_fills_the_set_only_while_a_block_waits_on_it(api: Api) -> None:
    """The gate reads the regression set only for a blocked model: a pass leaves alone the
    labelled regression items of a task with no active block, and reads them until they
    are in the set once one blocks."""
    decision = rollback(api)  # it blocked no model
    label_items(api, queued(api, 12, 2, decision))
    with session_scope(api.engine) as session:
        assert service.fill_waiting(session) == 0
        assert repository.tasks_waiting_for_regression(session) == []
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        rollout.block(session, task, MODEL, decision)
    with session_scope(api.engine) as session:
        assert [t.name for t in repository.tasks_waiting_for_regression(session)] == [TASK]
        assert service.fill_waiting(session) == 2
    with session_scope(api.engine) as session:
        assert repository.tasks_waiting_for_regression(session) == []


@pytest.mark.parametrize("corrected", [{"label": "refund"}, "Refund!!", ["refund"], 42, None])
def test_backfill_leaves_out_an_expected_answer_no_run_can_match(api: Api, corrected: Any) -> None:
    ids = post_tickets(api, 1, seed=11, conflict_every=1)
    with session_scope(api.engine) as session:
        [item] = queue(session, TASK, ids, layer="boundary")
        label(session, item, "rev", "both_wrong", corrected=corrected)
    report = actions.backfill(api.engine, actor="rev")
    assert report["added"] == 0
    if corrected is None:
        assert (report["needs_correction"], report["invalid_expected"]) == (1, 0)
    else:
        assert (report["needs_correction"], report["invalid_expected"]) == (0, 1)

"""The regression-set component (shadowplane_dashboard/regression.py) on the seeded rollout, where
ticket_classify's rollback blocked small-int4@3 and the seed labelled the first items
(the regression sample is handed out first): a read key sees the blocked model, labelled
of needed and what unblocking still needs, with a bar; a review key sees the same count
per task and no model's name; once the set is labelled and a run of the next version
passes on it, the line says it can be unblocked without force."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from streamlit.testing.v1 import AppTest

from controlplane.db import session_scope
from controlplane.evalsets import actions as evalset_actions
from controlplane.evalsets import service as evalsets
from controlplane.models import ReviewItem
from controlplane.review import actions as review
from controlplane.scheduler import fill_regression_sets
from controlplane.sim.profiles import EDGE_MODEL, EDGE_MODEL_FIX
from tests.dashboard.conftest import Seeded, shown

pytestmark = pytest.mark.integration
TASK = "ticket_classify"


def component(scopes: list[str]) -> None:
    from controlplane.auth.service import Principal
    from shadowplane_dashboard import regression

    regression.render(Principal(name="viewer", scopes=frozenset(scopes)))


def bars(scopes: list[str]) -> list[tuple[int, str]]:
    """The component's bars as (percent filled, text as shown) for a key of those scopes,
    read afresh (the loaders' cache outlives a render in this process)."""
    from shadowplane_dashboard import regression

    regression.load_blocks.clear()
    regression.load_counts.clear()
    at = AppTest.from_function(component, args=(scopes,), default_timeout=30).run()
    assert not at.exception, at.exception
    return [(e.proto.value, shown(e.proto.text)) for e in at.get("progress")]


def regression_counts(seeded: Seeded) -> tuple[int, int]:
    """(done, all) regression review items of the task, counted here from the table."""
    with session_scope(seeded.engine) as session:
        rows = session.execute(
            select(ReviewItem.state, func.count())
            .where(ReviewItem.layer == "regression")
            .group_by(ReviewItem.state)
        ).all()
    counts: dict[str, int] = {state: n for state, n in rows}
    return counts.get("done", 0), sum(counts.values())


def verdict(item: dict[str, Any]) -> str:
    if item["kind"] == "single":
        return "correct"
    return "both_correct" if item["a"] == item["b"] else "b_correct"


def test_read_keys_see_the_model_and_what_unblocking_needs_review_keys_the_count(
    seeded: Seeded,
) -> None:
    done, needed = regression_counts(seeded)
    assert 0 < done < needed, "the seed labels part of the regression sample"
    [(filled, line)] = bars(["read"])
    assert filled == int(100 * done / needed)
    assert line == (
        f"Regression set for {EDGE_MODEL} on {TASK}: {done} of {needed} labelled — unblocking "
        f"still needs: {needed - done} more items labelled, then a run of {EDGE_MODEL} on "
        "this set ≥ 95%"
    )
    [(filled, line)] = bars(["review"])
    assert filled == int(100 * done / needed)
    assert line == f"Regression set of {TASK}: {done} of {needed} labelled"
    assert "small-int4" not in line and "@" not in line

    # The rest labelled through the queue (the regression items come first), then a run of
    # the next version that matches every expected answer.
    clock = datetime(2026, 12, 1, tzinfo=UTC)
    for _ in range(needed - done):
        item = review.claim(seeded.engine, TASK, "finisher", clock)
        assert item is not None
        review.label(seeded.engine, item["id"], "finisher", verdict=verdict(item), now=clock)
    assert regression_counts(seeded) == (needed, needed)
    fill_regression_sets(seeded.engine)  # the next scheduler pass: no backfill by hand
    with session_scope(seeded.engine) as session:
        lines = evalsets.layer_lines(session, evalsets.task_named(session, TASK), "regression")
    assert len(lines) == needed  # from the labels alone
    evalset_actions.store_run(
        seeded.engine,
        TASK,
        layer="regression",
        model=EDGE_MODEL_FIX,
        outputs={x["id"]: x["expected"] for x in lines},
        actor="ci",
    )
    [(filled, line)] = bars(["admin"])
    assert filled == 100
    assert line == (
        f"Regression set for {EDGE_MODEL} on {TASK}: {needed} of {needed} labelled — a run on "
        "this set passes: it can be unblocked without force"
    )

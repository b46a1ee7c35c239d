"""PostgreSQL: a reviewer's claim that races their own label of the item they hold moves
on to the next item instead of handing back the one just labelled."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from controlplane.db import get_engine, session_scope
from controlplane.review import actions
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK
from tests.review.queuedata import T0, add_items

pytestmark = pytest.mark.integration


def _wait_for_lock_wait(engine: Any) -> None:
    """Until some other connection waits on a row lock of review_items (the claim's
    UPDATE blocked behind the label's transaction)."""
    for _ in range(3000):
        with engine.connect() as conn:
            waiting = conn.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE 'UPDATE review_items%'"
                )
            )
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError("the claim never waited on the labelled item's row lock")


def test_a_claim_waiting_on_the_label_of_the_held_item_takes_the_next(pg_url: str) -> None:
    engine = get_engine(pg_url)
    with session_scope(engine) as session:
        apply_config(session, TICKET_TASK, actor="test")
    first, second = add_items(engine, "ticket_classify", 2)
    held = actions.claim(engine, "ticket_classify", "ann", T0, lease_seconds=600)
    assert held is not None and held["id"] == first
    got: dict[str, Any] = {}

    def claim() -> None:
        got["next"] = actions.claim(
            engine, "ticket_classify", "ann", T0 + timedelta(seconds=5), lease_seconds=600
        )

    # The label's transaction, stepped by hand: it locks the item, the claim reads ann's
    # lease and waits on that lock, then the label ends the lease and commits.
    with engine.connect() as labelling:
        with labelling.begin():
            labelling.execute(
                text("SELECT id FROM review_items WHERE id = :id FOR UPDATE"), {"id": first}
            )
            racer = threading.Thread(target=claim)
            racer.start()
            _wait_for_lock_wait(engine)
            labelling.execute(
                text(
                    "UPDATE review_items SET claimed_by = NULL, lease_expires_at = NULL, "
                    "state = 'done' WHERE id = :id"
                ),
                {"id": first},
            )
        racer.join()
    assert got["next"] is not None and got["next"]["id"] == second
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT claimed_by, lease_expires_at FROM review_items WHERE id = :id"),
            {"id": first},
        ).one()
    assert tuple(row) == (None, None)

"""Review items written straight into the database, for tests of the queue and the blind view."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from controlplane.db import session_scope
from controlplane.models import ReviewItem, Task

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def task_id(engine: Engine, name: str) -> int:
    with session_scope(engine) as session:
        found = session.scalar(select(Task.id).where(Task.name == name))
    assert found is not None, name
    return found


def item_row(task: int, n: int, **overrides: Any) -> dict[str, Any]:
    """A queued pair item of the task; override any column."""
    row: dict[str, Any] = {
        "task_id": task,
        "result_id": None,
        "request_id": f"item-{n}",
        "result_ts": T0,
        "window_start": T0,
        "bucket": "128-511",
        "input_tokens": 300,
        "decision": "edge",
        "served": "cloud",
        "flag_version": 1,
        "config_version": 1,
        "comparator": "label",
        "comparator_version": 1,
        "outcome": "conflict",
        "edge_model": "small@3",
        "cloud_model": "large@7",
        "kind": "pair",
        "reason": "conflict",
        "layer": "boundary",
        "inclusion_probability": 0.5,
        "a_is_edge": n % 2 == 0,
        "policy": "full",
        "input": {"text": f"please help with order {n}"},
        "edge_output": "refund",
        "cloud_output": "exchange",
        "diff": {"label": {"edge": "refund", "cloud": "exchange"}},
        "reviews_needed": 1,
        "state": "queued",
        "created_at": T0,
    }
    row.update(overrides)
    return row


def add_items(engine: Engine, task: str, count: int, start: int = 0, **overrides: Any) -> list[int]:
    """`count` queued items of the task, oldest first; their ids."""
    tid = task_id(engine, task)
    with session_scope(engine) as session:
        items = [ReviewItem(**item_row(tid, start + i, **overrides)) for i in range(count)]
        session.add_all(items)
        session.flush()
        return [item.id for item in items]

"""Retention: delete results (and their payloads) older than a cut-off, in batches.

Window metric rows, alerts and audit entries stay. Each batch is its own short
transaction, so pruning a large table never holds locks for long, and the counts say
exactly what was deleted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from controlplane.db import in_transaction, session_scope
from controlplane.models import Payload, Result, Task

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION = re.compile(r"^\s*(\d+)\s*([dhms])\s*$")


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `3600s` → a timedelta; ValueError names what is allowed."""
    match = DURATION.match(text)
    if not match or int(match.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration: a positive whole number with d, h, m or s, e.g. 30d"
        )
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])


@dataclass
class Pruned:
    results: int = 0
    payloads: int = 0
    batches: int = 0


def prune(engine: Engine, *, before: datetime, batch_size: int = 5000) -> Pruned:
    """Delete every result with `ts` before `before`, with its payload, task by task."""
    pruned = Pruned()
    with session_scope(engine) as session:
        task_ids = list(session.scalars(select(Task.id).order_by(Task.id)))
    for task_id in task_ids:
        while True:
            results, payloads = in_transaction(
                engine, partial(_prune_batch, task_id=task_id, before=before, batch_size=batch_size)
            )
            pruned.results += results
            pruned.payloads += payloads
            if results:
                pruned.batches += 1
            if results < batch_size:
                break
    return pruned


def _prune_batch(
    session: Session, *, task_id: int, before: datetime, batch_size: int
) -> tuple[int, int]:
    ids = list(
        session.scalars(
            select(Result.id)
            .where(Result.task_id == task_id, Result.ts < before)
            .order_by(Result.ts)
            .limit(batch_size)
        )
    )
    if not ids:
        return 0, 0
    payloads = session.execute(
        delete(Payload).where(Payload.result_id.in_(ids)).returning(Payload.result_id)
    ).all()
    results = session.execute(delete(Result).where(Result.id.in_(ids)).returning(Result.id)).all()
    return len(results), len(payloads)

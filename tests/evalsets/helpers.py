"""Review items as the sampler queues them (copied from real results) and labels as the
review queue stores them, for eval-set tests; and a CLI runner on a database of the test."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from controlplane.db import session_scope
from controlplane.models import Payload, Result, ReviewItem, ReviewLabel, Task
from controlplane.models.review import PRIORITY_OTHER, PRIORITY_REGRESSION
from controlplane.review.labels import resolve
from tests.conftest import Api, make_result

T0 = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
LABELS = ["refund", "exchange", "complaint", "inquiry"]
TASK = "support_label"
# Every payload kept (agreeing ones too), so any result can be sampled.
TASK_CONFIG: dict[str, Any] = {
    "task": TASK,
    "comparator": {"kind": "label", "labels": LABELS},
    "keep_agreeing_rate": 1.0,
}


def post_tickets(
    api: Api, n: int, *, seed: int = 0, conflict_every: int = 3, task: str = TASK
) -> list[str]:
    """n results of the label task with kept payloads (every `conflict_every`-th a conflict);
    returns their request ids."""
    rng = random.Random(seed)
    ids, body = [], []
    for i in range(n):
        truth = LABELS[i % len(LABELS)]
        edge = LABELS[(i + 1) % len(LABELS)] if i % conflict_every == 0 else truth
        rid = f"ev-{seed}-{i}"
        ids.append(rid)
        body.append(
            make_result(
                task=task,
                request_id=rid,
                ts=(T0 + timedelta(seconds=i)).isoformat(),
                input_tokens=rng.choice([50, 300, 900, 3000]),
                input={"text": f"Ticket {seed}-{i}:  order {1000 + i} please\n help"},
                edge={"output": edge, "confidence": 0.9, "model": "small@3"},
                cloud={"output": truth, "model": "large@7"},
                flag_version=7,
            )
        )
    answer = api.post_results({"results": body})
    assert answer.status_code == 200 and answer.json()["accepted"] == n, answer.text
    return ids


def queue(
    session: Session,
    task: str,
    request_ids: list[str],
    *,
    layer: str = "boundary",
    provenance: dict[str, Any] | None = None,
    reviews_needed: int = 1,
) -> list[ReviewItem]:
    """Queue the results as review items, copying what the sampler copies (pairs; A is the
    edge answer on even result ids)."""
    found = session.scalars(select(Task).where(Task.name == task)).one()
    out = []
    for rid in request_ids:
        result = session.scalars(
            select(Result).where(Result.task_id == found.id, Result.request_id == rid)
        ).one()
        payload = session.get(Payload, result.id)
        assert payload is not None, "only results with a kept payload are sampled"
        item = ReviewItem(
            task_id=found.id,
            result_id=result.id,
            request_id=rid,
            result_ts=result.ts,
            window_start=result.ts.replace(minute=(result.ts.minute // 5) * 5, second=0),
            bucket=result.bucket,
            input_tokens=result.input_tokens,
            decision=result.decision,
            served=result.served,
            flag_version=result.flag_version,
            config_version=result.config_version,
            comparator=result.comparator,
            comparator_version=result.comparator_version,
            outcome=result.outcome,
            edge_error=result.edge_error,
            edge_confidence=result.edge_confidence,
            edge_model=result.edge_model,
            cloud_model=result.cloud_model,
            kind="pair",
            reason="regression" if layer == "regression" else result.outcome or "agree",
            layer=layer,
            # As a rollback queues them (controlplane.review.regression).
            priority=PRIORITY_REGRESSION if layer == "regression" else PRIORITY_OTHER,
            inclusion_probability=0.5 * payload.keep_probability,
            a_is_edge=result.id % 2 == 0,
            policy=payload.policy,
            input=payload.input,
            edge_output=payload.edge_output,
            cloud_output=payload.cloud_output,
            diff=payload.diff,
            edge_error_message=payload.edge_error_message,
            provenance=provenance,
            reviews_needed=reviews_needed,
            state="queued",
        )
        session.add(item)
        out.append(item)
    session.flush()
    return out


def label(
    session: Session,
    item: ReviewItem,
    reviewer: str,
    verdict: str,
    *,
    failure_class: str | None = None,
    corrected: Any = None,
    done: bool = True,
) -> ReviewLabel:
    """A label as the queue stores it (resolved with the item's hidden order)."""
    row = ReviewLabel(
        item_id=item.id,
        task_id=item.task_id,
        reviewer=reviewer,
        verdict=verdict,
        resolved=resolve(verdict, kind=item.kind, a_is_edge=item.a_is_edge),
        failure_class=failure_class,
        corrected=corrected,
    )
    session.add(row)
    if done:
        item.state = "done"
    session.flush()
    return row


def edge_verdict(item: ReviewItem) -> str:
    """The A/B verdict that says the edge answer was right."""
    return "a_correct" if item.a_is_edge else "b_correct"


def cloud_verdict(item: ReviewItem) -> str:
    return "b_correct" if item.a_is_edge else "a_correct"


def label_by_truth(engine: Engine, task: str, request_ids: list[str], **queue_args: Any) -> None:
    """Queue the results and label each with the truth (the cloud answer is right; the edge
    too when it agrees), the way a careful reviewer would."""
    with session_scope(engine) as session:
        for item in queue(session, task, request_ids, **queue_args):
            if item.outcome == "agree":
                label(session, item, "rev-1", "both_correct")
            else:
                label(session, item, "rev-1", cloud_verdict(item), failure_class="wrong_label")


@contextmanager
def cli_env(url: str, evalsets_dir: str | None = None) -> Iterator[None]:
    """Run CliRunner invocations against `url` (settings are read once per process)."""
    import os

    from controlplane.settings import get_settings

    saved = {k: os.environ.get(k) for k in ("SHADOWPLANE_DATABASE_URL", "SHADOWPLANE_EVALSETS_DIR")}
    os.environ["SHADOWPLANE_DATABASE_URL"] = url
    if evalsets_dir is not None:
        os.environ["SHADOWPLANE_EVALSETS_DIR"] = evalsets_dir
    get_settings.cache_clear()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        get_settings.cache_clear()

"""People's actions on eval sets, whichever door calls them (API, CLI, dashboard):
backfill and storing a run. Each is one transaction with its audit entry and, when it
changed something, an outbox `change` event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.evalsets import service
from controlplane.notify.documents import change_document
from controlplane.notify.outbox import add_event


def _refusal(exc: Exception) -> ActionError:
    if isinstance(exc, service.NotFound):
        return ActionError(404, str(exc))
    if isinstance(exc, service.Conflict):
        return ActionError(409, str(exc))
    return ActionError(422 if isinstance(exc, service.Refused) else 409, str(exc))


def backfill(
    engine: Engine, *, task: str | None = None, layer: str | None = None, actor: str
) -> dict[str, Any]:
    """Backfill done review items into eval items (idempotent); answers what it added.
    Audited; each task that gained items is announced."""

    def work(session: Session) -> dict[str, Any]:
        try:
            report = service.backfill(session, task=task, layer=layer)
        except (service.NotFound, service.Refused) as exc:
            raise _refusal(exc) from None
        view = report.view()
        record(
            session,
            actor=actor,
            action="evalsets.backfill",
            task=task,
            details={"task": task, "layer": layer, **view},
        )
        for name, layers in view["tasks"].items():
            added = ", ".join(f"{n} {layer}" for layer, n in layers.items())
            add_event(
                session,
                kind="change",
                task=name,
                document=change_document(
                    action="evalsets.backfill",
                    task=name,
                    actor=actor,
                    explanation=f"{name}: {actor} backfilled eval items ({added})",
                    details={"layers": layers},
                ),
            )
        return view

    return in_transaction(engine, work)


def store_run(
    engine: Engine,
    task: str,
    *,
    layer: str,
    model: str,
    outputs: dict[str, Any],
    actor: str,
    note: str | None = None,
    twice: Sequence[str] = (),
) -> dict[str, Any]:
    """Score a run of an edge model version on one layer of the task's eval set and store
    it (with the layer's content hash: a later backfill makes it a run on an older set).
    409 when the run does not answer exactly the layer's items, each once (`twice` names
    the lines that answer an item again). Audited and announced."""

    def work(session: Session) -> dict[str, Any]:
        try:
            found = service.task_named(session, task)
            run = service.score_run(
                session, found, layer, outputs, model=model, actor=actor, note=note, twice=twice
            )
        except (service.NotFound, service.Refused) as exc:
            raise _refusal(exc) from None
        view = service.run_view(run, task, run.set_hash, run.comparator)
        details = {
            "run": run.id,
            "layer": layer,
            "model": model,
            "accuracy": run.accuracy,
            "n": run.n_items,
            "set_sha256": run.set_hash,
        }
        record(session, actor=actor, action="evalsets.run", task=task, details=details)
        share = f"{run.n_correct}/{run.n_items}"
        add_event(
            session,
            kind="change",
            task=task,
            document=change_document(
                action="evalsets.run",
                task=task,
                actor=actor,
                explanation=f"{task}: {actor} stored a run of {model} on the {layer} eval set: "
                f"{share} right",
                details=details,
            ),
        )
        return view

    return in_transaction(engine, work)

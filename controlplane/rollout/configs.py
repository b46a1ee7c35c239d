"""Applying task configs with their flags: the catalog stores the config version, this
publishes the flag it implies and announces the change, in one transaction (the catalog
knows nothing of flags, so the apply that every door calls lives here)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.catalog import service as catalog
from controlplane.catalog.schemas import ConfigError, parse_config
from controlplane.catalog.service import Applied, TaskConflict
from controlplane.db import in_transaction
from controlplane.errors import ActionError
from controlplane.models import Flag, Task
from controlplane.notify.documents import change_document
from controlplane.notify.outbox import add_event
from controlplane.rollout import flags


def apply_config(session: Session, raw: Any, *, actor: str) -> Applied:
    """Register a task or give it a new config version, and publish its flag, in this
    transaction (flag state locked first). Raises ConfigError on a bad config."""
    flags.lock_state(session)
    applied = catalog.apply_config(session, raw, actor=actor)
    if applied.changed:
        task = session.get(Task, applied.task_id)
        assert task is not None
        reason = (
            f"task created in {task.stage}"
            if applied.created
            else f"config version {applied.version}"
        )
        published = flags.publish(
            session, task, applied.parsed or parse_config(applied.config), reason
        )
        if not applied.created:
            # A hold a config that did not parse put on the flag (announced) ends here.
            flag = published or session.get(Flag, task.id)
            killed = flag is not None and flag.document.get("killed") is True
            flags.release_config_hold(session, task, applied.version, killed)
    return applied


def _announce_applied(session: Session, applied: Applied, actor: str) -> None:
    if not applied.changed:
        return
    what = f"created in {applied.stage}" if applied.created else f"config version {applied.version}"
    add_event(
        session,
        kind="change",
        task=applied.task,
        document=change_document(
            action="task.create" if applied.created else "task.config",
            task=applied.task,
            actor=actor,
            explanation=f"{applied.task}: {what} by {actor}",
            details={"version": applied.version, "stage": applied.stage},
        ),
    )


def apply_tasks(engine: Engine, documents: list[Any], *, actor: str) -> list[Applied]:
    """Apply configs in one transaction (all or none). ActionError 422 names what a bad
    config got wrong; 409 when another writer created the same task at that moment."""

    def work(session: Session) -> list[Applied]:
        applied = [apply_config(session, doc, actor=actor) for doc in documents]
        for one in applied:
            _announce_applied(session, one, actor)
        return applied

    try:
        return in_transaction(engine, work)
    except ConfigError as exc:
        raise ActionError(422, exc.errors) from None
    except TaskConflict as exc:
        raise ActionError(409, str(exc)) from None

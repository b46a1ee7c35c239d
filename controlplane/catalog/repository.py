"""All SQL of the task catalog."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.models import Task, TaskConfigVersion


def task_by_name(session: Session, name: str, *, for_update: bool = False) -> Task | None:
    query = select(Task).where(Task.name == name)
    if for_update:
        query = query.with_for_update()
    return session.scalar(query)


def all_tasks(session: Session) -> list[Task]:
    return list(session.scalars(select(Task).order_by(Task.name)))


def config_version(session: Session, task_id: int, version: int) -> TaskConfigVersion | None:
    return session.scalar(
        select(TaskConfigVersion).where(
            TaskConfigVersion.task_id == task_id, TaskConfigVersion.version == version
        )
    )


def current_versions(session: Session, names: Iterable[str]) -> list[tuple[int, str, int, str]]:
    """(task id, name, current config version, stage) for the named tasks that exist."""
    rows = session.execute(
        select(Task.id, Task.name, Task.config_version, Task.stage).where(
            Task.name.in_(list(names))
        )
    )
    return [(r.id, r.name, r.config_version, r.stage) for r in rows]


def config_documents(
    session: Session, keys: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], dict[str, Any]]:
    """Stored config documents by (task id, version)."""
    wanted = list(keys)
    if not wanted:
        return {}
    task_ids = {task_id for task_id, _ in wanted}
    rows = session.execute(
        select(
            TaskConfigVersion.task_id, TaskConfigVersion.version, TaskConfigVersion.config
        ).where(TaskConfigVersion.task_id.in_(task_ids))
    )
    wanted_set = set(wanted)
    return {(t, v): c for t, v, c in rows if (t, v) in wanted_set}

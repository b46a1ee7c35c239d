"""A task's config versions, newest first, and what changed between two of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.catalog import repository
from controlplane.models import TaskConfigVersion

# Stands for a key one side does not have.
ABSENT = "(absent)"


def config_versions(session: Session, task: str, *, limit: int = 50) -> list[dict[str, Any]] | None:
    """The task's stored config versions, newest first (None: no such task)."""
    found = repository.task_by_name(session, task)
    if found is None:
        return None
    rows = session.scalars(
        select(TaskConfigVersion)
        .where(TaskConfigVersion.task_id == found.id)
        .order_by(TaskConfigVersion.version.desc())
        .limit(limit)
    )
    return [
        {
            "task": found.name,
            "version": row.version,
            "current": row.version == found.config_version,
            "config": row.config,
            "config_hash": row.config_hash,
            "created_at": row.created_at,
            "created_by": row.created_by,
        }
        for row in rows
    ]


def config_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """Every leaf that differs, by dotted path (list items by index; a list of another
    length is one change): [{"path", "before", "after"}], in path order."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[dict[str, Any]] = []
        for key in sorted(set(before) | set(after), key=str):
            here = f"{path}.{key}" if path else str(key)
            out += config_diff(before.get(key, ABSENT), after.get(key, ABSENT), here)
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            out += config_diff(a, b, f"{path}[{i}]")
        return out
    if before == after and type(before) is type(after):
        return []
    return [{"path": path or "(config)", "before": before, "after": after}]

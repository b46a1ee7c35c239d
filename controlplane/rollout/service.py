"""Reading the rollout: the promotion gate of a task now, and the decisions made."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from controlplane.audit.service import decision_view
from controlplane.catalog.schemas import TaskConfig
from controlplane.models import Task
from controlplane.rollout import gate as gates
from controlplane.rollout import repository
from controlplane.rollout.policy import evaluate


def gate(session: Session, task: Task, config: TaskConfig) -> dict[str, Any]:
    """The promotion gate over the last `min_windows` windows closed in the stage."""
    windows = repository.stage_windows(session, task, config)
    labelled = repository.stage_label_windows(session, task, config)
    outcomes = evaluate(
        config, windows, labelled, repository.stage_spans(session, task, config, windows)
    )
    return gates.verdict(task.name, task.stage, config, windows, outcomes)


def list_decisions(
    session: Session, task: str | None = None, limit: int = 100, action: str | None = None
) -> list[dict[str, Any]]:
    return [
        decision_view(d, name) for d, name in repository.decisions(session, task, limit, action)
    ]

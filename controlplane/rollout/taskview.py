"""One task's rollout as the task page reads it: where it stands, what a promotion would
be checked against (the stage as the caller saw it), the gate now, and the edge models a
rollback blocked with their eval runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.catalog import repository as catalog
from controlplane.evalsets.service import list_runs
from controlplane.grading.service import latest_grade
from controlplane.models import BlockedModel, Task
from controlplane.rollout.explain import promoted_to
from controlplane.rollout.service import gate
from controlplane.rollout.stages import config_now


def shown_stage(task: Task, canary_steps: list[int]) -> str:
    """The stage as `promote`'s `expected_stage` names it: `canary:<edge percent>` for a
    canary step, else the stage."""
    if task.stage == "canary" and canary_steps:
        return f"canary:{canary_steps[min(task.canary_step, len(canary_steps) - 1)]}"
    return task.stage


def task_state(session: Session, name: str) -> dict[str, Any] | None:
    """The task's stage, config version, gate verdict (None when its stored config does not
    parse), newest kept grade (None: never graded) and blocked models with their eval
    runs; None for an unknown task."""
    task = catalog.task_by_name(session, name)
    if task is None:
        return None
    config = config_now(session, task)
    steps = config.promotion.canary_steps if config is not None else []
    blocks = session.scalars(
        select(BlockedModel)
        .where(BlockedModel.task_id == task.id, BlockedModel.lifted_at.is_(None))
        .order_by(BlockedModel.model)
    )
    return {
        "task": task.name,
        "stage": task.stage,
        "expected_stage": shown_stage(task, steps),
        "stage_words": (
            promoted_to(task.stage, min(task.canary_step, len(steps) - 1), config)
            if config is not None and task.stage == "canary" and steps
            else task.stage
        ),
        "stage_changed_at": task.stage_changed_at,
        "config_version": task.config_version,
        "config_parses": config is not None,
        "regression_min_accuracy": (
            config.promotion.regression_min_accuracy if config is not None else None
        ),
        "gate": gate(session, task, config) if config is not None else None,
        "grade": latest_grade(session, task.name),
        "blocked": [
            {
                "model": block.model,
                "decision_id": block.decision_id,
                "blocked_at": block.blocked_at,
                "runs": list_runs(session, task, model=block.model),
            }
            for block in blocks
        ],
    }

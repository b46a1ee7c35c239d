"""The regression gate: an edge model version that a rollback blocked comes back only after a
stored run of it on the task's CURRENT `regression` eval set (the same content hash: items
backfilled since make the run an old one) reaches `promotion.regression_min_accuracy`.

`rollout.actions.unblock` asks `check_unblock` in its transaction and refuses (409) with the
sentence it returns, unless forced (then audited as forced).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import TaskConfig
from controlplane.evalsets import repository, service
from controlplane.models import Task

LAYER = "regression"


def check_unblock(session: Session, task: Task, config: TaskConfig, model: str) -> str | None:
    """None when a stored run of `model` on the current regression layer reaches the
    threshold; otherwise the sentence saying why the model may not be unblocked yet."""
    threshold = config.promotion.regression_min_accuracy
    items = service.layer_items(session, task, LAYER)
    if not items:
        return (
            f"{task.name} has no regression eval items yet: label the review items its "
            "rollback queued, backfill them (shadowplane evalset backfill), then store a run "
            f"of {model} on them (POST /v1/evalsets/{task.name}/runs)"
        )
    current = service.layer_hash(session, task, LAYER)
    runs = repository.runs(session, task.id, model=model, layer=LAYER)
    on_current = [r for r in runs if r.set_hash == current]
    best = max(on_current, key=lambda r: (r.accuracy or 0.0, r.id), default=None)
    if best is not None and best.accuracy is not None and best.accuracy >= threshold:
        return None
    need = f"promotion.regression_min_accuracy {threshold:g}"
    if best is not None:
        return (
            f"{model} scored {best.n_correct}/{best.n_items} = {best.accuracy or 0.0:.3f} on the "
            f"current regression eval set of {task.name} (run {best.id}), under {need}"
        )
    if runs:
        return (
            f"{model}'s runs on the regression eval set of {task.name} were on an older set "
            f"({len(items)} items now, sha256 {current[:12]}…); run it on the current set "
            f"and store the run (POST /v1/evalsets/{task.name}/runs); it needs {need}"
        )
    return (
        f"no stored run of {model} on the regression eval set of {task.name} "
        f"({len(items)} items); run it and store the run (POST /v1/evalsets/{task.name}/runs); "
        f"it needs {need}"
    )

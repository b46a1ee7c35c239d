"""The regression gate: an edge model version that a rollback blocked comes back only when

- every regression review item the blocking rollback queued (and any later rollback
  queued) is labelled and backfilled: its input is in the task's `regression` eval set;
- that set holds at least one item; and
- a stored run of the model on the CURRENT set (the same content hash: items backfilled
  since make the run an old one) reaches `promotion.regression_min_accuracy`.

`rollout.actions.unblock` asks `check_unblock` in its transaction and refuses (409) with the
sentence it returns, unless forced (then audited as forced).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import TaskConfig
from controlplane.evalsets import repository, service
from controlplane.models import Task

LAYER = "regression"


def _items(n: int) -> str:
    return f"{n} item{'' if n == 1 else 's'}"


def _waiting(p: service.Pending) -> str:
    """What the missing review items wait for, e.g. '3 still to label; 1 labelled ...'."""
    parts = []
    if p.to_label:
        parts.append(f"{p.to_label} still to label")
    if p.needs_correction:
        parts.append(
            f"{p.needs_correction} labelled without a usable expected answer (waiting for a "
            "label with a valid correction)"
        )
    if p.not_backfilled:
        parts.append(
            f"{p.not_backfilled} labelled but not backfilled yet "
            "(shadowplane evalset backfill --layer regression)"
        )
    return "; ".join(parts)


def _rollback(p: service.Pending, task: Task, model: str) -> str:
    if p.decision_id is None:
        return f"the rollbacks of {task.name}"
    return f"the rollback that blocked {model} (decision {p.decision_id}) and any later rollback"


def check_unblock(session: Session, task: Task, config: TaskConfig, model: str) -> str | None:
    """None when the regression items of the rollback that blocked the model are all in the
    regression layer and a stored run of the model on the current layer reaches the
    threshold; otherwise the sentence saying why the model may not be unblocked yet."""
    threshold = config.promotion.regression_min_accuracy
    # The rollback behind the model's active block; without one (or without its decision)
    # every regression review item of the task counts.
    since = repository.blocking_decision(session, task.id, model)
    pending = service.pending_regression(session, task, since)
    items = service.layer_items(session, task, LAYER)
    if not items:
        queued = (
            f"; {_rollback(pending, task, model)} queued {_items(pending.total)}: "
            f"{_waiting(pending)}"
            if pending.total
            else ""
        )
        return (
            f"{task.name} has no regression eval items yet{queued}. Label the review items "
            "its rollback queued, backfill them (shadowplane evalset backfill --layer "
            f"regression), then store a run of {model} on them "
            f"(POST /v1/evalsets/{task.name}/runs)"
        )
    if pending.missing:
        return (
            f"{pending.missing} of the {_items(pending.total)} that "
            f"{_rollback(pending, task, model)} queued for the regression eval set of "
            f"{task.name} are not in it yet: {_waiting(pending)}. A run of {model} counts "
            "only on a set that holds them all"
        )
    current = service.layer_hash(session, task, LAYER)
    runs = repository.runs(session, task.id, model=model, layer=LAYER)
    on_current = [r for r in runs if r.set_hash == current and r.n_items > 0]
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
        f"({_items(len(items))}); run it and store the run (POST /v1/evalsets/{task.name}/runs); "
        f"it needs {need}"
    )

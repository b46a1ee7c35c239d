"""The regression gate: an edge model version that a rollback blocked comes back only when

- every regression review item the blocking rollback queued (and any later rollback
  queued) is labelled and in the task's `regression` eval set (a label puts it there:
  `review.actions.label`);
- that set holds at least one item; and
- a stored run on the CURRENT set (the same content hash: items added since make the run
  an old one) reaches `promotion.regression_min_accuracy` — a run of the blocked model
  itself or of a later version of its line (`small-int4@4` succeeds `small-int4@3`).

`rollout.actions.unblock` asks `check_unblock` in its transaction and refuses (409) with the
sentence it returns, unless forced (then audited as forced). `regression_progress` says
where each block stands, naming the model to run next; those sentences name models, so
they are for `read` keys: a `review` key gets `review.progress.regression_counts` (labelled of needed, no name).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from controlplane.catalog.schemas import TaskConfig
from controlplane.catalog.service import task_runtimes
from controlplane.evalsets import repository, service
from controlplane.models import Task
from controlplane.models.evalsets import EvalRun
from controlplane.review import repository as review_repository
from controlplane.review.progress import regression_counts

LAYER = "regression"
# How many of the task's newest results since a block are read for a successor of the
# blocked model (the edge model the routers serve now).
SEEN_RESULTS = 1000


def _noun(n: int) -> str:
    return "item" if n == 1 else "items"


def _items(n: int) -> str:
    return f"{n} {_noun(n)}"


# --- model lines (pure) --------------------------------------------------------------


def version_of(model: str) -> tuple[str, int] | None:
    """(line, version) of a model named `<line>@<integer>` (ASCII digits), else None."""
    line, at, version = model.rpartition("@")
    # str.isdigit holds for "²" and "٣" too, which int() refuses or reads as another number.
    if not at or not line or not (version.isascii() and version.isdigit()):
        return None
    return line, int(version)


def succeeds(candidate: str, model: str) -> bool:
    """Whether `candidate` is a later version of `model`'s line: the same name before the
    last "@", a higher integer after it."""
    new, old = version_of(candidate), version_of(model)
    return new is not None and old is not None and new[0] == old[0] and new[1] > old[1]


def may_lift(run_model: str, model: str) -> bool:
    """Whether a run of `run_model` can lift `model`'s block: the model itself or a later
    version of its line."""
    return run_model == model or succeeds(run_model, model)


def next_model(model: str, seen: Iterable[str]) -> str:
    """The model whose run would lift `model`'s block: the latest version of its line among
    `seen` (the edge models of the task's traffic since the block), else the model itself."""
    later = [m for m in seen if succeeds(m, model)]
    return max(later, key=lambda m: version_of(m) or ("", 0), default=model)


def _floor3(fraction: float) -> str:
    """A failing score to 3 places, rounded down: 0.94975 is 0.949, never 0.950 beside a
    threshold of 0.95 it missed."""
    return f"{math.floor(fraction * 1000) / 1000:.3f}"


def percent(fraction: float) -> str:
    """0.95 → '95%', 0.955 → '95.5%'."""
    return f"{round(fraction * 100, 4):g}%"


# --- where a block stands --------------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """Where lifting one blocked model's block stands: the regression items the blocking
    rollback (and later ones) queued and how far they are, the set, and the best run of the
    model's line on the current set."""

    model: str
    pending: service.Pending
    set_size: int
    threshold: float
    next_model: str
    best: EvalRun | None
    # Runs of the model's line exist, but none on the current set.
    stale: bool
    set_hash: str

    @property
    def labelled(self) -> int:
        return self.pending.total - self.pending.to_label

    @property
    def in_set(self) -> int:
        return self.pending.total - self.pending.missing

    @property
    def passed(self) -> bool:
        return (
            self.set_size > 0
            and self.pending.missing == 0
            and self.best is not None
            and (self.best.accuracy or 0.0) >= self.threshold
        )

    def needs(self) -> str | None:
        """What lifting the block still needs, in words (names the model to run), or None."""
        if self.passed:
            return None
        p = self.pending
        steps = []
        fresh = p.to_label - p.unanswered
        if fresh:
            steps.append(f"{fresh} more {_noun(fresh)} labelled")
        if p.unanswered:
            steps.append(
                f"a valid correction on {_items(p.unanswered)} labelled without a usable "
                f"expected answer ({'it is' if p.unanswered == 1 else 'they are'} back in the "
                "queue for another reviewer)"
            )
        if p.needs_correction:
            them = "it" if p.needs_correction == 1 else "them"
            steps.append(
                f"a valid correction on {_items(p.needs_correction)} labelled without a "
                f"usable expected answer (no reviewer is offered {them} again: a reviewer "
                f"who labelled {them} may correct their label with POST "
                "/v1/review/{id}/label, else only force lifts the block)"
            )
        if p.not_backfilled:
            steps.append(
                f"{p.not_backfilled} labelled {_noun(p.not_backfilled)} put in the set "
                "(the next scheduler pass does it)"
            )
        if not p.total and not self.set_size:
            steps.append("regression items in the set (none was queued)")
        steps.append(f"a run of {self.next_model} on this set ≥ {percent(self.threshold)}")
        return ", then ".join(steps)


def _runs_of_line(session: Session, task: Task, model: str) -> list[EvalRun]:
    return [r for r in repository.runs(session, task.id, layer=LAYER) if may_lift(r.model, model)]


def standing(
    session: Session,
    task: Task,
    config: TaskConfig,
    model: str,
    *,
    decision_id: int | None,
    since: datetime | None,
    set_hash: str | None = None,
    set_size: int | None = None,
) -> Standing:
    """Where lifting `model`'s block (put by rollback `decision_id` at `since`) stands.
    `set_hash` and `set_size` of the task's current regression layer when the caller read
    them already (several blocks of one task)."""
    if set_hash is None or set_size is None:
        set_hash, set_size = service.layer_digest(session, task, LAYER)
    runs = _runs_of_line(session, task, model)
    comparator = service.current_comparator(session, task)
    on_current = [r for r in runs if service.is_current(r, set_hash, comparator) and r.n_items > 0]
    seen = (
        repository.edge_models_since(session, task.id, since, SEEN_RESULTS)
        if since is not None
        else set()
    )
    return Standing(
        model=model,
        pending=service.pending_regression(session, task, decision_id),
        set_size=set_size,
        threshold=config.promotion.regression_min_accuracy,
        next_model=next_model(model, seen),
        best=max(on_current, key=lambda r: (r.accuracy or 0.0, r.id), default=None),
        stale=bool(runs) and not on_current,
        set_hash=set_hash,
    )


def _rollback(s: Standing, task: Task) -> str:
    if s.pending.decision_id is None:
        return f"the rollbacks of {task.name}"
    return (
        f"the rollback that blocked {s.model} (decision {s.pending.decision_id}) and any "
        "later rollback"
    )


def _facts(s: Standing, task: Task) -> str:
    """What stands between the block and its lifting now, in one sentence."""
    p = s.pending
    if p.missing:
        return (
            f"{p.missing} of the {_items(p.total)} that {_rollback(s, task)} queued for the "
            f"regression eval set of {task.name} are not in it yet ({s.labelled} labelled)"
        )
    if not s.set_size:
        return f"{task.name} has no regression eval items yet"
    if s.best is not None:
        b = s.best
        return (
            f"the best run on the current regression eval set of {task.name} ("
            f"{_items(s.set_size)}), run {b.id} of {b.model}, scored {b.n_correct}/{b.n_items} "
            f"= {_floor3(b.accuracy or 0.0)}, under promotion.regression_min_accuracy "
            f"{s.threshold:g}"
        )
    if s.stale:
        return (
            f"the runs of {s.model} and later versions of its line on the regression eval set "
            f"of {task.name} were on an older set ({_items(s.set_size)} now, sha256 "
            f"{s.set_hash[:12]}…)"
        )
    return (
        f"no stored run of {s.model} or a later version of its line on the current "
        f"regression eval set of {task.name} ({_items(s.set_size)})"
    )


def refusal(s: Standing, task: Task) -> str | None:
    """The sentence refusing to lift the block (why, and what it still needs), or None."""
    needs = s.needs()
    if needs is None:
        return None
    return (
        f"{_facts(s, task)}. Unblocking {s.model} still needs: {needs} "
        f"(store the run with POST /v1/evalsets/{task.name}/runs)"
    )


def check_unblock(session: Session, task: Task, config: TaskConfig, model: str) -> str | None:
    """None when the regression items of the rollback that blocked the model (and of later
    rollbacks) are all in the regression layer and a stored run of the model, or of a later
    version of its line, on the current layer reaches the threshold; otherwise the sentence
    saying why the model may not be unblocked yet and what it still needs."""
    # The set as the reviewers' labels stand now (a correction since the last pass).
    service.follow_labels_of(session, task, LAYER, service.comparator_spec_or_none(session, task))
    # The rollback behind the model's active block; without one (or without its decision)
    # every regression review item of the task counts.
    block = next(
        (b for b in review_repository.active_blocks(session, task.id) if b.model == model), None
    )
    found = standing(
        session,
        task,
        config,
        model,
        decision_id=block.decision_id if block is not None else None,
        since=block.since if block is not None else None,
    )
    return refusal(found, task)


@dataclass(frozen=True)
class BlockProgress:
    """One active block's progress, as `GET /v1/tasks/{task}/regression` answers it (names
    models: for `read` keys)."""

    model: str
    decision_id: int | None
    # Regression items the blocking rollback and later ones queued: labelled (done), all,
    # and in the regression eval set.
    labelled: int
    needed: int
    in_set: int
    # The model whose run would lift the block (the latest successor seen, else the model).
    next_model: str
    # None when unblocking would pass now; else what it still needs, in words.
    unblock: str | None


def regression_progress(session: Session, task: Task, config: TaskConfig) -> list[BlockProgress]:
    """Per active block of the task (by model): where lifting it stands."""
    blocks = review_repository.active_blocks(session, task.id)
    if not blocks:
        return []
    digest, size = service.layer_digest(session, task, LAYER)
    out = []
    for block in blocks:
        s = standing(
            session,
            task,
            config,
            block.model,
            decision_id=block.decision_id,
            since=block.since,
            set_hash=digest,
            set_size=size,
        )
        out.append(
            BlockProgress(
                model=block.model,
                decision_id=block.decision_id,
                labelled=s.labelled,
                needed=s.pending.total,
                in_set=s.in_set,
                next_model=s.next_model,
                unblock=s.needs(),
            )
        )
    return out


def progress_view(session: Session, task: Task, config: TaskConfig) -> dict[str, object]:
    """`GET /v1/tasks/{task}/regression`: the threshold and every active block's progress."""
    return {
        "task": task.name,
        "min_accuracy": config.promotion.regression_min_accuracy,
        "blocks": [vars(p) for p in regression_progress(session, task, config)],
    }


def blocked_progress(session: Session, task: str | None = None) -> list[dict[str, object]]:
    """`progress_view` of every task with an edge model blocked (or of the named one, if
    it has one), by task name; a task whose config does not parse is left out."""
    out = []
    for found in repository.tasks_by_name(session, task):
        if not review_repository.active_blocks(session, found.id):
            continue
        runtime = task_runtimes(session, {found.name}).get(found.name)
        if runtime is not None:
            out.append(progress_view(session, found, runtime.config))
    return out


def blind_progress(session: Session, task: str | None = None) -> list[dict[str, object]]:
    """Per task with an edge model blocked (or the named one, if it has one), by name:
    `{"task", "labelled", "needed"}` (`review.progress.regression_counts`: no model named)."""
    found = repository.tasks_by_name(session, task)
    counts = regression_counts(session, [t.id for t in found])
    return [{"task": t.name, **counts[t.id]} for t in found if t.id in counts]

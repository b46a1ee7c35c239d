"""Routing flags: derived from a task's stage and config, stored with a per-task version
and a global revision (docs/http-api.md, "Flags").

`derive` is pure. `publish` bumps the version and the revision, and writes `flag_history`,
in the caller's transaction (the one that changed the stage or the config), so routers
never see a flag without its cause; the revision is announced after the commit
(`flagbus`). Every writer takes the flag state row first (`lock_state`): docs/decisions.md.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.catalog.schemas import TaskConfig
from controlplane.models import ConfigHold, FailingEvaluation, Flag, FlagHistory, FlagState, Task
from controlplane.models.base import utcnow
from controlplane.notify.documents import change_document
from controlplane.notify.outbox import add_event
from controlplane.rollout import flagbus
from controlplane.rollout.schemas import REASON_MAX_CHARS

# The fields routers act on; a change in any of them is a new flag version.
ROUTING_FIELDS = (
    "stage",
    "edge_percent",
    "sticky_by",
    "max_input_tokens",
    "shadow_rate",
    "killed",
    "default_route",
    "repeat_rate",
)


def derive(stage: str, canary_step: int, config: TaskConfig, killed: bool) -> dict[str, Any]:
    """The routing fields of a flag: what is served and what runs beside it."""
    steps = config.promotion.canary_steps
    edge_percent = {"canary": steps[min(canary_step, len(steps) - 1)] if steps else 0, "full": 100}
    # cloud: nothing runs beside the cloud; every other stage runs the second side at the
    # task's shadow_rate (shadow and rolled_back: the edge, in shadow; canary: the side not
    # served; full: the cloud, to verify).
    shadow_rate = 0.0 if stage == "cloud" else config.shadow_rate
    # The share of requests on which routers ask the cloud a second time (`cloud_repeat`,
    # the task's noise floor), in every stage: in `cloud` too, where grading matters most.
    # Kept under the kill switch: a repeat only asks the cloud, off the serving path, and
    # the kill switch keeps the edge out; the cloud is what a killed flag serves anyway.
    repeat_rate = config.grading.repeat_rate
    if killed:
        return {
            "stage": stage,
            "edge_percent": 0,
            "sticky_by": config.sticky_by,
            "max_input_tokens": config.max_input_tokens,
            "shadow_rate": 0.0,
            "killed": True,
            "default_route": "cloud",
            "repeat_rate": repeat_rate,
        }
    return {
        "stage": stage,
        "edge_percent": edge_percent.get(stage, 0),
        "sticky_by": config.sticky_by,
        "max_input_tokens": config.max_input_tokens,
        "shadow_rate": shadow_rate,
        "killed": False,
        "default_route": "cloud",
        "repeat_rate": repeat_rate,
    }


def lock_state(session: Session) -> FlagState:
    """Lock the global flag state row (the first lock of every flag writer) and return it."""
    state = session.get(FlagState, 1, with_for_update=True)
    if state is None:  # the migration seeds it; a hand-made database may lack it
        state = FlagState(id=1, revision=0, killed=False)
        session.add(state)
        session.flush()
    return state


def publish(session: Session, task: Task, config: TaskConfig, reason: str) -> Flag | None:
    """Store the task's flag if its routing fields changed; returns the new flag, or None."""
    state = lock_state(session)
    flag = session.get(Flag, task.id, with_for_update=True)
    # A task a failing evaluation grounded stays on the cloud whoever publishes (a lift, a
    # config applied, a promotion) until an evaluation works (actions.evaluation_works).
    failing = session.get(FailingEvaluation, task.id)
    grounded = failing is not None and failing.grounded_at is not None
    fields = derive(task.stage, task.canary_step, config, state.killed or grounded)
    return _store(session, task, flag, state, fields, reason)


def publish_killed(
    session: Session, task: Task, reason: str, *, restate: bool = False
) -> Flag | None:
    """Throw the kill switch on a task whose stored config does not parse: its flag keeps
    its other fields and routes everything to the cloud. A kill reaches every flag. With
    `restate`, a new version is stored even when its routing is unchanged (its reason is
    new: a lift that leaves the task killed says why)."""
    state = lock_state(session)
    flag = session.get(Flag, task.id, with_for_update=True)
    if flag is None:  # no flag: routers send the task to the cloud already
        return None
    fields = {k: flag.document.get(k) for k in ROUTING_FIELDS}
    # A flag stored before flags carried it has no repeat rate: no repeats (routers read a
    # missing one as 0 too).
    if fields["repeat_rate"] is None:
        fields["repeat_rate"] = 0.0
    fields.update(
        stage=task.stage, edge_percent=0, shadow_rate=0.0, killed=True, default_route="cloud"
    )
    return _store(session, task, flag, state, fields, reason, restate=restate)


def announce_hold(
    session: Session, task: Task, *, action: str, explanation: str, details: dict[str, Any]
) -> None:
    """The policy began (`flag.grounded`) or ended (`flag.ungrounded`) holding the task's
    flag on the cloud with its stage kept: recorded in the audit log and announced as a
    `change` event, in this transaction, so the team's webhook hears its edge stopped or
    may start again. `details.kill_switch` says whether the kill switch holds every flag
    on the cloud meanwhile."""
    details = {**details, "kill_switch": lock_state(session).killed}
    record(session, actor="policy", action=action, task=task.name, details=details)
    add_event(
        session,
        kind="change",
        task=task.name,
        document=change_document(
            action=action, task=task.name, actor="policy", explanation=explanation, details=details
        ),
    )


def hold_for_config(session: Session, task: Task, why: str, *, said: str) -> None:
    """Announce, once, that the task's flag is held on the cloud because its stored config
    does not parse (`why`; `said`: what just happened, first in the sentence), whichever
    path finds it first (a pass, a lift, a rollback); a no-op while announced (its
    `config_holds` row). A task in stage `cloud` is not announced: it routes nothing to
    the edge and runs no shadow, so its hold changes nothing a team could act on."""
    if task.stage == "cloud" or session.get(ConfigHold, task.id) is not None:
        return
    session.add(ConfigHold(task_id=task.id, since=utcnow(), version=task.config_version))
    why = why[:REASON_MAX_CHARS]
    announce_hold(
        session,
        task,
        action="flag.grounded",
        explanation=f"{task.name}: {said}: the stored config does not parse ({why}); apply a "
        "valid config and it follows its stage again",
        details={"cause": "config_unparsed", "stage": task.stage, "why": why},
    )


def release_config_hold(session: Session, task: Task, version: int, killed: bool) -> None:
    """Announce the end of an announced config hold: config `version` parses (`killed`:
    whether the flag just published is still on the cloud, by the kill switch or failing
    evaluations)."""
    held = session.get(ConfigHold, task.id)
    if held is None:
        return
    session.delete(held)
    still = (
        "the kill switch or failing evaluations still hold its flag on the cloud"
        if killed
        else f"its flag follows its stage ({task.stage}) again"
    )
    announce_hold(
        session,
        task,
        action="flag.ungrounded",
        explanation=f"{task.name}: config version {version} parses; {still}",
        details={"cause": "config_applied", "stage": task.stage, "version": version},
    )


def left_on_the_cloud(said: str, why: str) -> str:
    """A flag reason for a task an action left on the cloud: what the action said, cut
    short where needed so that why it is left there (at most half the bound) is kept."""
    tail = f"; left on the cloud: {why}"[: REASON_MAX_CHARS // 2]
    return said[: REASON_MAX_CHARS - len(tail)] + tail


def _store(
    session: Session,
    task: Task,
    flag: Flag | None,
    state: FlagState,
    fields: dict[str, Any],
    reason: str,
    *,
    restate: bool = False,
) -> Flag | None:
    if flag is not None and {k: flag.document.get(k) for k in ROUTING_FIELDS} == fields:
        if not restate or flag.document.get("reason") == reason:
            return None
    state.revision += 1
    now = utcnow()
    version = (flag.version if flag is not None else 0) + 1
    document = {
        "task": task.name,
        "version": version,
        **fields,
        "updated_at": now.isoformat(),
        "reason": reason,
    }
    if flag is None:
        flag = Flag(
            task_id=task.id, version=version, document=document, updated_at=now, reason=reason
        )
        session.add(flag)
    else:
        flag.version, flag.document, flag.updated_at, flag.reason = version, document, now, reason
    session.add(
        FlagHistory(
            task_id=task.id,
            version=version,
            revision=state.revision,
            fields=dict(fields),
            cause=reason,
            created_at=now,
        )
    )
    session.flush()
    flagbus.mark(session, state.revision)
    return flag


def history(session: Session, task_id: int) -> list[dict[str, Any]]:
    """Every version of a task's flag, oldest first: `version`, `revision` (the global
    revision after the change; null for versions older than the history), `fields` (the
    routing fields), `cause` and `created_at`."""
    rows = session.scalars(
        select(FlagHistory).where(FlagHistory.task_id == task_id).order_by(FlagHistory.version)
    )
    return [
        {
            "version": row.version,
            "revision": row.revision,
            "fields": row.fields,
            "cause": row.cause,
            "created_at": row.created_at.isoformat(),
        }
        for row in rows
    ]


def flag_of(session: Session, task: str) -> dict[str, Any] | None:
    """One task's published flag, or None."""
    return session.scalar(
        select(Flag.document).join(Task, Task.id == Flag.task_id).where(Task.name == task)
    )


def flags_document(session: Session) -> dict[str, Any]:
    """`{"revision": n, "flags": {task: flag}}` (docs/http-api.md, "Flags")."""
    revision = session.scalar(select(FlagState.revision).where(FlagState.id == 1)) or 0
    rows = session.execute(
        select(Task.name, Flag.document).join(Flag, Flag.task_id == Task.id).order_by(Task.name)
    )
    return {"revision": revision, "flags": {name: document for name, document in rows}}


def etag(body: bytes) -> str:
    """A strong ETag of a body: a hash of the bytes alone, so every replica that renders the
    same body answers the same tag."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an If-None-Match header names `tag` (RFC 9110's weak comparison): `*`, or any
    listed tag equal with or without `W/`."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == tag:
            return True
    return False

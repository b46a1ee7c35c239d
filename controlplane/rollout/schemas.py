"""What the rollout API takes and answers: people's actions in, flags, the gate,
decisions, task views and action results out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool

from controlplane.catalog.schemas import TaskOut
from controlplane.errors import StrictBody
from controlplane.metrics.schemas import WindowRow

# The longest reason a person's action takes: the request bodies below declare it, and
# `controlplane.rollout.actions.check_reason` refuses a longer one at every door.
REASON_MAX_CHARS = 2000
# What check_reason takes, as the document states it: no C0 control character (nor DEL)
# but tab and line feed, and something besides white space.
_CONTROL = "\\u0000-\\u0008\\u000b-\\u001f\\u007f"
_BLANK = "\\t\\n \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
REASON_PATTERN = f"^[^{_CONTROL}]*[^{_CONTROL}{_BLANK}][^{_CONTROL}]*$"
Reason = Annotated[
    str,
    Field(
        min_length=1,
        max_length=REASON_MAX_CHARS,
        description="Why: recorded with the action.",
        json_schema_extra={"pattern": REASON_PATTERN},
    ),
]


class ActionIn(StrictBody):
    reason: Reason
    force: StrictBool = False


class PromoteIn(ActionIn):
    expected_stage: str | None = Field(
        None,
        max_length=100,
        description="The stage the caller saw: `shadow`, `canary` (any step), "
        "`canary:<edge percent>` (that step); 409 when the task has moved since.",
    )


class UnblockIn(StrictBody):
    model: str = Field(min_length=1, max_length=200)
    reason: Reason
    force: StrictBool = Field(
        False,
        description="Lift it without a passing run on the regression eval set (audited).",
    )


class KillIn(StrictBody):
    reason: Reason


class FlagOut(BaseModel):
    """A task's routing flag: what is served and what runs beside it."""

    task: str
    version: int
    stage: str
    edge_percent: int
    sticky_by: Literal["session", "user"]
    max_input_tokens: int | None
    shadow_rate: float
    killed: bool
    default_route: str
    repeat_rate: float = Field(
        0.0,
        description="The share of requests, sticky by request id, on which routers ask the "
        "cloud a second time and report it as `cloud_repeat` (the task's grading.repeat_rate); "
        "absent from flags stored before it: read it as 0.",
    )
    updated_at: datetime
    reason: str


class FlagsOut(BaseModel):
    """Every task's flag by task name, and the global revision (bumped by every change)."""

    revision: int
    flags: dict[str, FlagOut]


class FlagVersionOut(BaseModel):
    """One version of a task's flag: the routing fields it had and what made it."""

    version: int
    # The global revision after this change; null for versions older than the history.
    revision: int | None
    fields: dict[str, Any]
    cause: str
    created_at: datetime


class FlagHistoryOut(BaseModel):
    """Every version of a task's flag, oldest first: a result's `flag_version` read back."""

    task: str
    versions: list[FlagVersionOut]


class AppliedOut(BaseModel):
    """A config applied: 201 with `changed` when it made a new version, 200 when unchanged."""

    task: str
    version: int
    changed: bool
    created: bool
    stage: str
    config: dict[str, Any]


class TaskDetailOut(TaskOut):
    """One task with its published flag, its latest closed window (bucket `all`) and its
    re-grade mark."""

    flag: FlagOut | None
    latest_window: WindowRow | None
    # Set by an input-shift rollback: promotion is refused, forced or not, until an
    # `offload` grade over traffic since `shifted_at` clears it.
    needs_regrade: bool
    shifted_at: datetime | None


class BucketGateOut(BaseModel):
    results: int
    pairs: int
    agreement: float | None
    agreement_low: float | None
    edge_fail_rate: float | None
    edge_fail_rate_high: float | None
    verdict: Literal["pass", "fail", "no traffic", "insufficient evidence"]


class GateOut(BaseModel):
    """The promotion gate over the windows closed in the stage: passed, or the reasons not."""

    task: str
    stage: str
    passed: bool
    windows: int
    reasons: list[str]
    buckets: dict[str, BucketGateOut]


# Every action a decision records (repository.TASK_ACTIONS and EVERY_TASK_ACTIONS).
DecisionAction = Literal[
    "promote", "rollback", "rearm", "needs_regrade", "regraded", "kill", "lift"
]


class DecisionOut(BaseModel):
    """A decision: a rollback, promotion, re-arm, kill or lift, with its evidence."""

    id: int
    # null for the global kill switch (kill, lift)
    task: str | None
    action: str
    actor: str
    reason: str
    rule: str | None
    bucket: str | None
    stage_before: str | None
    stage_after: str | None
    flag_version_before: int | None
    flag_version_after: int | None
    created_at: datetime
    # What the decision rested on (verdicts, the gate, counts), by action.
    evidence: dict[str, Any]


class DecisionsOut(BaseModel):
    decisions: list[DecisionOut]


class BlockProgressOut(BaseModel):
    """Where lifting one blocked edge model's block stands."""

    model: str
    # The rollback that blocked it (null: a block naming none; every regression item counts).
    decision_id: int | None
    # The regression review items that rollback and later ones queued: labelled (done), all
    # of them, and those in the `regression` eval set.
    labelled: int
    needed: int
    in_set: int
    # The model whose run would lift the block: the latest later version of its line seen in
    # the task's traffic since the block, else the model itself.
    next_model: str
    # null when unblocking passes now; else what it still needs, e.g. "a run of
    # small-int4@4 on this set ≥ 95%".
    unblock: str | None


class RegressionOut(BaseModel):
    """The regression gate per blocked edge model of a task."""

    task: str
    # promotion.regression_min_accuracy: what a run on the set must reach.
    min_accuracy: float
    blocks: list[BlockProgressOut]


class UnblockOut(BaseModel):
    task: str
    model: str
    # The models still blocked for the task.
    blocked: list[str]

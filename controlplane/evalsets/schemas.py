"""Eval set request and answer bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from controlplane.errors import StrictBody
from controlplane.params import TASK_NAME_PATTERN, JsonValue

Layer = Literal["boundary", "anomaly", "regression"]
# A run answers every item of a layer: bounded by the body limit, and by this count.
MAX_RUN_LINES = 100_000


class BackfillIn(StrictBody):
    task: str | None = Field(None, pattern=TASK_NAME_PATTERN)
    layer: Layer | None = None


class BackfillOut(BaseModel):
    added: int
    tasks: dict[str, dict[str, int]] = Field(description="Items added per task and layer.")
    needs_correction: int = Field(
        description="Done items labelled both_wrong, unclear or wrong without a correction: "
        "they enter once a reviewer gives the expected answer."
    )
    invalid_expected: int = Field(
        description="Done items whose expected answer (a correction, or the right side's "
        "output) the task's comparator calls invalid, so no run could match it: they wait "
        "for a label with a valid correction."
    )
    duplicates: int = Field(description="Done items whose input is already in the task's sets.")


class EvalSetOut(BaseModel):
    task: str
    layer: str
    count: int
    sha256: str = Field(description="sha256 of the layer's JSONL export.")


class EvalSetsOut(BaseModel):
    sets: list[EvalSetOut]
    manifest_sha256: str = Field(
        description="sha256 of the manifest.json a JSONL export of every set writes."
    )


class EvalItemsOut(BaseModel):
    items: list[dict[str, Any]] = Field(
        description="Exported lines: to a key with `read`, the full form (evalsets/schema.json); "
        "to a `review` key without it, the blind form: id, task, layer, input, a, b, expected, "
        'bucket, failure_class, tags (docs/evalsets.md, "Blind form").'
    )
    next: int | None = Field(description="Cursor for the next page (`after`); null at the end.")


class RunLine(StrictBody):
    # An eval item's id: the sha256 of its task and input (controlplane.evalsets.items).
    id: str = Field(pattern="^[0-9a-f]{64}$")
    output: JsonValue = None


class RunIn(StrictBody):
    model: str = Field(min_length=1, max_length=200, description="The edge model version.")
    layer: Layer = "regression"
    # The first bad line refuses the run (pydantic's fail_fast), its problems named: a run of
    # 100,000 lines of 21 problems each built 2.1 million errors, holding the GIL (every
    # request of the API process, flag polls too) for seconds even off the event loop.
    lines: list[RunLine] = Field(max_length=MAX_RUN_LINES, fail_fast=True)
    note: str | None = Field(None, max_length=2000)


class RunOut(BaseModel):
    id: int
    task: str
    layer: str
    model: str
    set_sha256: str
    current: bool | None = Field(description="Whether the run was on the layer as it is now.")
    n: int
    correct: int
    accuracy: float | None
    per_bucket: dict[str, dict[str, Any]]
    actor: str
    note: str | None
    created_at: datetime


class RunsOut(BaseModel):
    runs: list[RunOut]

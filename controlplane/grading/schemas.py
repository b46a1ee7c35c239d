"""What the grade endpoints answer (docs/http-api.md, "Grades"): the shape OpenAPI shows.

The endpoints answer the stored document itself; these models describe it."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

Tier = Literal["offload", "shadow", "keep_cloud", "forbid", "insufficient"]


class Dimension(BaseModel):
    """One dimension: its score as suitability for the edge (0–1, null when not measured),
    whether it shows the danger signal, and why, in a sentence."""

    score: float | None
    signal: bool
    reason: str


class InputLengthValue(BaseModel):
    """Input tokens over the span: P50, P95 and P95 / P50."""

    p50: float | None
    p95: float | None
    ratio: float | None


class InputLengthOut(Dimension):
    value: InputLengthValue


class DeterminismValue(BaseModel):
    """The cloud's agreement with itself on repeat pairs (with its 95% Wilson interval),
    and the share of repeat pairs whose answers are inside the schema."""

    self_agreement: float | None
    low: float | None
    high: float | None
    in_schema: float | None


class DeterminismOut(Dimension):
    value: DeterminismValue


class ErrorCostOut(Dimension):
    """Declared, not measured: the task's `error_cost` and `irreversible_actions`; `veto`
    when the cost is at or above the error-cost veto (the task stays on the cloud)."""

    value: float
    irreversible_actions: list[str]
    veto: bool


class FrequencyValue(BaseModel):
    """Calls per day over the span and mean input tokens per call."""

    per_day: float | None
    mean_input_tokens: float | None


class FrequencyOut(Dimension):
    value: FrequencyValue


class DimensionsOut(BaseModel):
    input_length: InputLengthOut
    determinism: DeterminismOut
    error_cost: ErrorCostOut
    frequency: FrequencyOut


class SpanOut(BaseModel):
    """The traffic graded: windows of the current config version from `since` to `until`."""

    since: datetime
    until: datetime
    results: int
    repeat_pairs: int
    days: int = Field(description="UTC days in the span with at least one result.")


class NoisyOut(BaseModel):
    """A field (json_fields) or check (text_conservation) the cloud changed on more than
    `grading.noisy_field_rate` of its repeat pairs."""

    name: str
    count: int
    pairs: int
    rate: float


class GradeOut(BaseModel):
    """A task's grade: which tier of offloading its own traffic supports, and why."""

    task: str
    tier: Tier
    score: float | None = Field(
        description="The weighted score (0–1); null for forbid, a veto, or insufficient."
    )
    computed_at: datetime
    span: SpanOut
    dimensions: DimensionsOut
    reasons: list[str] = Field(description="The veto, then every dimension with its signal.")
    missing: list[str] = Field(description="What is missing when the tier is insufficient.")
    noisy: list[NoisyOut]
    to_change: list[str] = Field(description="What would change the tier, in sentences.")


class GradesOut(BaseModel):
    grades: list[GradeOut]

"""What a routing service posts (DESIGN §5) and what it gets back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Side = Literal["edge", "cloud"]


Code = str | None
# Counts are stored as 32-bit integers.
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]


class Lenient(BaseModel):
    # Unknown fields are ignored, not refused: a router built against a newer contract
    # must not have its results thrown away by an older control plane.
    model_config = ConfigDict(extra="ignore")


class SideIn(Lenient):
    output: Any = None
    error: Code = Field(None, min_length=1, max_length=64)
    error_message: Code = None
    latency_ms: float | None = Field(None, ge=0)
    ttfb_ms: float | None = Field(None, ge=0)
    model: Code = Field(None, max_length=200)
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cost: float | None = Field(None, ge=0)


class EdgeSideIn(SideIn):
    confidence: float | None = Field(None, ge=0, le=1)
    valid: bool | None = None


class InputIn(Lenient):
    text: Any = None
    segments: list[int] | None = None


class ResultIn(Lenient):
    request_id: str = Field(min_length=1, max_length=200)
    task: str = Field(min_length=1, max_length=100)
    ts: datetime | None = None
    session_id: Code = Field(None, max_length=200)
    user_id: Code = Field(None, max_length=200)
    input_tokens: Count
    decision: Side
    served: Side
    degraded: bool = False
    degrade_reason: Code = Field(None, max_length=200)
    flag_version: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    input: InputIn | None = None
    edge: EdgeSideIn | None = None
    cloud: SideIn | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ResultIn:
        if self.edge is None and self.cloud is None:
            raise ValueError("at least one of 'edge' or 'cloud' is required")
        if self.served == "edge" and self.edge is None:
            raise ValueError("served is 'edge' but there is no 'edge' side")
        if self.served == "cloud" and self.cloud is None:
            raise ValueError("served is 'cloud' but there is no 'cloud' side")
        if self.degraded and self.served != "cloud":
            raise ValueError("degraded is true, so served must be 'cloud' (the request escalated)")
        if self.degraded and self.edge is None:
            raise ValueError("degraded is true but there is no 'edge' side (the edge was tried)")
        return self


# Columns of text that PostgreSQL cannot store with a NUL character in them. (Outputs and
# inputs are JSON: their NUL escapes are stored as U+FFFD instead.)
TEXT_FIELDS = ("request_id", "task", "session_id", "user_id", "degrade_reason")
SIDE_TEXT_FIELDS = ("error", "error_message", "model")


def nul_fields(item: ResultIn) -> list[str]:
    """The text fields of a result holding a NUL character."""
    found = [name for name in TEXT_FIELDS if "\x00" in (getattr(item, name) or "")]
    for side_name in ("edge", "cloud"):
        side = getattr(item, side_name)
        if side is not None:
            found += [
                f"{side_name}.{name}"
                for name in SIDE_TEXT_FIELDS
                if "\x00" in (getattr(side, name) or "")
            ]
    return found


class ResultBatch(BaseModel):
    """Up to 1000 results in one request."""

    results: list[ResultIn]


class Rejected(BaseModel):
    index: int
    request_id: str | None
    error: str


class IngestReport(BaseModel):
    accepted: int = 0
    duplicates: int = 0
    rejected: list[Rejected] = []

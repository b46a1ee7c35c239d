"""What a routing service posts (DESIGN §5) and what it gets back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Side = Literal["edge", "cloud"]


def _no_nul(value: str | None) -> str | None:
    # PostgreSQL text cannot hold NUL; refuse it here rather than fail the whole batch later.
    if value is not None and "\x00" in value:
        raise ValueError("must not contain the NUL character")
    return value


Code = Annotated[str | None, AfterValidator(_no_nul)]


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
    input_tokens: int | None = Field(None, ge=0)
    output_tokens: int | None = Field(None, ge=0)
    cost: float | None = Field(None, ge=0)


class EdgeSideIn(SideIn):
    confidence: float | None = Field(None, ge=0, le=1)
    valid: bool | None = None


class InputIn(Lenient):
    text: Any = None
    segments: list[int] | None = None


class ResultIn(Lenient):
    request_id: Annotated[str, AfterValidator(_no_nul)] = Field(min_length=1, max_length=200)
    task: Annotated[str, AfterValidator(_no_nul)] = Field(min_length=1, max_length=100)
    ts: datetime | None = None
    session_id: Code = Field(None, max_length=200)
    user_id: Code = Field(None, max_length=200)
    input_tokens: int = Field(ge=0)
    decision: Side
    served: Side
    degraded: bool = False
    degrade_reason: Code = Field(None, max_length=200)
    flag_version: int | None = None
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


class Rejected(BaseModel):
    index: int
    request_id: str | None
    error: str


class IngestReport(BaseModel):
    accepted: int = 0
    duplicates: int = 0
    rejected: list[Rejected] = []

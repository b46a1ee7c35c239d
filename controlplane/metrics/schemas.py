"""What the windows API answers: one flat row per window and bucket (every field of
`controlplane.metrics.fields.FIELDS`, in that order; a rate with a zero denominator is null,
and so is its interval)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class WindowRow(BaseModel):
    window_start: datetime
    window_end: datetime
    bucket: str
    closed: bool
    closed_at: datetime | None
    config_version: int
    n_results: int
    n_pairs: int
    n_edge_runs: int
    n_edge_attempts: int
    n_late: int
    n_repeat_pairs: int
    agreement: float | None
    agreement_num: int
    agreement_den: int
    agreement_low: float | None
    agreement_high: float | None
    conflict_rate: float | None
    conflict_rate_num: int
    conflict_rate_den: int
    conflict_rate_low: float | None
    conflict_rate_high: float | None
    edge_error_rate: float | None
    edge_error_rate_num: int
    edge_error_rate_den: int
    edge_error_rate_low: float | None
    edge_error_rate_high: float | None
    edge_fail_rate: float | None
    edge_fail_rate_num: int
    edge_fail_rate_den: int
    edge_fail_rate_low: float | None
    edge_fail_rate_high: float | None
    offload_fail_rate: float | None
    offload_fail_rate_num: int
    offload_fail_rate_den: int
    offload_fail_rate_low: float | None
    offload_fail_rate_high: float | None
    degrade_rate: float | None
    degrade_rate_num: int
    degrade_rate_den: int
    degrade_rate_low: float | None
    degrade_rate_high: float | None
    edge_share: float | None
    edge_share_num: int
    edge_share_den: int
    edge_share_low: float | None
    edge_share_high: float | None
    self_agreement: float | None
    self_agreement_num: int
    self_agreement_den: int
    self_agreement_low: float | None
    self_agreement_high: float | None
    edge_latency_ms_p50: float | None
    edge_latency_ms_p95: float | None
    edge_latency_ms_p99: float | None
    edge_ttfb_ms_p50: float | None
    edge_ttfb_ms_p95: float | None
    edge_ttfb_ms_p99: float | None
    cloud_latency_ms_p50: float | None
    cloud_latency_ms_p95: float | None
    cloud_latency_ms_p99: float | None
    cloud_ttfb_ms_p50: float | None
    cloud_ttfb_ms_p95: float | None
    cloud_ttfb_ms_p99: float | None
    input_tokens_p50: float | None
    input_tokens_p95: float | None
    edge_cost: float
    cloud_cost: float
    total_cost: float
    baseline_cost: float
    cost_per_1k: float | None
    baseline_cost_per_1k: float | None
    savings: float
    net_savings: float | None
    input_tokens_sum: float
    repeat_diffs: dict[str, int] | None


class WindowsOut(BaseModel):
    windows: list[WindowRow]


class WhatIfRate(BaseModel):
    """A rate as numerator over denominator with its Wilson interval (null when den is 0)."""

    value: float | None
    num: int
    den: int
    low: float | None
    high: float | None


class WhatIfFigures(BaseModel):
    edge_share: WhatIfRate
    agreement: WhatIfRate
    offload_fail_rate: WhatIfRate
    cost: float
    savings: float


class WhatIfBucket(BaseModel):
    bucket: str
    n_results: int
    baseline_cost: float
    candidate: WhatIfFigures
    current: WhatIfFigures


class WhatIfSetting(BaseModel):
    max_input_tokens: int | None
    min_confidence: float | None


class WhatIfToday(WhatIfSetting):
    """What the task's flag does now: `edge_percent` of the eligible requests within the
    cap go to the edge (0 in shadow, rolled back, cloud and under the kill switch)."""

    stage: str | None
    edge_percent: int
    killed: bool


class WhatIfPoint(WhatIfFigures):
    """A point of the cost–quality curve: the candidate with this cap."""

    max_input_tokens: int


class WhatIfOut(BaseModel):
    task: str
    since: datetime
    until: datetime
    candidate: WhatIfSetting
    current: WhatIfToday
    buckets: list[WhatIfBucket]
    curve: list[WhatIfPoint]

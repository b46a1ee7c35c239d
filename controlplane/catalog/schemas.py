"""The task config: parsing, defaults and errors that name field, value and what is allowed.

Only `task` and `comparator` are required; everything else has the default set below
(docs/evidence.md explains the fields). The stored config is the normalised one (defaults
filled in), so an identical config always hashes the same.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, get_args

import orjson
from jsonschema import Draft202012Validator
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict

from controlplane.compare.comparators import FIELD_TYPES, REGISTRY
from controlplane.compare.jsonutil import short_repr
from controlplane.errors import MAX_PROBLEMS, describe_errors, field_path, first_problems, short_key
from controlplane.http import TOO_MANY_DIGITS, too_many_digits

if TYPE_CHECKING:
    import yaml

# Matched with fullmatch: `$` would also match before a trailing newline ("abc\n").
TASK_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,99}")
# Words a route spells where it otherwise takes a task's name: a task so named could never
# be reached by name (GET /v1/flags/stream is the event stream, never that task's flag).
# tests/catalog/test_reserved_names.py checks every route against this list.
RESERVED_TASK_NAMES = {
    "stream": "GET /v1/flags/stream is the flags' event stream, never the flag of a task so named",
    "backfill": "POST /v1/evalsets/backfill fills every task's eval sets; a task of that name "
    "would share the path of its own eval sets",
    # An eval-set export holds one folder per task beside these two files.
    "manifest.json": "the eval-set export writes manifest.json beside the tasks' folders",
    "schema.json": "the eval-set export writes schema.json beside the tasks' folders",
}

# Bounds. A config is typed by a person; a typo must be refused with its bound named, never
# accepted and left to stop planning (`1e12` seconds of lateness overflowed every pass).
DAY = 86_400
INT32_MAX = 2**31 - 1  # token counts: far beyond any model's context, and an INTEGER column
# A list or mapping a person types out; a thousand entries is already unreadable.
MAX_ENTRIES = 1000
# Sample counts: ten million pairs per cell is far past any statistical need and stays well
# inside an integer's range when pooled over windows.
MAX_SAMPLES = 10_000_000
# Open windows are recomputed at every pass, so a task may keep at most this many open at
# once: 7 days of the default 5-minute windows. It bounds a pass's work per task.
MAX_OPEN_WINDOWS = 2016

Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
# Money per 1k tokens or per day, in any currency: a million per 1k tokens is four orders of
# magnitude above the dearest model, and sums over a window stay finite doubles.
MAX_PRICE = 1_000_000.0
Price = Annotated[float, Field(ge=0.0, le=MAX_PRICE, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def stated(**keywords: Any) -> Any:
    """JSON Schema keywords the document states for a field whose rule a validator below
    enforces, so that the refusal keeps its own words (pydantic's would be "String should
    match pattern ...")."""
    return Field(json_schema_extra=keywords)


def whole_numbers(low: int, high: int, digits: int) -> str:
    """A regex of the whole numbers from `low` (at least 1) to `high` written with at most
    `digits` digits, leading zeros included: a span's bounds as a pattern can state them."""
    options = []
    for width in range(len(str(low)), len(str(high)) + 1):
        least, most = max(low, 10 ** (width - 1)), min(high, 10**width - 1)
        zeros = f"0{{0,{digits - width}}}" if digits > width else ""
        options.append(zeros + _digits_between(str(least), str(most)))
    return "(?:" + "|".join(options) + ")"


def _digits_between(low: str, high: str) -> str:
    """A regex of the numbers from `low` to `high`, both written with as many digits."""
    if not low:
        return ""
    if low[0] == high[0]:
        return low[0] + _digits_between(low[1:], high[1:])
    rest = len(low) - 1
    options = []
    first, last = int(low[0]), int(high[0])
    if low[1:] != "0" * rest:
        options.append(low[0] + _digits_between(low[1:], "9" * rest))
        first += 1
    if high[1:] != "9" * rest:
        options.append(high[0] + _digits_between("0" * rest, high[1:]))
        last -= 1
    if first <= last:
        digit = str(first) if first == last else f"[{first}-{last}]"
        options.append(digit + {0: "", 1: "[0-9]"}.get(rest, f"[0-9]{{{rest}}}"))
    return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LabelSpec(Strict):
    kind: Literal["label"]
    labels: (
        Annotated[
            list[Annotated[str, stated(pattern=r"\S")]],
            Field(max_length=MAX_ENTRIES),
            stated(minItems=1),
        ]
        | None
    ) = None

    @field_validator("labels")
    @classmethod
    def _labels_usable(cls, labels: list[str] | None) -> list[str] | None:
        if labels is not None:
            if not labels:
                raise ValueError("must list at least one label, or be left out")
            if any(not " ".join(x.split()) for x in labels):
                raise ValueError("labels must be non-empty strings")
        return labels


class ExactSpec(Strict):
    kind: Literal["exact"]


class JsonFieldsSpec(Strict):
    kind: Literal["json_fields"]
    fields: Annotated[
        dict[str, Literal["string", "number", "integer", "boolean", "array", "object"]],
        Field(max_length=MAX_ENTRIES),
        stated(minProperties=1),
    ]
    required: list[str] = Field([], max_length=MAX_ENTRIES)

    @model_validator(mode="after")
    def _required_are_fields(self) -> JsonFieldsSpec:
        if not self.fields:
            raise ValueError(
                f"fields must name at least one field with a type ({', '.join(FIELD_TYPES)})"
            )
        unknown = [name for name in self.required if name not in self.fields]
        if unknown:
            raise ValueError(
                f"required names {_names(unknown)} that are not in fields "
                f"{_names(sorted(self.fields))}"
            )
        return self


class TextConservationSpec(Strict):
    kind: Literal["text_conservation"]
    # Edge length over cloud length (CJK characters plus Latin words) must fall within.
    length_ratio: tuple[Positive, Positive] = (0.7, 1.4)

    @field_validator("length_ratio")
    @classmethod
    def _ordered(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        if bounds[0] > bounds[1]:
            raise ValueError("must be [low, high] with low <= high, e.g. [0.7, 1.4]")
        return bounds


ComparatorSpec = Annotated[
    LabelSpec | ExactSpec | JsonFieldsSpec | TextConservationSpec, Field(discriminator="kind")
]


# A side's prices per 1k tokens of input and of output.
SidePrices = TypedDict("SidePrices", {"in": NotRequired[Price], "out": NotRequired[Price]})
SidePrices.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]
DEFAULT_PRICES: dict[str, SidePrices] = {
    "edge": {"in": 0.00001, "out": 0.00002},
    "cloud": {"in": 0.003, "out": 0.006},
}


class Prices(Strict):
    edge: SidePrices = DEFAULT_PRICES["edge"]
    cloud: SidePrices = DEFAULT_PRICES["cloud"]

    @model_validator(mode="before")
    @classmethod
    def _side_in_part(cls, raw: Any) -> Any:
        # A side given in part keeps the default of the price it leaves out: costs read
        # both (a side stored without `out` made every window and what-if of the task fail).
        if not isinstance(raw, dict):
            return raw
        given = {side: raw[side] for side in DEFAULT_PRICES if isinstance(raw.get(side), dict)}
        return {**raw, **{side: {**DEFAULT_PRICES[side], **v} for side, v in given.items()}}


class AlertsConfig(Strict):
    baseline_windows: int = Field(12, ge=1, le=1000)
    conflict_jump: Positive = 2.0
    edge_share_jump: Fraction = 0.2
    # The population stability index of the trailing input lengths against the task's
    # baseline at which an `input_shift` alert opens (the rule rolls back at its own
    # threshold, 0.25 by default): 0.1 is a moderate shift.
    input_shift: float = Field(0.1, gt=0, le=10, allow_inf_nan=False)
    silence_windows: int = Field(3, ge=1, le=1000)
    # The sample-ratio check (srm): a canary window whose observed edge share departs from
    # the one its flag versions expect at p below this, with this many requests or more.
    srm_p_value: float = Field(0.001, gt=0.0, lt=1.0, allow_inf_nan=False)
    srm_min_requests: int = Field(200, ge=1, le=MAX_SAMPLES)


RuleMetric = Literal[
    "agreement",
    "conflict_rate",
    "edge_error_rate",
    "edge_fail_rate",
    "offload_fail_rate",
    "degrade_rate",
    "edge_share",
    "route_acc",
    "failure_class",
    "net_savings",
    "input_shift",
]
# Rules judged once per window close over a trailing span of windows, on the task as a
# whole (docs/evidence.md, "Cost and input shift"): not rates, so no detector, pooling or
# bucket scope; each has a span, by default these many seconds.
SPAN_METRICS: dict[str, int] = {"net_savings": DAY, "input_shift": 2 * 3600}
# A span is whole seconds or a duration: `90m`, `24h`, `2d`.
# Digits are ASCII, as the document's pattern below writes them.
SPAN = re.compile(r"^\s*([0-9]{1,7})\s*([smhd]?)\s*$")
SPAN_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": DAY}
# The longest span, and the most windows one may hold (an evaluation reads them all).
MIN_SPAN_SECONDS = 60
MAX_SPAN_SECONDS = 30 * DAY
# A span the document allows: whole seconds in bounds, or text whose number and unit are.
SPAN_SCHEMA: dict[str, JsonValue] = {
    "anyOf": [
        {"type": "integer", "minimum": MIN_SPAN_SECONDS, "maximum": MAX_SPAN_SECONDS},
        {
            "type": "string",
            "pattern": r"^\s*(?:"
            + "|".join(
                whole_numbers(-(-MIN_SPAN_SECONDS // size), MAX_SPAN_SECONDS // size, 7)
                + r"\s*"
                + ("s?" if size == 1 else unit)
                for unit, size in SPAN_UNITS.items()
                if unit != "s"
            )
            + r")\s*$",
        },
        {"type": "null"},
    ]
}
MAX_SPAN_WINDOWS = 2016
# net_savings judges money: its threshold is in the task's currency over the span.
MAX_MONEY = 1e12
# The interval net_savings reads its upper bound from when the rule sets no confidence.
NET_SAVINGS_CONFIDENCE = 0.95


def span_seconds(span: str | int) -> int:
    """A span as seconds: 5400 → 5400, "90m" → 5400, "24h" → 86400."""
    if isinstance(span, int):
        return span
    match = SPAN.match(span)
    if match is None:
        raise ValueError(f"{short_repr(span)} is not a span: whole seconds or 90m, 24h, 2d")
    return int(match.group(1)) * SPAN_UNITS[match.group(2)]


# A failure class a reviewer names on a label ("amount", "wrong_language"): short and plain.
FAILURE_CLASS = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
Detector = Literal["capped_cusum", "consecutive", "cusum"]
DEFAULT_DETECTOR: Detector = "capped_cusum"
# A rule's defaults for what the policy does not set: the CUSUM's shift to detect, its
# decision interval (log-likelihood units), and the most one window may add to the sum
# (`capped_cusum`). A rule that sets `h` at or below the default cap gets `h / 2`, so that
# one window never fires alone.
DEFAULT_MIN_EFFECT = 0.05
DEFAULT_H = 5.0
DEFAULT_CAP = 2.0
# The CUSUM reads rates within RATE_FLOOR of 0 and 1 (`detectors.llr_weights` clamps both
# the threshold and the moved rate there, so that no log-likelihood weight is infinite).
RATE_FLOOR = 1e-6
# The least shift a CUSUM may look for: ten times RATE_FLOOR, so that the moved rate is
# never clamped back onto the threshold (`<= 0` moved by 1e-6 is clamped to 1e-6 both
# ways: both weights 0) and one sample on the bad side adds about min_effect or more of
# evidence. Below it the shift rounds away (1e-17 leaves 0.9 as it is): a blind rule.
MIN_EFFECT_LEAST = 1e-5
# The least decision interval: below the evidence one bad sample adds at the least
# min_effect (about 1e-5), so a smaller `h` would fire no sooner, only nearer underflow
# (5e-324 / 2 is 0: a cap of nothing, a rule that never fires). Its cap is at least
# h / MIN_WINDOWS_READ (1e-8), far above the smallest float.
MIN_H = 1e-6
# A verdict's confidence: a one-sided level (rate rules: the Wilson bound's z is
# NormalDist().inv_cdf(level)) or a two-sided one (net_savings: Student's t at
# 0.5 + level / 2). At least 0.5: below it a one-sided bound lies on the lenient side of
# the estimate (`point` judges the estimate itself). At most MAX_CONFIDENCE: at 1 the
# quantile is infinite (inv_cdf(1.0) raises, so no window is ever judged and a canary is
# never rolled back), 0.9999999999999999 rounds to it in 0.5 + level / 2, and near it
# `spans.t_quantile` loses its tail: the quantile it gives at 0.999999 holds the tail to
# 1e-8 of itself over 1 to 2015 degrees of freedom, at 1 - 1e-9 to 1e-5, at 1 - 1e-12 not
# at all (the tail is read as 1 - P(|T| <= t), whose rounding is then the tail's size).
MIN_CONFIDENCE = 0.5
MAX_CONFIDENCE = 0.999999
CONFIDENCE_RANGE = f"a level from {MIN_CONFIDENCE} to {MAX_CONFIDENCE}"
# The document states the range the validators below enforce in words.
Level = Annotated[
    float,
    Field(allow_inf_nan=False),
    stated(minimum=MIN_CONFIDENCE, maximum=MAX_CONFIDENCE),
]


NET_SAVINGS_LEVEL = (
    "confidence of a net_savings rule is its interval's level: at least "
    f"{MIN_CONFIDENCE} and at most {MAX_CONFIDENCE} (default {NET_SAVINGS_CONFIDENCE}; "
    "nearer 1 Student's t quantile is no longer exact), never `point`"
)


def within_confidence(confidence: float | str | None) -> bool:
    """Whether a confidence as written is `point`, unset, or a level the quantiles read."""
    return not isinstance(confidence, float) or (MIN_CONFIDENCE <= confidence <= MAX_CONFIDENCE)


def _stored(info: ValidationInfo) -> bool:
    """Whether a stored config version is being read (parse_config(stored=True))."""
    return bool(info.context and info.context.get("stored"))


def _clamped_level(confidence: float) -> float:
    """A stored confidence outside this release's range, read as its nearest end: an older
    release took any level from 0 to 1, and 1 (or 0) left every verdict unjudged."""
    return min(max(confidence, MIN_CONFIDENCE), MAX_CONFIDENCE)


# What `min_samples` means depends on how a rule is judged (docs/evidence.md, "Rollouts"): the
# schema says so where the field is declared.
MIN_SAMPLES_MEANS = (
    "The least samples a judgement needs; what that holds back depends on the detector. "
    "`consecutive`: the least samples (the rate's denominator: pairs for agreement) of one "
    "verdict; a window with fewer pools with the next ones of its cell (at most "
    "`max_pool_windows`) and the pool counts once, so sparse windows slow a rollback down. "
    "`capped_cusum` (the default) and `cusum`: it holds no rollback back; every closed "
    "window adds evidence in proportion to its samples (at most `cap` a window under "
    "`capped_cusum`), so a canary whose windows hold fewer samples than this is still rolled "
    "back within a few windows; it only sets which single windows the dashboard marks as "
    "breaching. `net_savings` and `input_shift`: the least results in the span for a verdict "
    "(and, for input_shift, for its alert)."
)


# An evaluation reads at least this many windows (rollout.repository.evaluation_windows):
# a cap so small that firing takes more windows than that could never fire.
MIN_WINDOWS_READ = 100


def resolved_cap(cap: float | None, h: float) -> float:
    """The cap a rule uses: its own, else the default; half of a small `h` (one window never
    fires alone), and a hundredth of a large one (firing never needs more windows than an
    evaluation reads)."""
    if cap is not None:
        return cap
    if h <= DEFAULT_CAP:
        return h / 2
    return max(DEFAULT_CAP, h / MIN_WINDOWS_READ)


def room(op: str, threshold: float) -> float:
    """How far a rate can move past the threshold toward the bad side (within 0–1)."""
    return threshold if op == ">=" else 1.0 - threshold


def resolved_min_effect(min_effect: float | None, op: str, threshold: float) -> float:
    """The shift a CUSUM looks for: the rule's own, else the default, else half the room
    past a threshold near 0 or 1 (a `>= 0.03` rule cannot fall by 0.05)."""
    if min_effect is not None:
        return min_effect
    space = room(op, threshold)
    return DEFAULT_MIN_EFFECT if space <= 0 or DEFAULT_MIN_EFFECT < space else space / 2


class Rule(Strict):
    """A rollback rule as written: a field left out (None) takes the policy's value or the
    default above; `RollbackConfig.resolved_rules()` gives the rules with every value filled."""

    metric: RuleMetric
    op: Literal["<=", ">="]
    # A rate's threshold lies in 0–1; net_savings' is money over the span, input_shift's a
    # population stability index (checked below, per metric).
    threshold: float = Field(allow_inf_nan=False)
    scope: Literal["all", "per_bucket"] = "all"
    mode: Literal["auto_rollback", "notify", "off"] = "auto_rollback"
    # net_savings and input_shift only: the trailing span judged at each window close,
    # seconds or a duration (`90m`, `24h`); by default SPAN_METRICS'.
    span: Annotated[int | str | None, WithJsonSchema(SPAN_SCHEMA)] = None
    detector: Detector | None = None
    min_samples: int | None = Field(
        None,
        ge=1,
        le=MAX_SAMPLES,
        description="This rule's own, in place of the policy's. " + MIN_SAMPLES_MEANS,
    )
    confidence: Level | Literal["point"] | None = None
    critical: Fraction | None = None
    # At least MIN_EFFECT_LEAST (said in words by _cusum_can_see below).
    min_effect: float | None = Field(
        None, lt=1, allow_inf_nan=False, json_schema_extra={"minimum": MIN_EFFECT_LEAST}
    )
    # The CUSUM's decision interval, in log-likelihood units: 5 is the usual choice, and past
    # a few hundred the detector can no longer fire within any sensible time; at least MIN_H
    # (said in words by _cusum_can_see below).
    h: float | None = Field(
        None, le=1000, allow_inf_nan=False, json_schema_extra={"minimum": MIN_H}
    )
    # `capped_cusum`: the most one window's evidence adds to the sum; below `h`, so that
    # firing always takes at least ceil(h / cap) windows.
    cap: float | None = Field(None, gt=0, le=1000, allow_inf_nan=False)
    # `failure_class` rules only: the class whose weighted share of labelled edge answers
    # the rule judges (written `class:` in a config).
    failure_class: str | None = Field(None, alias="class")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("span", mode="before")
    @classmethod
    def _span_shape(cls, span: Any) -> Any:
        # One error naming both spellings, not one per member of the union.
        if span is None:
            return span
        if isinstance(span, float) and span.is_integer():  # 5400.0, as other counts allow
            span = int(span)
        if (
            isinstance(span, bool)
            or not isinstance(span, int | str)
            or (isinstance(span, str) and SPAN.match(span) is None)
        ):
            raise ValueError("not a span: whole seconds, or a duration such as 90m, 24h or 2d")
        if not MIN_SPAN_SECONDS <= span_seconds(span) <= MAX_SPAN_SECONDS:
            raise ValueError(f"must be between 60 seconds and 30 days ({MAX_SPAN_SECONDS} seconds)")
        return span

    @model_validator(mode="after")
    def _span_rules(self) -> Rule:
        if self.metric not in SPAN_METRICS:
            if not 0 <= self.threshold <= 1:
                raise ValueError(
                    f"threshold ({self.threshold:g}) of the {self.metric} rule is a rate: "
                    "between 0 and 1"
                )
            if self.span is not None:
                raise ValueError(
                    f"span: only net_savings and input_shift rules judge a span, not {self.metric}"
                )
            return self
        if self.metric == "input_shift" and not 0 < self.threshold <= 10:
            raise ValueError(
                f"threshold ({self.threshold:g}) of an input_shift rule is a population "
                "stability index: above 0 and at most 10 (0.25 is a large shift)"
            )
        if self.metric == "net_savings" and abs(self.threshold) > MAX_MONEY:
            raise ValueError(
                f"threshold ({self.threshold:g}) of a net_savings rule is money over the span: "
                f"at most {MAX_MONEY:g} either way"
            )
        wrong = {
            "net_savings": (">=", "savings must stay at or above the threshold"),
            "input_shift": ("<=", "the shift must stay at or below the threshold"),
        }[self.metric]
        # "an input_shift rule", "a net_savings rule"
        rule = f"{'an' if self.metric[0] in 'aeiou' else 'a'} {self.metric} rule"
        if self.op != wrong[0]:
            raise ValueError(f"op of {rule} must be {wrong[0]!r}: {wrong[1]}")
        if self.scope != "all":
            raise ValueError(f"scope: {rule} judges the task as a whole, never per bucket")
        ignored = ["detector", "critical", "min_effect", "h", "cap"]
        if self.metric == "input_shift":
            ignored.append("confidence")
        for name in ignored:
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{name}: does not apply to {rule} (judged once per window close "
                    "over its span; docs/evidence.md)"
                )
        if self.confidence == "point":
            raise ValueError(NET_SAVINGS_LEVEL)
        return self

    @field_validator("confidence")
    @classmethod
    def _confidence_a_level(
        cls, confidence: float | str | None, info: ValidationInfo
    ) -> float | str | None:
        # `metric` is declared first: validated before this field (absent if it failed).
        if isinstance(confidence, float) and _stored(info):
            return _clamped_level(confidence)
        if not within_confidence(confidence):
            if info.data.get("metric") == "net_savings":
                raise ValueError(NET_SAVINGS_LEVEL)
            raise ValueError(CONFIDENCE_REFUSED)
        return confidence

    @field_validator("min_effect", "h")
    @classmethod
    def _cusum_can_see(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None:
            return value
        if _stored(info):
            return max(value, MIN_EFFECT_LEAST if info.field_name == "min_effect" else MIN_H)
        if info.field_name == "min_effect" and not value >= MIN_EFFECT_LEAST:
            raise ValueError(
                f"must be at least {MIN_EFFECT_LEAST:g}: the CUSUM reads rates within "
                f"{RATE_FLOOR:g} of 0 and 1, and a smaller shift rounds away or is clamped "
                "back onto the threshold, so no window would ever add evidence"
            )
        if info.field_name == "h" and not value >= MIN_H:
            raise ValueError(
                f"must be at least {MIN_H:g}: one bad sample already adds more evidence "
                "than that, and a smaller h only nears underflow (its default cap, h / 2, "
                "would be 0: the rule could never fire)"
            )
        return value

    @property
    def span_seconds(self) -> int | None:
        if self.metric not in SPAN_METRICS:
            return None
        return span_seconds(self.span) if self.span is not None else SPAN_METRICS[self.metric]

    @model_validator(mode="after")
    def _cap_below_h(self) -> Rule:
        if self.cap is not None:
            h = DEFAULT_H if self.h is None else self.h
            default = ", the default" if self.h is None else ""
            # "Below" by more than rounding: the sum fires within 1e-12 of h.
            if self.cap >= h * (1 - 1e-9):
                raise ValueError(
                    f"cap ({self.cap:g}) must be below h ({h:g}{default}): a window's evidence "
                    "is capped so that no single window can reach h and fire alone"
                )
            # h / cap overflows for a cap near the smallest float: compare without dividing.
            if self.cap * MIN_WINDOWS_READ < h:
                needed = h / self.cap
                at_least = f"{math.ceil(needed):,}" if math.isfinite(needed) else "countless"
                raise ValueError(
                    f"cap ({self.cap:g}) is too small for h ({h:g}{default}): firing would take "
                    f"at least {at_least} windows, and an evaluation reads "
                    f"{MIN_WINDOWS_READ}; use a cap of at least h / {MIN_WINDOWS_READ}"
                )
        return self

    @model_validator(mode="after")
    def _min_effect_within_rates(self) -> Rule:
        if self.min_effect is not None and 0 < room(self.op, self.threshold) <= self.min_effect:
            moved = (
                self.threshold - self.min_effect
                if self.op == ">="
                else (self.threshold + self.min_effect)
            )
            raise ValueError(
                f"min_effect ({self.min_effect:g}) moves the threshold {self.threshold:g} to "
                f"{moved:g}, outside the rates 0–1: it must be below "
                f"{room(self.op, self.threshold):g}"
            )
        return self

    @model_validator(mode="after")
    def _class_only_for_failure_class(self) -> Rule:
        if self.metric == "failure_class":
            if self.failure_class is None:
                raise ValueError("a failure_class rule needs `class` (the failure class it judges)")
            if not FAILURE_CLASS.fullmatch(self.failure_class):
                raise ValueError(
                    "class: must start with a lowercase letter and hold only a-z, 0-9, "
                    "'_', '.', '-' (at most 64 characters)"
                )
        elif self.failure_class is not None:
            raise ValueError(f"class: only a failure_class rule names a class, not {self.metric}")
        return self


DEFAULT_RULES = [
    Rule(metric="route_acc", op=">=", threshold=0.95),
    Rule(metric="offload_fail_rate", op="<=", threshold=0.02),
    Rule(metric="degrade_rate", op="<=", threshold=0.05),
    Rule(metric="agreement", op=">=", threshold=0.90, scope="per_bucket"),
    # The inputs changed shape (docs/evidence.md, "Cost and input shift"). The fourth
    # trigger, net_savings, is added by the team that knows its costs: judged on the
    # placeholder fixed_cost_per_day and with the default shadow_rate 1.0 (every edge
    # answer also paid to the cloud), every canary would cost more than it saves.
    Rule(metric="input_shift", op="<=", threshold=0.25),
]


@dataclass(frozen=True, slots=True)
class ResolvedRule:
    """A rule with every value its detectors read: the rule's own, else the policy's, else
    the default. The stored config keeps the rule as written (so its hash never moves)."""

    metric: RuleMetric
    op: Literal["<=", ">="]
    threshold: float
    scope: Literal["all", "per_bucket"]
    mode: Literal["auto_rollback", "notify", "off"]
    detector: Detector
    min_samples: int
    confidence: float | Literal["point"]
    critical: float | None
    min_effect: float
    h: float
    cap: float = DEFAULT_CAP
    failure_class: str | None = None
    # net_savings and input_shift: the trailing span judged at each window close.
    span_seconds: int | None = None

    def span_windows(self, window_seconds: int) -> int:
        """How many windows the span holds with windows of `window_seconds`: its seconds in
        whole windows, at least one (net_savings two: its interval reads the spread between
        windows) and at most MAX_SPAN_WINDOWS. A span the config writes is refused outside
        those; a default one is fitted to the task's windows."""
        least = 2 if self.metric == "net_savings" else 1
        seconds = self.span_seconds or SPAN_METRICS.get(self.metric, window_seconds)
        return min(MAX_SPAN_WINDOWS, max(least, seconds // window_seconds))


# Why a rate rule's (or the policy's) confidence is refused.
CONFIDENCE_REFUSED = (
    f"must be `point` or {CONFIDENCE_RANGE}: below {MIN_CONFIDENCE} a one-sided bound lies "
    "past the estimate (`point` judges the estimate itself); at 1 the bound is infinite and "
    f"no window could ever be judged, and above {MAX_CONFIDENCE} its quantile is no longer exact"
)


class RollbackConfig(Strict):
    detector: Detector = DEFAULT_DETECTOR
    consecutive_windows: int = Field(3, ge=1, le=100)
    min_samples: int = Field(200, ge=1, le=MAX_SAMPLES, description=MIN_SAMPLES_MEANS)
    confidence: Level | Literal["point"] = 0.80
    max_pool_windows: int = Field(12, ge=1, le=1000)
    # An evaluation reads three times this many windows (rollout.repository.evaluation_windows).
    max_span_windows: int | None = Field(None, ge=1, le=100_000)
    rules: list[Rule] = Field(DEFAULT_RULES, max_length=100)

    @field_validator("confidence")
    @classmethod
    def _confidence_a_level(cls, confidence: float | str, info: ValidationInfo) -> float | str:
        if isinstance(confidence, float) and _stored(info):
            return _clamped_level(confidence)
        if not within_confidence(confidence):
            raise ValueError(CONFIDENCE_REFUSED)
        return confidence

    @model_validator(mode="after")
    def _cusum_has_room(self, info: ValidationInfo) -> RollbackConfig:
        if _stored(info):
            return self  # as an older release stored it: the rule reads as it did then
        # A CUSUM rule without its own min_effect looks for half the room past a threshold
        # near 0 or 1 (resolved_min_effect): with less than twice MIN_EFFECT_LEAST of room
        # that is a shift no rule may write, and within RATE_FLOOR a blind one.
        for index, rule in enumerate(self.rules):
            space = room(rule.op, rule.threshold)
            if (
                rule.metric not in SPAN_METRICS
                and (rule.detector or self.detector) != "consecutive"
                and rule.min_effect is None
                and 0 < space < 2 * MIN_EFFECT_LEAST
            ):
                raise ValueError(
                    f"rules.{index}: threshold ({rule.threshold:g}) leaves the rate {space:g} "
                    f"to move past it, and the CUSUM would look for half that, below the "
                    f"least min_effect ({MIN_EFFECT_LEAST:g}): no window could add evidence; "
                    f"move the threshold at least {2 * MIN_EFFECT_LEAST:g} from "
                    f"{'0' if rule.op == '>=' else '1'}, or use detector: consecutive"
                )
        return self

    @property
    def span_windows(self) -> int:
        """The most windows a run of consecutive breaches may span before it lapses."""
        return self.max_span_windows or self.consecutive_windows * self.max_pool_windows

    def resolved_rules(self) -> list[ResolvedRule]:
        """The rules in order, each with the policy's values where it sets none."""
        return [
            ResolvedRule(
                metric=rule.metric,
                op=rule.op,
                threshold=rule.threshold,
                scope=rule.scope,
                mode=rule.mode,
                detector=rule.detector or self.detector,
                min_samples=rule.min_samples or self.min_samples,
                confidence=(
                    rule.confidence
                    if rule.confidence is not None
                    else NET_SAVINGS_CONFIDENCE
                    if rule.metric == "net_savings"
                    else self.confidence
                ),
                critical=rule.critical,
                min_effect=resolved_min_effect(rule.min_effect, rule.op, rule.threshold),
                h=rule.h or DEFAULT_H,
                cap=resolved_cap(rule.cap, rule.h or DEFAULT_H),
                failure_class=rule.failure_class,
                span_seconds=rule.span_seconds,
            )
            for rule in self.rules
        ]


def input_shift_rule(policy: RollbackConfig) -> ResolvedRule:
    """The input_shift rule the input-shift alert reads its span and min_samples from: the
    policy's (even `off`: the alert watches input lengths wherever the rule is off), else
    the default one."""
    found = next((r for r in policy.resolved_rules() if r.metric == "input_shift"), None)
    if found is not None:
        return found
    default = [r for r in DEFAULT_RULES if r.metric == "input_shift"]
    return RollbackConfig(rules=default).resolved_rules()[0]


class PromotionConfig(Strict):
    agreement_lower_bound: Fraction = 0.95
    min_samples_per_bucket: int = Field(400, ge=1, le=MAX_SAMPLES)
    min_windows: int = Field(12, ge=1, le=10_000)
    canary_steps: list[Annotated[int, Field(gt=0, lt=100)]] = Field([5, 25], max_length=20)
    auto_promote: bool = False
    # `unblock` of an edge model a rollback blocked needs a stored run of that model on the
    # current `regression` eval set at or above this accuracy (unless forced).
    regression_min_accuracy: Fraction = 0.95

    @field_validator("canary_steps")
    @classmethod
    def _increasing(cls, steps: list[int]) -> list[int]:
        if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
            raise ValueError("must be strictly increasing percentages between 1 and 99")
        return steps


REGRESSION_ITEMS = 100
MAX_GUIDELINES = 20_000


class ReviewConfig(Strict):
    quota_per_window: int = Field(20, ge=0, le=100_000)
    reviewers_per_item: int = Field(1, ge=1, le=10)
    route_acc_window_seconds: int = Field(3600, ge=60, le=30 * DAY)
    # Labels come from people, so they may come weeks late; a quarter is the longest wait.
    route_acc_lateness_seconds: int = Field(86400, ge=0, le=90 * DAY)
    # A rollback queues at most this many results of its breaching windows for the
    # `regression` layer (a stratified sample, the breaching cell first); 0 queues none.
    regression_items: int = Field(REGRESSION_ITEMS, ge=0, le=10_000)
    # What a reviewer of this task should know (Markdown), shown above each item.
    guidelines: str | None = Field(None, max_length=MAX_GUIDELINES)


def _ramps_rise(model: BaseModel, *names: str) -> None:
    for name in names:
        low, high = getattr(model, name)
        if not low < high:
            raise ValueError(f"{name}: the first value ({low}) must be below the second ({high})")


GRADING_SPAN = re.compile(r"^\s*([0-9]{1,4})\s*([dh])\s*$")
MAX_GRADING_DAYS = 90
# What GRADING_SPAN reads and GradingConfig._span bounds (1h to 90d), as the document says it.
GRADING_SPAN_PATTERN = (
    rf"^\s*(?:{whole_numbers(1, MAX_GRADING_DAYS, 4)}\s*d"
    rf"|{whole_numbers(1, MAX_GRADING_DAYS * 24, 4)}\s*h)\s*$"
)
MIN_WEIGHT = 0.001
# A weight is 0 or at least MIN_WEIGHT (GradingWeights._zero_or_weighs says so in words).
Weight = Annotated[Fraction, stated(anyOf=[{"const": 0}, {"minimum": MIN_WEIGHT}])]
GRADE_TIERS = ("offload", "shadow", "keep_cloud", "forbid", "insufficient")
FORBIDDEN_KINDS = ("planning", "fresh_knowledge")


class GradingWeights(Strict):
    """How much each dimension weighs in the grade's score (docs/grading.md); the score
    divides by their sum, so only their ratios matter."""

    input_length: Weight = 0.3
    determinism: Weight = 0.3
    error_cost: Weight = 0.25
    frequency: Weight = 0.15

    @field_validator("input_length", "determinism", "error_cost", "frequency")
    @classmethod
    def _zero_or_weighs(cls, weight: float) -> float:
        # A weight of 5e-324 times a score underflows to 0: not the ratio it claims.
        if 0 < weight < MIN_WEIGHT:
            raise ValueError(f"must be 0 (left out) or at least {MIN_WEIGHT}")
        return weight

    @model_validator(mode="after")
    def _some_weight(self) -> GradingWeights:
        if self.input_length + self.determinism + self.error_cost + self.frequency <= 0:
            raise ValueError("at least one weight must be above 0")
        return self


class GradingTiers(Strict):
    """Score bands: at or above `offload` → offload, at or above `shadow` → shadow, else
    keep_cloud."""

    offload: Fraction = 0.75
    shadow: Fraction = 0.5

    @model_validator(mode="after")
    def _ordered(self) -> GradingTiers:
        if self.shadow > self.offload:
            raise ValueError(f"shadow ({self.shadow}) must not be above offload ({self.offload})")
        return self


class InputLengthScale(Strict):
    """Input length → suitability: the lower of two linear ramps, each 1 at its first value
    and 0 at its second. `tail_ratio` ramps on P95 / P50 (a long tail), `p95_tokens` on the
    P95 itself. A ratio at or above `signal_ratio` is the danger signal."""

    tail_ratio: tuple[Positive, Positive] = (2.0, 8.0)
    p95_tokens: tuple[Positive, Positive] = (1024.0, 8192.0)
    signal_ratio: Positive = 3.0

    @model_validator(mode="after")
    def _rising(self) -> InputLengthScale:
        _ramps_rise(self, "tail_ratio", "p95_tokens")
        return self


class DeterminismScale(Strict):
    """Determinism → suitability: linear in the Wilson lower bound of the cloud's
    self-agreement, 0 at `floor`, 1 at `full`; a self-agreement under `signal_below` is the
    danger signal."""

    floor: Fraction = 0.8
    full: Fraction = 0.98
    signal_below: Fraction = 0.95

    @model_validator(mode="after")
    def _rising(self) -> DeterminismScale:
        if not self.floor < self.full:
            raise ValueError(f"floor ({self.floor}) must be below full ({self.full})")
        return self


class FrequencyScale(Strict):
    """Frequency → suitability: the lower of a ramp on calls per day (log scale, 0 at the
    first value, 1 at the second: more calls, more to save) and a ramp on mean input tokens
    per call (1 at the first, 0 at the second: a long context on every call). High
    frequency with a long context is the danger signal."""

    per_day: tuple[Positive, Positive] = (10.0, 10_000.0)
    mean_input_tokens: tuple[Positive, Positive] = (1024.0, 8192.0)
    signal_per_day: Positive = 1000.0
    signal_mean_input_tokens: Positive = 2048.0

    @model_validator(mode="after")
    def _rising(self) -> FrequencyScale:
        _ramps_rise(self, "per_day", "mean_input_tokens")
        return self


class GradingConfig(Strict):
    """Grading a task from its own traffic (docs/grading.md)."""

    # Share of requests on which routers ask the cloud a second time (`cloud_repeat`),
    # published in the flag as `repeat_rate`.
    repeat_rate: Fraction = 0.01
    # The traffic a grade reads: this much before the grade, within the current config
    # version. Whole days or hours: `7d`, `36h`.
    span: Annotated[str, stated(pattern=GRADING_SPAN_PATTERN)] = "7d"
    # A field (json_fields) or check (text_conservation) the cloud changes on more than this
    # share of its repeats is reported as noisy.
    noisy_field_rate: Fraction = 0.05
    # Exact duplicates of an input already answered by the cloud within this many seconds
    # count as free repeats.
    duplicate_seconds: int = Field(DAY, ge=0, le=7 * DAY)
    weights: GradingWeights = GradingWeights()
    tiers: GradingTiers = GradingTiers()
    # Below any of these the grade is `insufficient`, naming what is missing.
    min_results: int = Field(1000, ge=0, le=MAX_SAMPLES)
    min_repeat_pairs: int = Field(100, ge=0, le=MAX_SAMPLES)
    min_days: int = Field(1, ge=0, le=90)
    input_length: InputLengthScale = InputLengthScale()
    determinism: DeterminismScale = DeterminismScale()
    frequency: FrequencyScale = FrequencyScale()

    @field_validator("span")
    @classmethod
    def _span(cls, span: str) -> str:
        match = GRADING_SPAN.match(span)
        if (
            not match
            or not 1
            <= int(match.group(1)) * (24 if match.group(2) == "d" else 1)
            <= MAX_GRADING_DAYS * 24
        ):
            raise ValueError("must be whole days or hours between 1h and 90d, e.g. 7d or 36h")
        return f"{int(match.group(1))}{match.group(2)}"

    @field_validator("min_days")
    @classmethod
    def _days_the_span_holds(cls, days: int, info: ValidationInfo) -> int:
        span = info.data.get("span")
        if span is not None:
            match = GRADING_SPAN.match(span)
            assert match is not None
            hours = int(match.group(1)) * (24 if match.group(2) == "d" else 1)
            # A span of h hours touches at most ceil(h / 24) + 1 UTC days.
            most = math.ceil(hours / 24) + 1
            if days > most:
                raise ValueError(
                    f"{days} days with traffic can never be met within a span of {span} "
                    f"(it touches at most {most} UTC days); at most {most}, or a longer span"
                )
        return days

    @property
    def span_seconds(self) -> int:
        match = GRADING_SPAN.match(self.span)
        assert match is not None
        return int(match.group(1)) * (DAY if match.group(2) == "d" else 3600)


# An action name a task's outputs may trigger ("refund"): short and plain.
ACTION_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
ActionName = Annotated[str, stated(pattern=f"^{ACTION_NAME.pattern}$")]


class TaskConfig(Strict):
    task: str = Field(
        json_schema_extra={
            "pattern": f"^{TASK_NAME.pattern}$",
            "not": {"enum": list[JsonValue](sorted(RESERVED_TASK_NAMES))},
        }
    )
    comparator: ComparatorSpec
    stage: Literal["shadow", "cloud"] = "shadow"
    # Rising is checked below (_buckets_increasing); the document states what one bound can.
    length_buckets: list[Annotated[int, Field(le=INT32_MAX), stated(minimum=1)]] = Field(
        [128, 512, 2048], max_length=32, json_schema_extra={"uniqueItems": True}
    )
    error_cost: Fraction = 0.2
    max_input_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    sticky_by: Literal["session", "user"] = "session"
    shadow_rate: Fraction = 1.0
    low_confidence: Fraction = 0.6
    payload_policy: Literal["full", "redacted", "none"] = "full"
    keep_agreeing_rate: Fraction = 0.05
    window_seconds: int = Field(300, ge=10, le=86400)
    # Results older than the ingest backfill bound (7 days by default) are refused anyway,
    # so waiting longer to close a window gains nothing; see also MAX_OPEN_WINDOWS.
    allowed_lateness_seconds: int = Field(120, ge=0, le=7 * DAY)
    prices: Prices = Prices()
    # A billion a day in any currency: a typo, not a fleet.
    fixed_cost_per_day: float = Field(40.0, ge=0, le=1e9, allow_inf_nan=False)
    # The fixed costs itemised, per day (`{routing: 10, gpu: 25, ops: 5}`): their sum is
    # fixed_cost_per_day, which may then be left out.
    fixed_costs: (
        Annotated[
            dict[str, Price],
            Field(max_length=100),
            stated(propertyNames={"pattern": f"^{ACTION_NAME.pattern}$"}),
        ]
        | None
    ) = None
    alerts: AlertsConfig = AlertsConfig()
    rollback: RollbackConfig = RollbackConfig()
    promotion: PromotionConfig = PromotionConfig()
    review: ReviewConfig = ReviewConfig()
    # Actions the task's outputs may trigger that cannot be undone: never executed from a
    # model's answer without confirmation (client `resolve`), and named by the grade.
    irreversible_actions: list[ActionName] = Field(
        ["refund", "permission_grant", "external_notify"], max_length=100
    )
    # planning (long-chain planning) or fresh_knowledge (recent facts without retrieval):
    # never offloaded, whatever the traffic says.
    forbid: Literal["planning", "fresh_knowledge"] | None = None
    grading: GradingConfig = GradingConfig()

    @model_validator(mode="before")
    @classmethod
    def _fixed_costs_sum(cls, raw: Any) -> Any:
        """Itemised fixed costs set fixed_cost_per_day when it is left out."""
        if isinstance(raw, dict) and isinstance(raw.get("fixed_costs"), dict):
            items = raw["fixed_costs"]
            # Only from costs that are valid themselves: a bad one is named on its own, not
            # also as a fixed_cost_per_day nobody wrote.
            if "fixed_cost_per_day" not in raw:
                amounts = [_amount(v) for v in items.values()]
                if all(a is not None and 0 <= a <= MAX_PRICE for a in amounts):
                    return {**raw, "fixed_cost_per_day": float(sum(a or 0.0 for a in amounts))}
        return raw

    @model_validator(mode="after")
    def _fixed_costs_add_up(self) -> TaskConfig:
        if self.fixed_costs is not None:
            total = sum(self.fixed_costs.values())
            if not math.isclose(total, self.fixed_cost_per_day, rel_tol=1e-9, abs_tol=1e-9):
                raise ValueError(
                    f"fixed_cost_per_day ({self.fixed_cost_per_day:g}) must equal the sum of "
                    f"fixed_costs ({total:g}), or be left out"
                )
            for name in self.fixed_costs:
                if not ACTION_NAME.fullmatch(name):
                    raise ValueError(
                        f"fixed_costs: {short_repr(name)} is not a cost name: a lowercase "
                        "letter, then a-z, 0-9, '_', '.', '-' (at most 64 characters)"
                    )
        return self

    @model_validator(mode="after")
    def _spans_fit_windows(self) -> TaskConfig:
        for index, rule in enumerate(self.rollback.rules):
            # Only a span the config writes: a default one is fitted to the windows when
            # judged (at least one window, at most MAX_SPAN_WINDOWS).
            seconds = rule.span_seconds if rule.span is not None else None
            if seconds is None:
                continue
            if seconds < self.window_seconds:
                raise ValueError(
                    f"rollback.rules.{index}.span: {seconds} s is shorter than one window "
                    f"(window_seconds {self.window_seconds})"
                )
            if rule.metric == "net_savings" and seconds < 2 * self.window_seconds:
                raise ValueError(
                    f"rollback.rules.{index}.span: {seconds} s holds one window of "
                    f"{self.window_seconds} s; a net_savings span needs at least two (its "
                    f"interval reads how the windows' savings spread): at least "
                    f"{2 * self.window_seconds} s"
                )
            if seconds / self.window_seconds > MAX_SPAN_WINDOWS:
                window = self.window_seconds
                raise ValueError(
                    f"rollback.rules.{index}.span: {seconds} s is more than {MAX_SPAN_WINDOWS} "
                    f"windows of {window} s; at most {MAX_SPAN_WINDOWS * window} s with "
                    f"window_seconds {window} (or a longer window_seconds)"
                )
        return self

    @field_validator("irreversible_actions")
    @classmethod
    def _action_names(cls, actions: list[str]) -> list[str]:
        for action in actions:
            if not ACTION_NAME.fullmatch(action):
                raise ValueError(
                    f"{short_repr(action)} is not an action name: a lowercase letter, then "
                    "a-z, 0-9, '_', '.', '-' (at most 64 characters)"
                )
        return actions

    @field_validator("task")
    @classmethod
    def _task_name(cls, name: str) -> str:
        if not TASK_NAME.fullmatch(name):
            raise ValueError(
                "must start with a lowercase letter and hold only a-z, 0-9, '_', '.', '-' "
                "(at most 100 characters)"
            )
        if name in RESERVED_TASK_NAMES:
            raise ValueError(
                f"{name!r} is reserved: {RESERVED_TASK_NAMES[name]}; choose another name"
            )
        return name

    @field_validator("allowed_lateness_seconds")
    @classmethod
    def _open_windows_bounded(cls, lateness: int, info: ValidationInfo) -> int:
        window = info.data.get("window_seconds")
        if window is not None and math.ceil(lateness / window) > MAX_OPEN_WINDOWS:
            raise ValueError(
                f"keeps more than {MAX_OPEN_WINDOWS} windows of {window} s open at once; "
                f"at most {MAX_OPEN_WINDOWS * window} with window_seconds {window}"
            )
        return lateness

    @field_validator("comparator", mode="before")
    @classmethod
    def _known_comparator(cls, spec: Any) -> Any:
        kind = spec.get("kind") if isinstance(spec, dict) else None
        # Not a name at all (a list, a mapping) is no kind either, not a lookup that fails.
        if isinstance(spec, dict) and not (isinstance(kind, str) and kind in REGISTRY):
            named = repr(short_key(kind)) if isinstance(kind, str) else short_repr(kind)
            raise ValueError(
                f"unknown comparator kind {named}; allowed: {', '.join(sorted(REGISTRY))}"
            )
        return spec

    @field_validator("length_buckets")
    @classmethod
    def _buckets_increasing(cls, bounds: list[int]) -> list[int]:
        if any(b < 1 for b in bounds) or any(
            b <= a for a, b in zip(bounds, bounds[1:], strict=False)
        ):
            raise ValueError("must be strictly increasing positive token counts")
        return bounds


def _amount(value: Any) -> float | None:
    """A fixed cost as the field will read it ("25" is 25, as for any price), else None."""
    if isinstance(value, bool):
        return None
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return None
    return amount if math.isfinite(amount) else None


def _names(names: list[str]) -> str:
    """Names as a refusal quotes them: the first MAX_PROBLEMS, each cut (short_key)."""
    shown = [short_key(n) for n in names[:MAX_PROBLEMS]]
    more = len(names) - len(shown)
    return f"{shown}" + (f" and {more} more" if more else "")


class ConfigError(ValueError):
    """A config that cannot be applied; `errors` name each field, its value and what is allowed."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def allowed_fields(loc: tuple[Any, ...], raw: Any) -> list[str]:
    """The field names a config may hold at `loc` (the location of an unknown field)."""
    model: Any = TaskConfig
    value = raw
    for part in loc[:-1]:
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and part < len(value) else None
            continue
        if part in REGISTRY:  # the discriminator's value: already resolved below
            continue
        value = value.get(part) if isinstance(value, dict) else None
        model = _field_model(model, part, value)
        if model is None:
            return []
    return sorted(info.alias or name for name, info in model.model_fields.items())


def _field_model(model: Any, field: str, value: Any) -> Any:
    """The pydantic model a field of `model` holds (inside lists and unions), if any."""
    if field not in getattr(model, "model_fields", {}):
        return None
    if field == "comparator" and model is TaskConfig:
        kind = value.get("kind") if isinstance(value, dict) else None
        return {"label": LabelSpec, "exact": ExactSpec, "json_fields": JsonFieldsSpec}.get(
            str(kind)
        )
    pending = [model.model_fields[field].annotation]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
        pending.extend(get_args(annotation))
    return None


def parse_config(raw: Any, *, stored: bool = False) -> TaskConfig:
    """A config document as a TaskConfig, or a ConfigError naming each problem. `stored`: a
    version already stored, maybe by an older release, is read with the bounds this release
    added on the rollback rules' arithmetic (a confidence from 0.5 to 0.999999, min_effect
    and h at their least) taken as their nearest allowed values instead of refused: a task
    whose config stopped parsing at an upgrade would be skipped everywhere, its results
    rejected and its flag left as it was, with no rule judging its edge."""
    if not isinstance(raw, dict):
        raise ConfigError(
            [
                f"(config): must be a mapping with at least 'task' and 'comparator' (got {short_repr(raw)})"
            ]
        )
    try:
        config = TaskConfig.model_validate(raw, context={"stored": stored})
    except ValidationError as exc:
        every = exc.errors(include_url=False)  # once: a million errors take seconds
        # pydantic puts the comparator's kind in the location; the field path reads better without it.
        errors = describe_errors(exc, skip_loc=REGISTRY, errors=every)
        # Name what is allowed where a field is unknown (often a typo of one of them): for
        # the described errors only, each the sentence of the same place.
        for index, err in enumerate(every[:MAX_PROBLEMS]):
            if err["type"] == "extra_forbidden" and (
                allowed := allowed_fields(tuple(err["loc"]), raw)
            ):
                errors[index] += f"; allowed here: {', '.join(allowed)}"
        raise ConfigError(errors) from None
    converted = _converted(raw)
    if converted:
        raise ConfigError(converted)
    return config


@functools.cache
def _document_schema() -> Draft202012Validator:
    return Draft202012Validator(TaskConfig.model_json_schema())


def _converted(raw: dict[str, Any]) -> list[str]:
    """The values pydantic took by converting them where the config's JSON Schema (the one
    the OpenAPI document gives) wants another JSON type: `false` for a number, "300" for a
    count. Each names the field and the type it needs."""
    found = []
    for error in _document_schema().iter_errors(raw):
        if error.validator not in ("type", "anyOf", "oneOf"):
            continue  # the rest is pydantic's to judge, and it has (an alias, a default)
        types = _json_types(error.schema)
        kind = _type_of(error.instance)
        if error.validator != "type" and kind in ("integer", "number") and "number" in types:
            # A number where a number is taken, past a bound the schema states (a stored
            # confidence of 1.0): pydantic's to judge and word. Only a number: a mapping or
            # a text under a union is still the type check's ("10" for a number is refused).
            continue
        where = ".".join(field_path(error.absolute_path)) or "(config)"
        wanted = " or ".join(_IN_WORDS.get(t, t) for t in types)
        found.append(f"{where}: must be {wanted} (got {short_repr(error.instance)})")
    return first_problems(found)


def _type_of(value: Any) -> str:
    """A read value's JSON type, as JSON Schema names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


_IN_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}


def _json_types(schema: Any) -> list[str]:
    """The JSON types a (sub)schema of the config allows."""
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return _json_types(TaskConfig.model_json_schema()["$defs"].get(name))
    kinds = schema.get("type")
    if isinstance(kinds, str):
        return [kinds]
    if isinstance(kinds, list):
        return kinds
    options: list[Any] = schema.get("anyOf") or schema.get("oneOf") or []
    return [kind for inner in options for kind in _json_types(inner)]


def config_document(config: TaskConfig) -> dict[str, Any]:
    """The normalised config as stored: every default filled in, JSON-ready."""
    return config.model_dump(mode="json", by_alias=True)


def config_hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()


class _TooLong:
    """Stands, while a config is read, for an integer of more digits than Python reads."""

    __slots__ = ()


_TOO_LONG = _TooLong()
_INT_RANGE = range(-(2**63), 2**64)  # what orjson, and so storage, keeps of an integer
# The largest JSON text read a second time, with the standard library, to find an integer
# orjson took for a double and name its field: that read and its walk take 17-63 ms for
# 256 KiB ending in a long integer (lists of `[0]` the most), 0.35 s for 1 MiB and 3.7 s for
# 16 MB, the GIL held for most of it. A text past this bound is judged from its text alone,
# at a line and column (a scan that holds the GIL 0.45 s in 16 MB, and only when the text
# holds nineteen digits in a row). It is the body limit of the routes that take no bulk
# (SHADOWPLANE_MAX_SMALL_BODY_BYTES' default); a config is a few kilobytes.
SECOND_READ_BYTES = 256 * 1024
# Digits as "0", everything else as a space: no JSON text without nineteen digits in a row
# holds an integer beyond 64 bits (-2**63 - 1 has nineteen), and bytes.find looks for them
# at C speed (40 ms in 16 MB, where a regex takes 170).
_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_NINETEEN_ZEROS = b"0" * 19
# In a JSON text orjson has read, a string, or an integer of nineteen digits or more (never
# a decimal's fraction or exponent): strings are passed over whole, so their digits are not
# taken for numbers.
_STRING_OR_LONG_INTEGER = re.compile(
    rb'"(?:[^"\\]++|\\.)*+"|(?<![0-9.eE+-])(-?[0-9]{19,})(?![0-9.eE])'
)
_JSON_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
# What a JSON text past SECOND_READ_BYTES is refused as when orjson finds a number past a
# double and the text at its position cannot tell which.
PAST_A_DOUBLE = "a number too large to read: an integer past 64 bits or a decimal past a double"


def _int_or_too_long(digits: str) -> int | _TooLong:
    try:
        return int(digits)
    except ValueError as exc:
        if too_many_digits(exc):
            return _TOO_LONG
        raise


def _beyond_64_bits(value: int) -> str:
    """Why an integer storage cannot keep is refused: no field takes it as written, and one
    a double holds may be written as a decimal (a number field may take 1e+20)."""
    try:
        decimal = f"{float(value):.6g}"
    except OverflowError:
        return "an integer beyond 64 bits and past a double, more than any field takes"
    return (
        f"an integer beyond 64 bits, which storage does not keep; as a decimal ({decimal}) "
        "a number field may take it"
    )


def _refused_number(document: Any, *, floats: bool = True) -> str | None:
    """The refusal, naming its path, of the first number in a read document that no config
    can hold: an integer of more than 4300 digits (read as _TOO_LONG), one beyond 64 bits,
    and with `floats` NaN or infinity. A YAML document may hold cycles through anchors:
    each container is visited once; `!!pairs` and `!!omap` are lists of tuples."""
    stack: list[tuple[Any, str]] = [(document, "")]
    seen: set[int] = set()
    while stack:
        value, path = stack.pop()
        where = path or "(body)"
        if value is _TOO_LONG:
            return f"{where}: {TOO_MANY_DIGITS['msg']}"
        if isinstance(value, int) and value not in _INT_RANGE:
            return f"{where}: {_beyond_64_bits(value)}"
        if floats and isinstance(value, float) and not math.isfinite(value):
            # JSON has no NaN or infinity: the round trip would make it null, and a null
            # field takes its default, silently.
            return f"{where}: {value} is not a finite number (JSON has no NaN or infinity)"
        if isinstance(value, dict | list | tuple) and id(value) not in seen:
            seen.add(id(value))
            if isinstance(value, dict) and _TOO_LONG in value:
                return f"{where}: a key {TOO_MANY_DIGITS['msg']}"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend(
                (child, f"{path}.{short_key(str(key))}" if path else short_key(str(key)))
                for key, child in items
            )
    return None


# What a YAML config's aliases may expand to, in bytes of JSON (the API's default body
# limit): a few hundred bytes of nested aliases can stand for gigabytes.
MAX_EXPANDED_BYTES = 16 * 2**20


def _expanded_bytes(document: Any, limit: int) -> int:
    """At least how many bytes of JSON a read YAML document stands for once its aliases are
    written out, each distinct container counted once (so in time linear in what was read);
    the count stops once past `limit`. A cycle counts nothing more (the JSON round trip
    refuses it)."""
    if not isinstance(document, dict | list | tuple):
        return _json_bytes(document, {})
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        value, ready = stack.pop()
        if not isinstance(value, dict | list | tuple):
            continue
        if not ready:
            if id(value) in sizes:
                continue
            sizes[id(value)] = 0  # in progress: a cycle back to it adds nothing
            stack.append((value, True))
            stack.extend((child, False) for child in _children(value))
            continue
        size = 2
        if isinstance(value, dict):
            for name, child in value.items():
                size += _json_bytes(name, sizes) + _json_bytes(child, sizes) + 2
        else:
            size += sum(_json_bytes(child, sizes) + 1 for child in value)
        if size > limit:
            return size
        sizes[id(value)] = size
    return sizes[id(document)]


def _children(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> Iterable[Any]:
    return value.values() if isinstance(value, dict) else value


def _json_bytes(value: Any, sizes: dict[int, int]) -> int:
    """At least its JSON's bytes: a container's as counted, a text's characters and quotes."""
    if isinstance(value, dict | list | tuple):
        return sizes.get(id(value), 0)
    return len(value) + 2 if isinstance(value, str) else 1


def _holding_nul(document: Any) -> str | None:
    """The path of the first text (a value or a key) holding NUL in a YAML document."""
    stack: list[tuple[Any, str]] = [(document, "")]
    seen: set[int] = set()
    while stack:
        value, path = stack.pop()
        if isinstance(value, str) and "\x00" in value:
            return path or "(body)"
        if isinstance(value, dict | list | tuple) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                inner = f"{path}.{short_key(str(key))}" if path else short_key(str(key))
                if isinstance(key, str) and "\x00" in key:
                    return inner.replace("\x00", "\\0")
                stack.append((child, inner))
    return None


def _beyond_json(document: Any) -> str | None:
    """The refusal, at its path, of the first thing in a YAML document that JSON has no
    spelling for: a set (`!!set`, or `? item` lines), binary data (`!!binary`), a key that
    is not a string (YAML reads `yes`, `no`, `on`, `off`, `null` and digits as other types).
    Each was refused as "Type is not JSON serializable: set" or "Dict key must be str"."""
    stack: list[tuple[Any, str]] = [(document, "")]
    seen: set[int] = set()
    while stack:
        value, path = stack.pop()
        where = path or "(body)"
        if isinstance(value, set | frozenset):
            return (
                f"{where}: a YAML set (!!set, or `? item` lines), which JSON has not: write a list"
            )
        if isinstance(value, bytes):
            return f"{where}: binary data (!!binary), which JSON has not: write it as text"
        if isinstance(value, dict | list | tuple) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                inner = f"{path}.{short_key(str(key))}" if path else short_key(str(key))
                if isinstance(value, dict) and not isinstance(key, str):
                    return (
                        f"{inner}: a key YAML reads as {type(key).__name__} {key!r}, not as a "
                        "string: quote it"
                    )
                stack.append((child, inner))
    return None


def _reread_json(text: str | bytes) -> tuple[bool, str | None]:
    """A JSON text read again by the standard library, which keeps integers exact: whether
    it could be read (not past SECOND_READ_BYTES, nor too deep), and then the refusal of its
    first integer no config can hold, at its path, or the standard library's own error where
    it cannot read the text either (the true syntax error, when orjson stopped at a number
    before it); None if it holds neither."""
    if len(text) > SECOND_READ_BYTES:
        return False, None
    try:
        document = json.loads(text, parse_int=_int_or_too_long)
    except json.JSONDecodeError as exc:
        return True, f"(body): not valid JSON: {exc}"
    except (ValueError, RecursionError):
        return False, None
    return True, _refused_number(document, floats=False)


def _at(text: str | bytes, offset: int) -> str:
    """`(body): at line L column C` of an offset into `text` (columns in characters)."""
    if isinstance(text, bytes):
        line_start = text.rfind(b"\n", 0, offset) + 1
        column = len(text[line_start:offset].decode(errors="replace"))
        line = text.count(b"\n", 0, offset) + 1
    else:
        line_start = text.rfind("\n", 0, offset) + 1
        column, line = offset - line_start, text.count("\n", 0, offset) + 1
    return f"(body): at line {line} column {column + 1}"


def _integer_refused(where: str, digits: str | bytes) -> str | None:
    """The refusal of an integer, written as `digits`, that no config can hold."""
    value = _int_or_too_long(digits.decode() if isinstance(digits, bytes) else digits)
    if value is _TOO_LONG:
        return f"{where}, {TOO_MANY_DIGITS['msg']}"
    if isinstance(value, int) and value not in _INT_RANGE:
        return f"{where}, {_beyond_64_bits(value)}"
    return None


def _long_integer_token(data: bytes) -> str | None:
    """The refusal of the first integer beyond 64 bits in a JSON text orjson read (as a
    double), at its line and column: found in the text, without a second read."""
    for match in _STRING_OR_LONG_INTEGER.finditer(data):
        digits = match.group(1)
        refused = None if digits is None else _integer_refused(_at(data, match.start()), digits)
        if refused is not None:
            return refused
    return None


def _infinite_number(text: str | bytes, exc: orjson.JSONDecodeError) -> str | None:
    """The refusal of a JSON text orjson read a number of as infinite: an integer of 310
    digits or more, or a decimal past a double (None: orjson's words hold)."""
    read, refused = _reread_json(text)
    if read:
        return refused
    # Too large to read twice: the number at the position orjson gives (in characters).
    string = text.decode(errors="replace") if isinstance(text, bytes) else text
    number = _JSON_NUMBER.match(string, exc.pos)
    if number is None:
        return f"(body): {PAST_A_DOUBLE}"
    if number.group(1) or number.group(2):
        return None  # a decimal past a double is infinite: orjson says so
    return _integer_refused(_at(string, exc.pos), number.group()) or f"(body): {PAST_A_DOUBLE}"


def _json_document(text: str | bytes) -> Any:
    """A JSON config read by orjson, which takes an integer beyond 64 bits for a double (and
    from 310 digits calls it infinity): such an integer is refused, as YAML refuses it."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        refused = _infinite_number(text, exc) if "number is infinity" in str(exc) else None
        raise ConfigError([refused or f"(body): not valid JSON: {exc}"]) from None
    data = text.encode() if isinstance(text, str) else text
    if data.translate(_DIGITS_AS_ZERO).find(_NINETEEN_ZEROS) >= 0:
        read, refused = _reread_json(data)
        if not read:
            refused = _long_integer_token(data)
        if refused is not None:
            raise ConfigError([refused])
    return document


@functools.cache
def _config_loader() -> type[yaml.SafeLoader]:
    """YAML's safe loader, reading an integer of more than 4300 digits as _TOO_LONG (where
    the safe one fails without naming where it stands)."""
    import yaml

    class ConfigLoader(yaml.SafeLoader):
        pass

    def construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | _TooLong:
        try:
            return loader.construct_yaml_int(node)
        except ValueError as exc:
            if too_many_digits(exc):
                return _TOO_LONG
            raise

    ConfigLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    # A number with an exponent and no dot or no exponent sign (1e+30, 2E5, 1.0e5) is a
    # string to YAML 1.1, which PyYAML reads, and a number to JSON and YAML 1.2: read as
    # JSON reads it, so that one text gets one answer (and the decimal a refusal of a long
    # integer advises is taken).
    ConfigLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float", _EXPONENT_NUMBER, list("-+0123456789")
    )
    return ConfigLoader


# JSON's number with an exponent (RFC 8259), YAML 1.2's float of that form.
_EXPONENT_NUMBER = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?[eE][-+]?[0-9]+$")


def read_documents(text: str | bytes, *, yaml_text: bool) -> list[Any]:
    """The config documents of a YAML (several, `---` apart) or JSON text, as plain JSON data.

    Whatever the text holds, the answer is documents or a ConfigError naming the reason: YAML
    can spell things JSON cannot (an anchor that contains itself, invalid Unicode, integers
    of thousands of digits), and those must be refused, not crash the caller. One text gets
    one answer read either way (`shadowplane tasks apply -f` reads JSON as YAML).

    It takes seconds for a large text (1 MB of YAML: 11 s): a server calls it in a worker
    thread, never on the event loop."""
    import yaml

    kind = "YAML" if yaml_text else "JSON"
    if not yaml_text:
        documents = [_json_document(text)]
    else:
        try:
            documents = list(yaml.load_all(text, Loader=_config_loader()))
        except (yaml.YAMLError, ValueError, RecursionError) as exc:
            raise ConfigError([f"(body): not valid {kind}: {exc}"]) from None
        expanded = 0  # the whole body's, every document of it
        for document in documents:
            expanded += _expanded_bytes(document, MAX_EXPANDED_BYTES - expanded)
            if expanded > MAX_EXPANDED_BYTES:
                raise ConfigError(
                    [
                        f"(body): YAML whose aliases (*name) expand it past "
                        f"{MAX_EXPANDED_BYTES:,} bytes of JSON (at least {expanded:,} bytes "
                        f"from {len(text):,} of YAML): write the repeated parts out, or "
                        "repeat less"
                    ]
                )
        for document in documents:
            refused = _refused_number(document) or _beyond_json(document)
            if refused is not None:
                raise ConfigError([refused])
            where = _holding_nul(document)
            if where is not None:
                # The body guard refuses NUL in JSON; YAML spells it `\0`. Storage cannot keep it.
                raise ConfigError([f"{where}: holds the NUL character, which storage cannot keep"])
    try:
        # A round trip through JSON: what survives it is plain data (no cycles, no surrogates).
        return [orjson.loads(orjson.dumps(d)) for d in documents if d is not None]
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigError(
            [
                f"(body): {kind} that is not plain JSON data (a self-referencing anchor, "
                f"invalid Unicode or an integer beyond 64 bits): {exc}"
            ]
        ) from None


# --- what the tasks API answers ------------------------------------------------------


class TaskOut(BaseModel):
    """A task: its stage and its current config version (the document as applied)."""

    task: str
    # cloud | shadow | canary | full | rolled_back
    stage: str
    version: int
    created_at: datetime
    updated_at: datetime
    config: dict[str, Any] | None


class TasksOut(BaseModel):
    tasks: list[TaskOut]

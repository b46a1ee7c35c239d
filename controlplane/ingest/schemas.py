"""What a routing service posts (docs/http-api.md, "Posting results") and what it gets back."""

from __future__ import annotations

import math
import re
import sys
from datetime import datetime
from typing import Annotated, Any, Literal, NotRequired, get_args

import msgspec
from msgspec import Meta
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from controlplane.timeutil import DATE_TIME_OFFSET_OPTIONAL, TS_PATTERN, out_of_range

Side = Literal["edge", "cloud"]
# The sides a result may name under `skipped`: a side the router did not run, and why.
Skippable = Literal["edge", "cloud", "cloud_repeat"]
SKIPPABLE: tuple[str, ...] = get_args(Skippable)
# Room for the Python client's longest reason (an exception's message: 514 characters).
SKIP_REASON_CHARS = 1000


# A value of the JSON type the contract gives, or refused: pydantic's lax mode would read
# `true` or "300" as a count, "1.5" as a measure and "false" as a boolean, and store them.
# A number stays lax (300.0 is the integer 300 to JSON Schema, and a huge one is "not
# finite"), so these only turn strings and booleans away. Only pydantic's paths run them:
# msgspec's types refuse the same values by themselves.
def _integer(value: Any) -> Any:
    if type(value) is bool or type(value) is str:
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def _number(value: Any) -> Any:
    if type(value) is bool or type(value) is str:
        raise PydanticCustomError("float_type", "Input should be a valid number")
    return value


def _few_sides(value: Any) -> Any:
    # More keys than there are sides: refused at once, before each key is read and refused
    # on its own (20,000 keys made a reason of 4.6 MB).
    if type(value) is dict and len(value) > len(SKIPPABLE):
        raise PydanticCustomError(
            "too_long",
            "at most {most} sides ({sides}), not {n}",
            {"most": len(SKIPPABLE), "sides": ", ".join(SKIPPABLE), "n": len(value)},
        )
    return value


def _date_time(value: Any) -> Any:
    """A `ts` as the contract spells one: a string, an ISO 8601 date-time (its offset may be
    left out: UTC). pydantic alone also reads a number or a digit string as seconds since
    1970 and a bare date as its midnight."""
    if value is None:
        return value
    if type(value) is str and _TS_TEXT.fullmatch(value):
        # Spelled as one, but a field out of range: its reason, not the parser's ("unexpected
        # extra characters at the end of the input", where there are none).
        problem = out_of_range(value, leap_second=False, year_zero=False)
        if problem is not None:
            raise PydanticCustomError(
                "datetime_type", "not a date-time: {problem}", {"problem": problem}
            )
        return value
    raise PydanticCustomError(
        "datetime_type",
        "not a date-time; give one as 2026-11-30T00:00:00Z (RFC 3339; without an offset it is UTC)",
    )


_TS_TEXT = re.compile(DATE_TIME_OFFSET_OPTIONAL)
# Counts are stored as 32-bit integers.
Count = Annotated[int, Field(ge=0, le=2**31 - 1), BeforeValidator(_integer)]
# Times, costs and confidences are finite: JSON has no Infinity, yet Python's parser reads
# `Infinity`, `NaN` and an overflowing `1e999` as floats.
Measure = Annotated[
    float | None, Field(default=None, ge=0, allow_inf_nan=False), BeforeValidator(_number)
]
# The most one request may cost, in the task's currency (a trillion: room for any unit a
# router reports in, micro-units included). Finite is not enough: windows sum costs as
# doubles, and two costs of 1.7e308 made a window's sums infinite, its costs null and its
# cost rules blind.
MAX_COST = 1e12
Cost = Annotated[
    float | None,
    Field(default=None, ge=0, le=MAX_COST, allow_inf_nan=False),
    BeforeValidator(_number),
]
Flag = Annotated[bool, Field(strict=True)]
# The longest session or user id stored (characters): the sticky keys a bucket is computed
# from. OFREP holds an evaluation context's keys to the same length.
MAX_ID_LENGTH = 200

# Results are validated into TypedDicts rather than models: at tens of thousands of
# results a second, building a model instance per side costs a third of the API's CPU.
# Every optional field has its default filled in, so readers index, never `.get()`.
# Unknown fields are ignored, not refused: a router built against a newer contract must
# not have its results thrown away by an older control plane.


class SideIn(TypedDict):
    output: NotRequired[Annotated[Any, Field(default=None)]]
    error: NotRequired[Annotated[str | None, Field(default=None, min_length=1, max_length=64)]]
    error_message: NotRequired[Annotated[str | None, Field(default=None)]]
    latency_ms: NotRequired[Measure]
    ttfb_ms: NotRequired[Measure]
    model: NotRequired[Annotated[str | None, Field(default=None, max_length=200)]]
    input_tokens: NotRequired[Annotated[Count | None, Field(default=None)]]
    output_tokens: NotRequired[Annotated[Count | None, Field(default=None)]]
    cost: NotRequired[Cost]


class EdgeSideIn(SideIn):
    confidence: NotRequired[
        Annotated[
            float | None,
            Field(default=None, ge=0, le=1, allow_inf_nan=False),
            BeforeValidator(_number),
        ]
    ]
    valid: NotRequired[Annotated[Flag | None, Field(default=None)]]


@with_config(ConfigDict(extra="allow"))  # the input is payload: keep all of it
class InputIn(TypedDict):
    text: NotRequired[Annotated[Any, Field(default=None)]]
    # The first bad entry refuses the list (fail_fast): a million bad entries cost one
    # message, not a million (and the API's CPU for seconds).
    segments: NotRequired[
        Annotated[
            Annotated[list[Annotated[int, BeforeValidator(_integer)]], Field(fail_fast=True)]
            | None,
            Field(default=None),
        ]
    ]


class ResultIn(TypedDict):
    request_id: Annotated[str, Field(min_length=1, max_length=200)]
    task: Annotated[str, Field(min_length=1, max_length=100)]
    ts: NotRequired[
        Annotated[
            datetime | None,
            Field(default=None),
            BeforeValidator(_date_time),
            # Not `format: date-time`, which wants the seconds and the offset ingest never did.
            WithJsonSchema(
                {
                    "anyOf": [
                        {
                            "type": "string",
                            "pattern": TS_PATTERN,
                            "description": "An RFC 3339 date-time; its seconds and offset may "
                            "be left out (no offset: UTC), a space may stand for T. A leap "
                            "second, year 0000 and February 29 of a common year are refused.",
                        },
                        {"type": "null"},
                    ]
                }
            ),
        ]
    ]
    session_id: NotRequired[Annotated[str | None, Field(default=None, max_length=MAX_ID_LENGTH)]]
    user_id: NotRequired[Annotated[str | None, Field(default=None, max_length=MAX_ID_LENGTH)]]
    input_tokens: Count
    decision: Side
    served: Side
    degraded: NotRequired[Annotated[Flag, Field(default=False)]]
    degrade_reason: NotRequired[Annotated[str | None, Field(default=None, max_length=200)]]
    flag_version: NotRequired[Annotated[Count | None, Field(default=None)]]
    input: NotRequired[Annotated[InputIn | None, Field(default=None)]]
    edge: NotRequired[Annotated[EdgeSideIn | None, Field(default=None)]]
    cloud: NotRequired[Annotated[SideIn | None, Field(default=None)]]
    # A second cloud answer to the same input, asked on a sampled share of requests
    # (`grading.repeat_rate`): scored against `cloud`, the cloud's own noise floor.
    cloud_repeat: NotRequired[Annotated[SideIn | None, Field(default=None)]]
    # The sides the router did not run (its threads were all busy, its event loop shut
    # down), each with why: a missing side is then known to be skipped, not lost.
    skipped: NotRequired[
        Annotated[
            dict[Skippable, Annotated[str, Field(max_length=SKIP_REASON_CHARS)]] | None,
            Field(default=None),
            BeforeValidator(_few_sides),
        ]
    ]


class ResultBatch(TypedDict):
    """Up to 1000 results in one request (SHADOWPLANE_MAX_BATCH_ITEMS), each judged alone:
    stored, or answered in `rejected` with its index and reasons."""

    results: list[ResultIn]


# The same contract for msgspec, which decodes a batch of valid results in less than half
# pydantic's time (controlplane/ingest/validation.py, `decode_batch`). Stricter on purpose:
# no value of another JSON type (pydantic refuses those too) nor 1.0 for a count (which
# pydantic takes), no
# unknown field (so it reads every string of the body: its parser, like pydantic's, refuses
# lone surrogates and bad UTF-8), no number it cannot read exactly (`1e999`, 4,300 digits);
# whatever it refuses, pydantic decides as before. Fields in the TypedDicts' order, so that
# a decoded result, turned into a dict, has its keys in the order pydantic gives them.
# tests/ingest/test_decode_equivalence.py holds the two to the same answers.
_WireCount = Annotated[int, Meta(ge=0, le=2**31 - 1)]
# Finite: at most the largest float (JSON has no infinity; `1e999` overflows to one).
_WireMeasure = Annotated[float, Meta(ge=0, le=sys.float_info.max)]
_WireCost = Annotated[float, Meta(ge=0, le=MAX_COST)]
_WireId = Annotated[str, Meta(max_length=MAX_ID_LENGTH)]


class SideWire(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, gc=False):
    output: Any = None
    error: Annotated[str, Meta(min_length=1, max_length=64)] | None = None
    error_message: str | None = None
    latency_ms: _WireMeasure | None = None
    ttfb_ms: _WireMeasure | None = None
    model: Annotated[str, Meta(max_length=200)] | None = None
    input_tokens: _WireCount | None = None
    output_tokens: _WireCount | None = None
    cost: _WireCost | None = None


class EdgeSideWire(SideWire, forbid_unknown_fields=True, kw_only=True, gc=False):
    confidence: Annotated[float, Meta(ge=0, le=1)] | None = None
    valid: bool | None = None


class ResultWire(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, gc=False):
    request_id: Annotated[str, Meta(min_length=1, max_length=200)]
    task: Annotated[str, Meta(min_length=1, max_length=100)]
    # Read by pydantic's own datetime parser, to the same datetime.
    ts: Annotated[str, Meta(pattern=f"^{DATE_TIME_OFFSET_OPTIONAL}\\Z")] | None = None
    session_id: _WireId | None = None
    user_id: _WireId | None = None
    input_tokens: _WireCount
    decision: Side
    served: Side
    degraded: bool = False
    degrade_reason: Annotated[str, Meta(max_length=200)] | None = None
    flag_version: _WireCount | None = None
    input: dict[str, Any] | None = None  # InputIn keeps unknown fields: checked after
    edge: EdgeSideWire | None = None
    cloud: SideWire | None = None
    cloud_repeat: SideWire | None = None
    skipped: dict[Skippable, Annotated[str, Meta(max_length=SKIP_REASON_CHARS)]] | None = None


class BatchWire(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    results: list[ResultWire]


def consistency_problem(item: ResultIn) -> str | None:
    """What makes a well-typed result impossible, or None."""
    edge, cloud = item["edge"], item["cloud"]
    if edge is None and cloud is None:
        return "at least one of 'edge' or 'cloud' is required"
    if item["served"] == "edge" and edge is None:
        return "served is 'edge' but there is no 'edge' side"
    if item["served"] == "cloud" and cloud is None:
        return "served is 'cloud' but there is no 'cloud' side"
    if item["degraded"] and item["served"] != "cloud":
        return "degraded is true, so served must be 'cloud' (the request escalated)"
    if item["degraded"] and edge is None:
        return "degraded is true but there is no 'edge' side (the edge was tried)"
    for side in item["skipped"] or ():
        if item[side] is not None:
            return f"skipped names '{side}', which the result carries (a side ran or it did not)"
    return None


def repeat_problem(item: ResultIn) -> str | None:
    """What makes a result's `cloud_repeat` impossible, or None."""
    if item["cloud_repeat"] is not None and item["cloud"] is None:
        return "requires a 'cloud' side (the answer it repeats)"
    return None


# Columns of text that PostgreSQL cannot store with a NUL character in them: an item holding
# one there is rejected. (Outputs and inputs are JSON: a NUL in them is stored as U+FFFD,
# and the answer lists the item in `altered`.)
TEXT_FIELDS = ("request_id", "task", "session_id", "user_id", "degrade_reason")
SIDE_TEXT_FIELDS = ("error", "error_message", "model")
# The sides a result may carry, each shaped like SideIn.
SIDES_POSTED = ("edge", "cloud", "cloud_repeat")


def nul_fields(item: ResultIn) -> list[str]:
    """The text fields of a result holding a NUL character."""
    fields: dict[str, Any] = dict(item)  # read by name: a plain mapping
    found = [name for name in TEXT_FIELDS if "\x00" in (fields[name] or "")]
    for side_name in SIDES_POSTED:
        side: dict[str, Any] | None = fields[side_name]
        if side is not None:
            found += [f"{side_name}.{n}" for n in SIDE_TEXT_FIELDS if "\x00" in (side[n] or "")]
    found += [f"skipped.{name}" for name, why in (fields["skipped"] or {}).items() if "\x00" in why]
    return found


# A lone surrogate (U+D800 to U+DFFF) is not a character: Python's json reads one from a
# `\ud800` escape, but neither UTF-8 nor any database can hold it.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
RESULT_KEYS = tuple(ResultIn.__annotations__)
SIDE_KEYS = tuple(EdgeSideIn.__annotations__)


def holds_surrogate(value: Any) -> bool:
    """Whether any string or object key inside a parsed JSON value holds a lone surrogate."""
    stack = [value]  # a loop, not recursion: the value may be nested as deep as json reads
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return True
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def surrogate_fields(raw: Any) -> list[str]:
    """The fields of a posted (not yet validated) result that hold a lone surrogate. Checked
    before validation, whose error messages quote the values they refuse."""
    if not isinstance(raw, dict):
        return []  # refused whole by validation, which quotes nothing at the root
    found = []
    for name in RESULT_KEYS:
        value = raw.get(name)
        if name in SIDES_POSTED and isinstance(value, dict):
            found += [f"{name}.{f}" for f in SIDE_KEYS if holds_surrogate(value.get(f))]
        elif name == "input" and isinstance(value, dict) and holds_surrogate(value.get("text")):
            found.append("input.text")
        elif holds_surrogate(value):
            found.append(name)
    return found


def holds_non_finite(value: Any) -> bool:
    """Whether a JSON value holds NaN or an infinity (which JSON cannot spell: stored, they
    would silently become null)."""
    if type(value) is str:  # labels and texts: the common case, answered at once
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class Rejected(BaseModel):
    index: int
    request_id: str | None
    error: str


class Altered(BaseModel):
    """An accepted item stored otherwise than posted, and which of its fields."""

    index: int
    request_id: str
    fields: list[str]
    note: str


class IngestReport(BaseModel):
    accepted: int = 0
    duplicates: int = 0
    rejected: list[Rejected] = []
    altered: list[Altered] = []


# --- what `GET /v1/results/{task}/{request_id}` answers -------------------------------


class ResultSideOut(BaseModel):
    """One side (cloud) of a stored result; `output` and `error_message` are what its payload
    policy kept (null when nothing was kept)."""

    error: str | None
    latency_ms: float | None
    ttfb_ms: float | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    output: Any
    error_message: str | None


class ResultEdgeOut(ResultSideOut):
    confidence: float | None
    valid: bool | None


class RepeatOut(BaseModel):
    """The result's repeat pair: its cloud answer scored against a second cloud answer."""

    # agree | conflict | invalid, or null when the repeat was not scored (it errored)
    outcome: str | None
    # asked (sent as `cloud_repeat`) | duplicate (an earlier result with the same input)
    source: str
    # the fields (json_fields) or checks (text_conservation) the two answers differ on
    diff: list[str] | None


class ComparisonOut(BaseModel):
    # agree | conflict | invalid, or null when only one side ran
    outcome: str | None
    diff: Any
    comparator: str
    comparator_version: int


class PayloadOut(BaseModel):
    policy: str
    keep_probability: float
    input: Any
    edge_output: Any
    cloud_output: Any
    diff: Any
    edge_error_message: str | None
    cloud_error_message: str | None


class ResultOut(BaseModel):
    """A stored result in the shape it was posted, with its bucket, comparison and payload."""

    request_id: str
    task: str
    ts: datetime
    received_at: datetime
    session_id: str | None
    user_id: str | None
    sticky_bucket: int | None
    input_tokens: int
    decision: str
    served: str
    degraded: bool
    degrade_reason: str | None
    flag_version: int | None
    input_segments: list[int] | None
    # The sides the router did not run, and why (the reasons masked as degrade_reason is;
    # none under `payload_policy: none`); None when it named none.
    skipped: dict[str, str | None] | None
    bucket: str
    config_version: int
    edge: ResultEdgeOut | None
    cloud: ResultSideOut | None
    comparison: ComparisonOut
    repeat: RepeatOut | None
    payload: PayloadOut | None

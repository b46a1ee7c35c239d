"""Scoring one validated result: its comparison, the row stored for it, and the payload its
task's policy keeps (or not). Under `payload_policy: redacted` and `none`, session and user
ids are stored as a keyed hash; every policy stores the result's sticky bucket, computed
here from the raw key. Pure: no session, the receipt time is passed in.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from operator import itemgetter
from typing import Any

from controlplane.catalog.service import TaskRuntime
from controlplane.compare.comparators import Comparison, compare
from controlplane.compare.fingerprint import fingerprint, input_hash, keyed_hex, repeat_outcome
from controlplane.compare.redaction import MAX_CHARS, Masker, fit_masked, redact_payload
from controlplane.ingest.buckets import length_bucket, sticky_bucket
from controlplane.ingest.repository import EDGE_FIELDS, SIDE_FIELDS
from controlplane.ingest.schemas import ResultIn, holds_non_finite


def is_pair(item: ResultIn) -> bool:
    """Both sides returned an output, neither errored, and the edge output is not `valid: false`."""
    edge, cloud = item["edge"], item["cloud"]
    return (
        edge is not None
        and cloud is not None
        and edge["error"] is None
        and cloud["error"] is None
        and edge["output"] is not None
        and cloud["output"] is not None
        and edge["valid"] is not False
    )


def keep_draw(task: str, request_id: str) -> float:
    """A uniform number in [0, 1) fixed by the result's identity, so a resend decides alike."""
    return zlib.crc32(f"{task}\x00{request_id}".encode()) / 2**32


def keep_probability(item: ResultIn, comparison: Comparison | None, task: TaskRuntime) -> float:
    """1 for conflicts, errors, invalid, degraded and low-confidence results; else the agreeing rate."""
    edge, cloud = item["edge"], item["cloud"]
    confidence = edge["confidence"] if edge is not None else None
    notable = (
        (comparison is not None and comparison.outcome != "agree")
        or (edge is not None and (edge["error"] is not None or edge["valid"] is False))
        or (cloud is not None and cloud["error"] is not None)
        or item["degraded"]
        or (confidence is not None and confidence < task.config.low_confidence)
    )
    return 1.0 if notable else task.config.keep_agreeing_rate


EDGE_KEYS = tuple(f"edge_{f}" for f in EDGE_FIELDS)
CLOUD_KEYS = tuple(f"cloud_{f}" for f in SIDE_FIELDS)
NO_EDGE = (None,) * len(EDGE_FIELDS)
NO_CLOUD = (None,) * len(SIDE_FIELDS)
_edge_values = itemgetter(*EDGE_FIELDS)
_cloud_values = itemgetter(*SIDE_FIELDS)


# The latest a result's `ts` may lie after the time it was received (clock skew).
MAX_AHEAD = timedelta(minutes=5)
DEFAULT_MAX_BACKFILL = timedelta(days=7)
# degrade_reason is a VARCHAR(200); masking may lengthen it.
DEGRADE_REASON_CHARS = 200


class ItemError(ValueError):
    """One item cannot be read, scored or stored: it is rejected alone, naming the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


def problem_of(exc: BaseException) -> str:
    """What an exception raised while handling one value says about that value."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeError):
        return "holds a lone surrogate (invalid Unicode)"
    if isinstance(exc, OverflowError):
        return "out of range"
    return f"cannot be processed ({type(exc).__name__})"


@dataclass(frozen=True, slots=True)
class IngestContext:
    """What ingest takes from the server, besides the items: the key that hashes session and
    user ids (policies `redacted` and `none`), how far back a result's `ts` may lie, and
    the longest text that is compared and masked."""

    id_hash_key: bytes | None = None
    max_backfill: timedelta = DEFAULT_MAX_BACKFILL
    max_chars: int = MAX_CHARS


DEFAULT_CONTEXT = IngestContext()


def event_time(ts: datetime | None, received_at: datetime, max_backfill: timedelta) -> datetime:
    """The result's time in UTC (receipt time when absent, naive read as UTC), within
    [received_at - max_backfill, received_at + 5 minutes]; ItemError naming the bound."""
    if ts is None:
        return received_at
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)  # a naive time is read as UTC
    try:
        ts = ts.astimezone(UTC)
    except OverflowError:
        raise ItemError("ts", "out of range (no such time in UTC)") from None
    if ts > received_at + MAX_AHEAD:
        raise ItemError(
            "ts",
            f"{ts.isoformat()} is after the bound {(received_at + MAX_AHEAD).isoformat()} "
            "(at most 5 minutes after the time it was received)",
        )
    try:
        earliest = received_at - max_backfill
    except OverflowError:
        return ts  # a bound before year 1: nothing is too old
    if ts < earliest:
        raise ItemError(
            "ts",
            f"{ts.isoformat()} is before the bound {earliest.isoformat()} (at most "
            f"SHADOWPLANE_MAX_BACKFILL = {max_backfill} before the time it was received)",
        )
    return ts


# Sessions and users come back request after request: their buckets and hashes are cached.
bucket_of = lru_cache(maxsize=16384)(sticky_bucket)


@lru_cache(maxsize=16384)
def _id_hash(key: bytes, value: str) -> str:
    return "h:" + keyed_hex(key, value.encode())[:32]


def hashed_id(key: bytes | None, value: str | None) -> str | None:
    """A session or user id as stored under `redacted` and `none`: "h:" and the first 32 hex
    digits of HMAC-SHA256(server secret, id). Groups alike, reveals nothing of the id."""
    if value is None:
        return None
    if key is None:
        raise RuntimeError("no id hash key: the caller must pass IngestContext(id_hash_key=...)")
    return _id_hash(key, value)


@dataclass(slots=True)
class Scored:
    row: dict[str, Any]
    payload: dict[str, Any] | None
    # The posted fields whose NUL characters are stored as U+FFFD (set by stored_form).
    replaced_nul: list[str] = field(default_factory=list)


_NOT_FINITE = "holds a number that is not finite (or has more than 4300 digits)"


def _refuse_non_finite(item: ResultIn) -> None:
    # Outputs and texts are mostly strings: those are settled without a call.
    edge, cloud, input_ = item["edge"], item["cloud"], item["input"]
    if edge is not None and type(out := edge["output"]) is not str and holds_non_finite(out):
        raise ItemError("edge.output", _NOT_FINITE)
    if cloud is not None and type(out := cloud["output"]) is not str and holds_non_finite(out):
        raise ItemError("cloud.output", _NOT_FINITE)
    repeat = item["cloud_repeat"]
    if repeat is not None and type(out := repeat["output"]) is not str and holds_non_finite(out):
        raise ItemError("cloud_repeat.output", _NOT_FINITE)
    if input_ is not None and (
        (type(text := input_["text"]) is not str and holds_non_finite(text))
        or (len(input_) > 2 and holds_non_finite(list(input_.values())))
    ):
        raise ItemError("input", _NOT_FINITE)


def _compare(task: TaskRuntime, edge: Any, cloud: Any, max_chars: int) -> Comparison:
    spec = task.comparator_spec
    try:
        return compare(spec, edge, cloud, max_chars=max_chars)
    except Exception as exc:
        # Which output the comparator cannot read: compare each with itself alone.
        field = "edge.output, cloud.output"
        for side, value in (("edge", edge), ("cloud", cloud)):
            try:
                compare(spec, value, value, max_chars=max_chars)
            except Exception:
                field = f"{side}.output"
                break
        raise ItemError(field, problem_of(exc)) from exc


def answered(side: Any) -> bool:
    """A side that ran returned an output without an error."""
    return side is not None and side["error"] is None and side["output"] is not None


def _repeat_columns(item: ResultIn, task: TaskRuntime, max_chars: int) -> dict[str, Any]:
    """An asked repeat pair (`cloud_repeat`): the cloud's answer as the reference, the
    repeat as the compared side, with the task's comparator; its cost. Never the edge pair."""
    cloud, repeat = item["cloud"], item["cloud_repeat"]
    assert cloud is not None and repeat is not None  # validation refuses a repeat without cloud
    scored = None
    if answered(cloud) and answered(repeat):
        spec = task.comparator_spec
        try:
            comparison = compare(spec, repeat["output"], cloud["output"], max_chars=max_chars)
        except Exception as exc:
            # The cloud output was read by the edge pair, or is read alone here: if it reads,
            # the repeat is what cannot be.
            field = "cloud_repeat.output"
            try:
                compare(spec, cloud["output"], cloud["output"], max_chars=max_chars)
            except Exception:
                field = "cloud.output"
            raise ItemError(field, problem_of(exc)) from exc
        scored = repeat_outcome(comparison)
    cost = repeat["cost"]
    if cost is None:
        prices = task.config.prices.cloud
        tokens_in = repeat["input_tokens"]
        tokens_out = repeat["output_tokens"] or 0
        if tokens_in is None:
            tokens_in = item["input_tokens"]
        cost = (tokens_in * prices["in"] + tokens_out * prices["out"]) / 1000.0
    return {
        "repeat_outcome": scored[0] if scored else None,
        "repeat_source": "asked",
        "repeat_diff": scored[1] if scored else None,
        "repeat_cost": cost,
    }


NO_REPEAT = {
    "repeat_outcome": None,
    "repeat_source": None,
    "repeat_diff": None,
    "repeat_cost": None,
}


def _cloud_print(
    task: TaskRuntime, cloud: Any, key: bytes, max_chars: int
) -> dict[str, Any] | None:
    try:
        return fingerprint(task.comparator_spec, cloud["output"], key, max_chars=max_chars)
    except Exception as exc:
        raise ItemError("cloud.output", problem_of(exc)) from exc


def _input_hash(key: bytes, input_: Any) -> str | None:
    try:
        return input_hash(key, input_)
    except Exception as exc:
        raise ItemError("input", problem_of(exc)) from exc


def score(
    item: ResultIn,
    task: TaskRuntime,
    received_at: datetime,
    context: IngestContext = DEFAULT_CONTEXT,
) -> Scored:
    """The stored row of one result, and its payload when the task's policy keeps it.
    ItemError when the item cannot be scored (the error names the field)."""
    edge, cloud = item["edge"], item["cloud"]
    ts = event_time(item["ts"], received_at, context.max_backfill)
    _refuse_non_finite(item)
    comparison = (
        _compare(task, edge["output"], cloud["output"], context.max_chars)
        if edge is not None and cloud is not None and is_pair(item)
        else None
    )
    input_ = item["input"]
    repeat = (
        _repeat_columns(item, task, context.max_chars)
        if item["cloud_repeat"] is not None
        else NO_REPEAT
    )
    # The input's keyed hash finds later answers to the same input (free repeat pairs),
    # under every policy; the cloud's print is what they are scored against, kept only
    # when it can be found (no key, no input: no print).
    key = context.id_hash_key
    hashed_input = _input_hash(key, input_) if key is not None and input_ is not None else None
    cloud_print = (
        _cloud_print(task, cloud, key, context.max_chars)
        if hashed_input is not None and key is not None and answered(cloud)
        else None
    )
    config = task.config
    policy = config.payload_policy
    session_id, user_id = item["session_id"], item["user_id"]
    sticky = bucket_of(task.name, session_id if config.sticky_by == "session" else user_id)
    reason = item["degrade_reason"]
    # Which sides the router did not run, and why ({} names none: stored as null).
    posted_skips = item["skipped"] or {}
    skipped: dict[str, str | None] | None = {
        side: why for side, why in posted_skips.items()
    } or None
    # One masker for the whole result under `redacted`: a value gets one placeholder in
    # every field it is masked in (the reasons, the payload), two values two.
    masker = Masker() if policy == "redacted" else None
    if policy != "full":
        # A raw id is personal data: under `redacted` and `none` only its keyed hash is kept.
        session_id = hashed_id(context.id_hash_key, session_id)
        user_id = hashed_id(context.id_hash_key, user_id)
        if reason is not None:
            reason = (
                fit_masked(
                    _masked(masker, reason, context.max_chars, "degrade_reason"),
                    DEGRADE_REASON_CHARS,
                )
                if masker is not None
                else None
            )
        if skipped:
            # A JSON column: a masked reason is kept whole, however long its placeholders.
            skipped = {
                side: _masked(masker, why, context.max_chars, f"skipped.{side}")
                if masker is not None
                else None
                for side, why in posted_skips.items()
            }
    row = {
        "task_id": task.id,
        "request_id": item["request_id"],
        "ts": ts,
        "received_at": received_at,
        "session_id": session_id,
        "user_id": user_id,
        "sticky_bucket": sticky,
        "input_tokens": item["input_tokens"],
        "decision": item["decision"],
        "served": item["served"],
        "degraded": item["degraded"],
        "degrade_reason": reason,
        "flag_version": item["flag_version"],
        "input_segments": input_["segments"] if input_ is not None else None,
        "config_version": task.config_version,
        "bucket": length_bucket(item["input_tokens"], config.length_buckets),
        "comparator": task.comparator_spec["kind"],
        "comparator_version": task.comparator_version,
        "outcome": comparison.outcome if comparison else None,
        "edge_ran": edge is not None,
        "cloud_ran": cloud is not None,
        **repeat,
        "input_hash": hashed_input,
        "cloud_print": cloud_print,
        "skipped": skipped,
    }
    row.update(zip(EDGE_KEYS, _edge_values(edge) if edge else NO_EDGE, strict=True))
    row.update(zip(CLOUD_KEYS, _cloud_values(cloud) if cloud else NO_CLOUD, strict=True))
    if policy == "none":
        return Scored(row, None)
    probability = keep_probability(item, comparison, task)
    if probability < 1.0 and keep_draw(task.name, item["request_id"]) >= probability:
        return Scored(row, None)
    payload = {
        "policy": policy,
        "keep_probability": probability,
        "input": input_,
        "edge_output": edge["output"] if edge else None,
        "cloud_output": cloud["output"] if cloud else None,
        "diff": comparison.diff if comparison else None,
        "edge_error_message": edge["error_message"] if edge else None,
        "cloud_error_message": cloud["error_message"] if cloud else None,
    }
    if policy == "redacted":
        # Compared above on the original text; only the masked text is stored.
        payload = _redacted(payload, context.max_chars, masker)
    return Scored(row, payload)


def _masked(masker: Masker, text: str, max_chars: int, field: str) -> str:
    try:
        return masker.text(text, max_chars)
    except Exception as exc:
        raise ItemError(field, problem_of(exc)) from exc


# Payload columns and the posted field each holds, in the order they are checked.
PAYLOAD_FIELDS = {
    "input": "input",
    "edge_output": "edge.output",
    "cloud_output": "cloud.output",
    "edge_error_message": "edge.error_message",
    "cloud_error_message": "cloud.error_message",
    "diff": "diff",
}


def _redacted(
    payload: dict[str, Any], max_chars: int, masker: Masker | None = None
) -> dict[str, Any]:
    try:
        return redact_payload(payload, max_chars=max_chars, masker=masker)
    except Exception as exc:
        # Which field the masker cannot read: mask each alone.
        field = "(payload)"
        for column, name in PAYLOAD_FIELDS.items():
            try:
                redact_payload({column: payload[column]}, max_chars=max_chars)
            except Exception:
                field = name
                break
        raise ItemError(field, problem_of(exc)) from exc

"""Ingest: validate posted results, score each pair, keep payloads per policy, store once.

A bad item never sinks the good ones: each item is answered (accepted, duplicate, or
rejected with its index and a reason naming the field). Reading, scoring, masking and
serialising run per item, so an item that cannot be read, scored or stored is rejected
alone. `(task, request_id)` is unique and the first write wins, both within a batch and
against what is already stored. All rows of one request are written in one transaction:
on a storage error nothing is kept.

Under `payload_policy: redacted` and `none`, session and user ids are stored as a keyed
hash; every policy stores the result's sticky bucket, computed here from the raw key.
"""

from __future__ import annotations

import hmac
import logging
import math
import secrets
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from operator import itemgetter
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from controlplane.catalog.service import TaskRuntime, task_runtimes
from controlplane.client.sticky import sticky_bucket
from controlplane.compare.comparators import Comparison, compare
from controlplane.compare.jsonutil import loads
from controlplane.compare.redaction import MAX_CHARS, Masker, redact_payload
from controlplane.db import StoredJSON
from controlplane.errors import describe_errors
from controlplane.ingest import repository
from controlplane.ingest.buckets import length_bucket
from controlplane.ingest.schemas import (
    Altered,
    IngestReport,
    Rejected,
    ResultBatch,
    ResultIn,
    consistency_problem,
    holds_non_finite,
    holds_surrogate,
    nul_fields,
    surrogate_fields,
)

log = logging.getLogger("shadowplane.ingest")

_BATCH = TypeAdapter(ResultBatch)
_ITEMS = TypeAdapter(list[ResultIn])
_ITEM = TypeAdapter(ResultIn)


def parse_result(raw: Any) -> ResultIn:
    """One result, validated (raises pydantic's ValidationError)."""
    return _ITEM.validate_python(raw)


class BodyError(ValueError):
    """The body is not a result nor a batch of results (answered 422)."""


def items_of(body: Any, max_items: int) -> list[Any]:
    """The list of items in a parsed body: one result, or `{"results": [...]}`."""
    if not isinstance(body, dict):
        raise BodyError('body: must be a result object or {"results": [...]}')
    if "results" not in body:
        return [body]
    items = body["results"]
    if not isinstance(items, list):
        raise BodyError("results: must be a list of result objects")
    if len(items) > max_items:
        raise BodyError(f"results: {len(items)} items, at most {max_items} per request")
    return items


def validate_body(body: bytes, max_items: int) -> tuple[list[tuple[int, ResultIn]], list[Rejected]]:
    """Validated items with their indexes, and the rejected ones; BodyError for a non-result."""
    try:
        # Fast path: a batch where every item is valid, validated straight from the bytes.
        # (Its parser refuses lone surrogates and nesting deeper than 200.)
        results = _BATCH.validate_json(body)["results"]
    except ValidationError:
        pass  # a single result, a bad item, or not a result at all: the careful path decides
    else:
        if len(results) > max_items:
            raise BodyError(f"results: {len(results)} items, at most {max_items} per request")
        return _refuse_impossible(list(enumerate(results)), [], check_nul=b"\\u0000" in body)
    try:
        text = body.decode()  # JSON is UTF-8 (RFC 8259)
        parsed = loads(text, parse_int=_int_or_unreadable)
    except RecursionError:
        raise BodyError("body: nested too deeply to be read") from None
    except ValueError as exc:
        raise BodyError(f"body: not valid JSON ({exc})") from None
    # From UTF-8 text, a lone surrogate can only come from a \\uD800-\\uDFFF escape.
    escapes = "\\ud" in text or "\\uD" in text
    return validate_items(items_of(parsed, max_items), check_surrogates=escapes)


# Python refuses to read an integer of more than 4,300 digits (a guard against slow
# conversion); such a number in one item must reject that item, not the whole body.
_MAX_INT_DIGITS = 4300


def _int_or_unreadable(digits: str) -> int | float:
    if len(digits.lstrip("-")) <= _MAX_INT_DIGITS:
        return int(digits)
    return math.inf  # refused per item, like any number that is not finite


def validate_items(
    items: list[Any], *, check_surrogates: bool = True
) -> tuple[list[tuple[int, ResultIn]], list[Rejected]]:
    """Validated items with their indexes, and the rejected ones with the reasons."""
    bad: list[Rejected] = []
    indexed = list(enumerate(items))
    if check_surrogates:
        # Before validation, whose messages quote the values they refuse.
        readable = []
        for index, raw in indexed:
            if fields := surrogate_fields(raw):
                error = "; ".join(f"{f}: holds a lone surrogate (invalid Unicode)" for f in fields)
                bad.append(Rejected(index=index, request_id=_request_id(raw), error=error))
            else:
                readable.append((index, raw))
        indexed = readable
    try:
        validated = _ITEMS.validate_python([raw for _, raw in indexed])
    except ValidationError:
        pass  # slow path: find out which items are bad, keep the good ones
    else:
        good = [(index, item) for (index, _), item in zip(indexed, validated, strict=True)]
        return _refuse_impossible(good, bad, check_nul=True)
    good = []
    for index, raw in indexed:
        try:
            good.append((index, _ITEM.validate_python(raw)))
        except ValidationError as exc:
            bad.append(Rejected(index=index, request_id=_request_id(raw), error=_described(exc)))
        except RecursionError:
            bad.append(
                Rejected(
                    index=index, request_id=_request_id(raw), error="(result): nested too deeply"
                )
            )
    return _refuse_impossible(good, bad, check_nul=True)


def _request_id(raw: Any) -> str | None:
    """The request id of an item that failed validation, when it can be answered back."""
    rid = raw.get("request_id") if isinstance(raw, dict) else None
    if not isinstance(rid, str) or "\x00" in rid or holds_surrogate(rid):
        return None
    return rid


def _described(exc: ValidationError) -> str:
    try:
        return "; ".join(describe_errors(exc, root="(result)"))
    except (RecursionError, ValueError):
        # A refused value too deep (or too odd) to quote: name the fields without it.
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(result)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )


def _refuse_impossible(
    good: list[tuple[int, ResultIn]], bad: list[Rejected], *, check_nul: bool
) -> tuple[list[tuple[int, ResultIn]], list[Rejected]]:
    """Move well-typed results that cannot be stored to `bad`: contradictory ones, and (when
    the body spelt one) those holding a NUL character in a text field, which PostgreSQL
    cannot store."""
    kept = []
    for index, item in good:
        problem = consistency_problem(item)
        if problem is not None:
            error = f"(result): {problem}"
        elif check_nul and (fields := nul_fields(item)):
            error = "; ".join(f"{f}: must not contain the NUL character" for f in fields)
        else:
            kept.append((index, item))
            continue
        bad.append(Rejected(index=index, request_id=_request_id(item), error=error))
    bad.sort(key=lambda r: r.index)
    return kept, bad


# --- pure scoring ----------------------------------------------------------------------


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


# The per-side fields stored as `edge_*` / `cloud_*` columns (outputs and error messages
# are payload text and live in the payloads table).
SIDE_FIELDS = ("error", "latency_ms", "ttfb_ms", "model", "input_tokens", "output_tokens", "cost")
EDGE_FIELDS = (*SIDE_FIELDS, "confidence", "valid")
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
    return "h:" + hmac.digest(key, value.encode(), "sha256").hex()[:32]


def hashed_id(key: bytes | None, value: str | None) -> str | None:
    """A session or user id as stored under `redacted` and `none`: "h:" and the first 32 hex
    digits of HMAC-SHA256(server secret, id). Groups alike, reveals nothing of the id."""
    if value is None:
        return None
    if key is None:
        raise RuntimeError("no id hash key: the caller must pass IngestContext(id_hash_key=...)")
    return _id_hash(key, value)


def id_hash_key(session: Session, configured: str | None) -> bytes:
    """The key that hashes ids: the configured secret, else the one kept in the database
    (generated by whichever process needs it first, then shared by all)."""
    if configured:
        return configured.encode()
    return bytes.fromhex(repository.server_secret(session, "id_hash", secrets.token_hex(32)))


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
    config = task.config
    policy = config.payload_policy
    session_id, user_id = item["session_id"], item["user_id"]
    sticky = bucket_of(task.name, session_id if config.sticky_by == "session" else user_id)
    reason = item["degrade_reason"]
    if policy != "full":
        # A raw id is personal data: under `redacted` and `none` only its keyed hash is kept.
        session_id = hashed_id(context.id_hash_key, session_id)
        user_id = hashed_id(context.id_hash_key, user_id)
        if reason is not None:
            reason = _masked(reason, context.max_chars) if policy == "redacted" else None
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
        payload = _redacted(payload, context.max_chars)
    return Scored(row, payload)


def _masked(reason: str, max_chars: int) -> str:
    try:
        return Masker().text(reason, max_chars)[:DEGRADE_REASON_CHARS]
    except Exception as exc:
        raise ItemError("degrade_reason", problem_of(exc)) from exc


# Payload columns and the posted field each holds, in the order they are checked.
PAYLOAD_FIELDS = {
    "input": "input",
    "edge_output": "edge.output",
    "cloud_output": "cloud.output",
    "edge_error_message": "edge.error_message",
    "cloud_error_message": "cloud.error_message",
    "diff": "diff",
}


def _redacted(payload: dict[str, Any], max_chars: int) -> dict[str, Any]:
    try:
        return redact_payload(payload, max_chars=max_chars)
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


# JSON columns, serialised per item (see stored_form).
JSON_PAYLOAD_FIELDS = {c: f for c, f in PAYLOAD_FIELDS.items() if not c.endswith("_message")}


def stored_form(scored: Scored) -> Scored:
    """The item with its JSON columns turned into the text that is stored, so a value that
    cannot be stored (a lone surrogate, nesting too deep) rejects this item alone."""
    row = scored.row
    if row["input_segments"] is not None:
        row["input_segments"] = _stored_json("input.segments", row["input_segments"])
    payload = scored.payload
    if payload is not None:
        for column, name in JSON_PAYLOAD_FIELDS.items():
            if payload[column] is not None:
                payload[column] = stored = _stored_json(name, payload[column])
                # The diff quotes the outputs: their fields are named, not it.
                if stored.replaced_nul and column != "diff":
                    scored.replaced_nul.append(name)
    return scored


NUL_NOTE = "NUL character stored as U+FFFD (storage cannot hold it)"


def _stored_json(field: str, value: Any) -> StoredJSON:
    try:
        return StoredJSON(value)
    except Exception as exc:
        raise ItemError(field, problem_of(exc)) from exc


# --- the whole request -------------------------------------------------------------------


def ingest(
    session: Session,
    valid: list[tuple[int, ResultIn]],
    rejected: list[Rejected],
    received_at: datetime,
    context: IngestContext = DEFAULT_CONTEXT,
) -> IngestReport:
    """Score and store validated items; the caller owns (commits) the transaction."""
    runtimes = task_runtimes(session, {item["task"] for _, item in valid}) if valid else {}
    seen: set[tuple[str, str]] = set()
    scored: list[Scored] = []
    altered: list[Altered] = []
    in_batch_duplicates = 0
    for index, item in valid:
        task = runtimes.get(item["task"])
        if task is None:
            rejected.append(
                Rejected(
                    index=index,
                    request_id=item["request_id"],
                    error=f"task: unknown task {item['task']!r}; register it with POST /v1/tasks",
                )
            )
            continue
        key = (item["task"], item["request_id"])
        if key in seen:
            in_batch_duplicates += 1
            continue
        try:
            one = stored_form(score(item, task, received_at, context))
        except ItemError as exc:
            rejected.append(Rejected(index=index, request_id=item["request_id"], error=str(exc)))
            continue
        except Exception as exc:
            # Not a known shape of bad input: reject the item all the same, and say so in
            # the log (the exception's type only: its message may quote payload text).
            log.warning(
                '{"event": "ingest_item_failed", "task": "%s", "index": %d, "error": "%s"}',
                task.name,
                index,
                type(exc).__name__,
            )
            error = f"(result): {problem_of(exc)}"
            rejected.append(Rejected(index=index, request_id=item["request_id"], error=error))
            continue
        scored.append(one)
        if one.replaced_nul:
            altered.append(
                Altered(
                    index=index,
                    request_id=item["request_id"],
                    fields=one.replaced_nul,
                    note=NUL_NOTE,
                )
            )
        seen.add(key)  # a rejected item does not make a later one with its id a duplicate
    stored = repository.insert_results(session, [s.row for s in scored], _payloads_by_key(scored))
    rejected.sort(key=lambda r: r.index)
    return IngestReport(
        accepted=stored,
        duplicates=in_batch_duplicates + len(scored) - stored,
        rejected=rejected,
        altered=altered,
    )


def _payloads_by_key(scored: list[Scored]) -> dict[tuple[int, str], dict[str, Any]]:
    return {
        (s.row["task_id"], s.row["request_id"]): s.payload for s in scored if s.payload is not None
    }


def outcome_counts(session: Session, task: TaskRuntime) -> dict[str, int]:
    """How many stored results of a task ended in each comparison outcome (`none`: not a pair)."""
    counts: dict[str, int] = defaultdict(int)
    for outcome, n in repository.outcome_counts(session, task.id):
        counts[outcome or "none"] += n
    return dict(counts)


def conflict_ids(session: Session, task_id: int, *, limit: int) -> list[str]:
    """Request ids of a task's most recent conflicting results."""
    return repository.request_ids_by_outcome(session, task_id, "conflict", limit=limit)


def result_view(session: Session, task: str, request_id: str) -> dict[str, Any] | None:
    """A stored result in the shape it was posted, with bucket, received_at, comparison, payload."""
    found = repository.get_result(session, task, request_id)
    if found is None:
        return None
    r, p = found

    def side(name: str) -> dict[str, Any] | None:
        if not getattr(r, f"{name}_ran"):
            return None
        fields = EDGE_FIELDS if name == "edge" else SIDE_FIELDS
        out = {f: getattr(r, f"{name}_{f}") for f in fields}
        out["output"] = getattr(p, f"{name}_output") if p is not None else None
        out["error_message"] = getattr(p, f"{name}_error_message") if p is not None else None
        return out

    return {
        "request_id": r.request_id,
        "task": task,
        "ts": r.ts,
        "received_at": r.received_at,
        "session_id": r.session_id,
        "user_id": r.user_id,
        "sticky_bucket": r.sticky_bucket,
        "input_tokens": r.input_tokens,
        "decision": r.decision,
        "served": r.served,
        "degraded": r.degraded,
        "degrade_reason": r.degrade_reason,
        "flag_version": r.flag_version,
        "input_segments": r.input_segments,
        "bucket": r.bucket,
        "config_version": r.config_version,
        "edge": side("edge"),
        "cloud": side("cloud"),
        "comparison": {
            "outcome": r.outcome,
            "diff": p.diff if p is not None else None,
            "comparator": r.comparator,
            "comparator_version": r.comparator_version,
        },
        "payload": None
        if p is None
        else {
            "policy": p.policy,
            "keep_probability": p.keep_probability,
            "input": p.input,
            "edge_output": p.edge_output,
            "cloud_output": p.cloud_output,
            "diff": p.diff,
            "edge_error_message": p.edge_error_message,
            "cloud_error_message": p.cloud_error_message,
        },
    }

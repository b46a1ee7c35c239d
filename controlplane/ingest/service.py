"""Ingest: validate posted results, score each pair, keep payloads per policy, store once.

A bad item never sinks the good ones: each item is answered (accepted, duplicate, or
rejected with its index and a reason naming the field). `(task, request_id)` is unique
and the first write wins, both within a batch and against what is already stored. All
rows of one request are written in one transaction: on a storage error nothing is kept.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from controlplane.catalog.service import RuntimeCache, TaskRuntime
from controlplane.errors import describe_errors
from controlplane.ingest import repository
from controlplane.ingest.buckets import length_bucket
from controlplane.ingest.comparators import Comparison, compare
from controlplane.ingest.redaction import redact_payload
from controlplane.ingest.schemas import (
    IngestReport,
    Rejected,
    ResultBatch,
    ResultIn,
    consistency_problem,
    nul_fields,
)
from controlplane.jsonutil import loads

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
        results = _BATCH.validate_json(body)["results"]
    except ValidationError:
        pass  # a single result, a bad item, or not a result at all: the careful path decides
    else:
        if len(results) > max_items:
            raise BodyError(f"results: {len(results)} items, at most {max_items} per request")
        return _refuse_impossible(list(enumerate(results)), [], check_nul=b"\\u0000" in body)
    try:
        parsed = loads(body)
    except ValueError as exc:
        raise BodyError(f"body: not valid JSON ({exc})") from None
    return validate_items(items_of(parsed, max_items))


def validate_items(items: list[Any]) -> tuple[list[tuple[int, ResultIn]], list[Rejected]]:
    """Validated items with their indexes, and the rejected ones with the reasons."""
    try:
        return _refuse_impossible(
            list(enumerate(_ITEMS.validate_python(items))), [], check_nul=True
        )
    except ValidationError:
        pass  # slow path: find out which items are bad, keep the good ones
    good: list[tuple[int, ResultIn]] = []
    bad: list[Rejected] = []
    for index, raw in enumerate(items):
        try:
            good.append((index, _ITEM.validate_python(raw)))
        except ValidationError as exc:
            rid = raw.get("request_id") if isinstance(raw, dict) else None
            bad.append(
                Rejected(
                    index=index,
                    request_id=rid if isinstance(rid, str) else None,
                    error="; ".join(describe_errors(exc, root="(result)")),
                )
            )
    return _refuse_impossible(good, bad, check_nul=True)


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
        nul_id = check_nul and "\x00" in item["request_id"]
        bad.append(
            Rejected(index=index, request_id=None if nul_id else item["request_id"], error=error)
        )
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


@dataclass(slots=True)
class Scored:
    row: dict[str, Any]
    payload: dict[str, Any] | None


def score(item: ResultIn, task: TaskRuntime, received_at: datetime) -> Scored:
    """The stored row of one result, and its payload when the task's policy keeps it."""
    edge, cloud = item["edge"], item["cloud"]
    comparison = (
        compare(task.comparator_spec, edge["output"], cloud["output"])
        if edge is not None and cloud is not None and is_pair(item)
        else None
    )
    ts = item["ts"] or received_at
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)  # a naive time is read as UTC
    input_ = item["input"]
    row = {
        "task_id": task.id,
        "request_id": item["request_id"],
        "ts": ts.astimezone(UTC),
        "received_at": received_at,
        "session_id": item["session_id"],
        "user_id": item["user_id"],
        "input_tokens": item["input_tokens"],
        "decision": item["decision"],
        "served": item["served"],
        "degraded": item["degraded"],
        "degrade_reason": item["degrade_reason"],
        "flag_version": item["flag_version"],
        "input_segments": input_["segments"] if input_ is not None else None,
        "config_version": task.config_version,
        "bucket": length_bucket(item["input_tokens"], task.config.length_buckets),
        "comparator": task.comparator_spec["kind"],
        "comparator_version": task.comparator_version,
        "outcome": comparison.outcome if comparison else None,
        "edge_ran": edge is not None,
        "cloud_ran": cloud is not None,
    }
    row.update(zip(EDGE_KEYS, _edge_values(edge) if edge else NO_EDGE, strict=True))
    row.update(zip(CLOUD_KEYS, _cloud_values(cloud) if cloud else NO_CLOUD, strict=True))
    policy = task.config.payload_policy
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
        payload = redact_payload(payload)
    return Scored(row, payload)


# --- the whole request -------------------------------------------------------------------


def ingest(
    session: Session,
    valid: list[tuple[int, ResultIn]],
    rejected: list[Rejected],
    tasks: RuntimeCache,
    received_at: datetime,
) -> IngestReport:
    """Score and store validated items; the caller owns (commits) the transaction."""
    runtimes = tasks.runtimes(session, {item["task"] for _, item in valid}) if valid else {}
    seen: set[tuple[str, str]] = set()
    scored: list[Scored] = []
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
        seen.add(key)
        scored.append(score(item, task, received_at))
    stored = repository.insert_results(session, [s.row for s in scored], _payloads_by_key(scored))
    rejected.sort(key=lambda r: r.index)
    return IngestReport(
        accepted=stored, duplicates=in_batch_duplicates + len(scored) - stored, rejected=rejected
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

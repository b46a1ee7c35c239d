"""What an eval item is (pure): its id, its expected answer, its exported line (the full form,
and the blind form a `review` key reads), the JSONL and CSV renderings, the manifest, and
the JSON Schema of one line.

The export is deterministic: canonical JSON (sorted keys, compact, UTF-8, one written form
per number: see `canonical_number`), items in `seq` order, no clock anywhere, so the same
content gives the same bytes on every machine, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from controlplane.compare.fingerprint import normalise_text as normalise
from controlplane.compare.jsonutil import dumps
from controlplane.review.blind import renumber, shown_answer

# What a label gives an eval item is the review's to say (the queue asks it too, to send a
# regression item without an answer to one more reviewer).
from controlplane.review.labels import expected_answer as expected_answer

LAYERS = ("boundary", "anomaly", "regression")
FORMATS = ("jsonl", "csv")
# Resolved consensus verdicts whose expected answer must come from a reviewer's correction.
NEEDS_CORRECTION = ("both_wrong", "unclear", "wrong")
SCHEMA_ID = "https://shadowplane.dev/evalsets/schema.json"


def input_text(value: Any) -> str:
    """The text an item's identity is taken from: `input.text` when the input holds one
    (what routers send), the string itself, else the input as canonical JSON. A `text` that
    is empty or only whitespace is no text: such inputs are told apart by their other
    fields (as ingest's input identity does), never all one input."""
    if isinstance(value, Mapping):
        text = value.get("text")
        if isinstance(text, str):
            if normalise(text):
                return text
            value = {k: v for k, v in value.items() if k != "text"}
    if isinstance(value, str):
        return value
    return canonical(value).decode()


def item_id(task: str, value: Any) -> str:
    """sha256 of the task and the normalised input text: the same input enters each layer
    of a task's eval sets once, whichever result brought it."""
    digest = hashlib.sha256()
    digest.update(task.encode())
    digest.update(b"\x00")
    digest.update(normalise(input_text(value)).encode())
    return digest.hexdigest()


def canonical_number(value: float) -> int | float:
    """One written form per number, whichever backend stored it: PostgreSQL's jsonb keeps
    a number as a decimal (1e20 comes back as the integer 100000000000000000000, 1.0 as
    1.0, -0.0 as 0.0) where SQLite keeps the double. A float whose shortest decimal is a
    whole number becomes that integer (1.0 → 1, -0.0 → 0, 1e20 → 100000000000000000000,
    1.2345678901234567e19 → 12345678901234567000, the decimal jsonb holds); any other
    float stays the same double (written as its shortest decimal). Integers are exact on
    both backends and are left alone."""
    if not math.isfinite(value):
        return value
    exact = Decimal(repr(value))
    return int(exact) if exact == exact.to_integral_value() else value


def canonical_numbers(value: Any) -> Any:
    """The value with every float in its canonical form (`canonical_number`)."""
    if isinstance(value, float):
        return canonical_number(value)
    if isinstance(value, Mapping):
        return {k: canonical_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical_numbers(v) for v in value]
    return value


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys, compact, UTF-8, numbers in one form on every backend
    (`canonical_number`)."""
    return dumps(canonical_numbers(value), sort_keys=True)


def line(item: Any, task: str) -> dict[str, Any]:
    """An eval item (`models.EvalItem`) as one exported line."""
    return {
        "id": item.item_id,
        "task": task,
        "layer": item.layer,
        "input": item.input,
        "expected": item.expected,
        "edge_output": item.edge_output,
        "cloud_output": item.cloud_output,
        "bucket": item.bucket,
        "failure_class": item.failure_class,
        "tags": list(item.tags or []),
        "provenance": item.provenance,
    }


# Consensus verdicts naming a side (whether it is the edge's), and those naming none.
_SIDE_VERDICTS = {"edge_correct": True, "cloud_correct": False}
_NEUTRAL_VERDICTS = ("both_correct", "both_wrong", "unclear", "correct", "wrong")


def blind_line(item: Any, task: str, a_is_edge: bool) -> dict[str, Any]:
    """An eval item as a `review` key reads it (docs/evalsets.md, "Blind form"): the two
    answers as `a` and `b` in the item's hidden order (`a_is_edge`; a single item's one
    answer is `a`), each and `expected` in the form a reviewer is shown them
    (controlplane.review.blind.shown_answer), placeholders renumbered in the order shown
    under `redacted`, and tags naming no side; nothing naming a model, a side, what was
    served or what the router decided. A pair both reviewers called right expects `a`
    (`blind_expected`)."""
    provenance = item.provenance or {}
    comparator, kind = provenance.get("comparator"), provenance.get("kind")
    if kind == "single":
        a, b = item.cloud_output, None
    elif a_is_edge:
        a, b = item.edge_output, item.cloud_output
    else:
        a, b = item.cloud_output, item.edge_output
    values = [
        item.input,
        shown_answer(comparator, a),
        None if kind == "single" else shown_answer(comparator, b),
        shown_answer(comparator, blind_expected(item, a)),
    ]
    if provenance.get("policy") == "redacted":
        values = renumber(values, diff_at=None)
    return {
        "id": item.item_id,
        "task": task,
        "layer": item.layer,
        "input": values[0],
        "a": values[1],
        "b": values[2],
        "expected": values[3],
        "bucket": item.bucket,
        "failure_class": item.failure_class,
        "tags": blind_tags(item.tags or [], a_is_edge),
    }


def blind_expected(item: Any, a: Any) -> Any:
    """The expected answer of the blind form: the stored one, except where both answers
    are right and it is the cloud's (consensus both_correct, no correction): then the
    answer shown as A. Two right answers may still differ (two valid rewrites, JSON equal
    on the declared fields only), and expecting the cloud's would name it; A, drawn at
    random per item, names neither. The full form and scoring keep the stored one."""
    provenance = item.provenance or {}
    both_right = provenance.get("kind") == "pair" and provenance.get("consensus") == "both_correct"
    return a if both_right and item.expected == item.cloud_output else item.expected


def blind_tags(tags: Iterable[str], a_is_edge: bool) -> list[str]:
    """The tags that name no side: the item's kind (pair, single) and its consensus in A/B
    terms (`consensus:edge_correct` is `consensus:a_correct` when A is the edge's answer).
    The sampling reason is left out, as the review view leaves it out (`cloud_decided`,
    `edge_error` name a side)."""
    out = set()
    for tag in tags:
        verdict = tag.removeprefix("consensus:")
        if tag in ("pair", "single") or verdict in _NEUTRAL_VERDICTS and verdict != tag:
            out.add(tag)
        elif verdict in _SIDE_VERDICTS and verdict != tag:
            out.add(f"consensus:{'a' if _SIDE_VERDICTS[verdict] == a_is_edge else 'b'}_correct")
    return sorted(out)


def jsonl(lines: Iterable[Mapping[str, Any]]) -> bytes:
    """Lines as JSONL: one canonical JSON object per line, each ending in a newline."""
    return b"".join(canonical(dict(x)) + b"\n" for x in lines)


# The columns both forms share, in export order.
_COMMON_COLUMNS = ("id", "task", "layer", "bucket", "failure_class", "tags", "input", "expected")
CSV_COLUMNS = (*_COMMON_COLUMNS, "edge_output", "cloud_output", "provenance")
_CSV_TEXT = ("id", "task", "layer", "bucket", "failure_class")


# The blind form's columns (`blind_line`).
BLIND_CSV_COLUMNS = (*_COMMON_COLUMNS, "a", "b")


def csv_bytes(lines: Iterable[Mapping[str, Any]], columns: Sequence[str] = CSV_COLUMNS) -> bytes:
    """Lines as CSV: plain columns as text, the JSON ones as canonical JSON; `columns`:
    BLIND_CSV_COLUMNS for blind lines."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for x in lines:
        writer.writerow(
            [
                ("" if x[c] is None else str(x[c])) if c in _CSV_TEXT else canonical(x[c]).decode()
                for c in columns
            ]
        )
    return out.getvalue().encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest(files: Sequence[tuple[str, str, str, str, int, str]], schema_hash: str) -> bytes:
    """The manifest: per file (path, task, layer, format, count, sha256) and the schema's hash."""
    document = {
        "schema": {"path": "schema.json", "sha256": schema_hash},
        "files": [
            {
                "path": path,
                "task": task,
                "layer": layer,
                "format": fmt,
                "count": count,
                "sha256": digest,
            }
            for path, task, layer, fmt, count, digest in sorted(files)
        ],
    }
    return dumps(document, sort_keys=True) + b"\n"


_JSON_VALUE: dict[str, Any] = {}  # any JSON value
_LABEL = {
    "type": "object",
    "required": ["reviewer", "resolved"],
    "properties": {
        "id": {"type": "integer"},
        "reviewer": {"type": "string", "minLength": 1},
        "resolved": {
            "enum": [
                "edge_correct",
                "cloud_correct",
                "both_correct",
                "both_wrong",
                "unclear",
                "correct",
                "wrong",
            ]
        },
        "failure_class": {"type": ["string", "null"]},
        "corrected": _JSON_VALUE,
        "note": {"type": ["string", "null"]},
        "counted": {
            "description": "Whether the consensus read this label (each reviewer's newest)",
            "type": "boolean",
        },
    },
    "additionalProperties": False,
}
_STAMP = {"type": "string", "format": "date-time"}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "Shadowplane eval item (one line of <task>/<layer>.jsonl)",
    "type": "object",
    "required": [
        "id",
        "task",
        "layer",
        "input",
        "expected",
        "edge_output",
        "cloud_output",
        "bucket",
        "failure_class",
        "tags",
        "provenance",
    ],
    "additionalProperties": False,
    "properties": {
        "id": {
            "description": "sha256 (hex) of the task and the NFKC-normalised, "
            "whitespace-collapsed input text",
            "type": "string",
            "pattern": "^[0-9a-f]{64}$",
        },
        "task": {"type": "string", "minLength": 1},
        "layer": {"enum": list(LAYERS)},
        "input": {"description": "The input as the payload policy kept it", **_JSON_VALUE},
        "expected": {
            "description": "The right side's output, or a reviewer's correction",
            **_JSON_VALUE,
        },
        "edge_output": _JSON_VALUE,
        "cloud_output": _JSON_VALUE,
        "bucket": {"description": "Length bucket of the input", "type": "string"},
        "failure_class": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "provenance": {
            "type": "object",
            "required": [
                "result_id",
                "request_id",
                "review_item_id",
                "policy",
                "reason",
                "kind",
                "inclusion_probability",
                "consensus",
                "labels",
                "reviewers",
                "comparator",
                "comparator_version",
                "config_version",
                "flag_version",
                "window_start",
                "result_ts",
                "decision",
                "served",
                "outcome",
            ],
            "properties": {
                "result_id": {
                    "description": "The result's id when it was sampled (results are pruned; "
                    "the item keeps its own copy)",
                    "type": ["integer", "null"],
                },
                "request_id": {"type": "string", "minLength": 1},
                "review_item_id": {"type": "integer"},
                "policy": {
                    "description": "The task's payload policy: under `redacted` the text "
                    "is the masked text",
                    "enum": ["full", "redacted"],
                },
                "reason": {"type": "string"},
                "kind": {"enum": ["pair", "single"]},
                "inclusion_probability": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "consensus": {"type": "string"},
                "labels": {"type": "array", "minItems": 1, "items": _LABEL},
                "reviewers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "minLength": 1},
                },
                "comparator": {"type": "string"},
                "comparator_version": {"type": "integer"},
                "config_version": {"type": "integer"},
                "flag_version": {"type": ["integer", "null"]},
                "window_start": _STAMP,
                "result_ts": _STAMP,
                "decision": {"enum": ["edge", "cloud"]},
                "served": {"enum": ["edge", "cloud"]},
                "outcome": {"enum": ["agree", "conflict", "invalid", None]},
                "edge_error": {"type": ["string", "null"]},
                "edge_model": {"type": ["string", "null"]},
                "cloud_model": {"type": ["string", "null"]},
                "regression": {
                    "description": "For the regression layer: the rollback that queued it",
                    "type": "object",
                    "required": ["decision_id", "rule", "cell", "window_start", "window_end"],
                    "properties": {
                        "decision_id": {"type": "integer"},
                        "rule": {"type": "string"},
                        "cell": {"type": "string"},
                        "window_start": _STAMP,
                        "window_end": _STAMP,
                    },
                },
            },
            "additionalProperties": False,
        },
    },
}


def schema_bytes() -> bytes:
    """schema.json as exported (and as the repository's evalsets/schema.json holds it)."""
    import json

    return (json.dumps(SCHEMA, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()

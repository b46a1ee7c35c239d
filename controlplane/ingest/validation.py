"""Validating posted results: a body is one result or `{"results": [...]}`, and each item is
validated alone, so a bad item is rejected with its index and a reason naming the field and
never sinks the good ones. A batch whose items are all valid is decoded straight from the
bytes (the fast paths: msgspec, then pydantic for what msgspec leaves); any other body takes
the careful path, item by item.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

import msgspec
from msgspec.structs import asdict
from pydantic import TypeAdapter, ValidationError

from controlplane.compare.jsonutil import loads
from controlplane.errors import MAX_PROBLEMS, describe_errors, field_path, first_problems
from controlplane.ingest.schemas import (
    SIDES_POSTED,
    BatchWire,
    Rejected,
    ResultBatch,
    ResultIn,
    consistency_problem,
    holds_surrogate,
    nul_fields,
    repeat_problem,
    surrogate_fields,
)

_BATCH = TypeAdapter(ResultBatch)
_ITEMS = TypeAdapter(list[ResultIn])
_ITEM = TypeAdapter(ResultIn)
_WIRE = msgspec.json.Decoder(BatchWire)
_STAMPS = TypeAdapter(list[datetime | None])


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
        if "request_id" not in body:
            # Neither form: `{}` or a misspelt batch (`{"result": [...]}`) is refused whole,
            # not answered as one result that lacks every field.
            raise BodyError(
                'results: field required (a batch is {"results": [...]}); a body without it '
                "is one result, which needs its request_id"
            )
        return [body]
    items = body["results"]
    if not isinstance(items, list):
        raise BodyError("results: must be a list of result objects")
    if len(items) > max_items:
        raise BodyError(f"results: {len(items)} items, at most {max_items} per request")
    return items


def validate_body(body: bytes, max_items: int) -> tuple[list[tuple[int, ResultIn]], list[Rejected]]:
    """Validated items with their indexes, and the rejected ones; BodyError for a non-result."""
    results = decode_batch(body)
    if results is None:
        return validate_body_pydantic(body, max_items)
    if len(results) > max_items:
        raise BodyError(f"results: {len(results)} items, at most {max_items} per request")
    return _refuse_impossible(list(enumerate(results)), [], check_nul=spells_nul(body))


def spells_nul(body: bytes) -> bool:
    """Whether a JSON body spells the escape `\\u0000`: a NUL character, or text with a
    backslash before "u0000" (the per-item check tells the two apart)."""
    return _NUL_ESCAPE.search(body) is not None


# A compiled literal: about twice as fast as `in` over a 5 MB body of text results (3 against
# 5.3 µs a result), whose digits and escapes defeat the skips of bytes.find.
_NUL_ESCAPE = re.compile(rb"\\u0000")


# The deepest a JSON value inside a result (an output, a value of the input) may nest on
# msgspec's path. pydantic's parser refuses a body nested deeper than 200 and msgspec reads
# deeper: far below that bound, a body msgspec takes is one pydantic takes too.
_WIRE_DEPTH = 63
_SCALARS = frozenset({str, int, float, bool, type(None)})


def decode_batch(body: bytes) -> list[ResultIn] | None:
    """A batch of valid results decoded by msgspec, the same dicts pydantic's fast path gives
    (defaults filled, keys in order, `ts` by pydantic's parser); None for any body it does
    not take that way (a single result, a lax value, an unknown field, a bad item...)."""
    try:
        wire = _WIRE.decode(body).results
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    results: list[Any] = []
    stamps = []
    for raw in wire:
        item = asdict(raw)
        for side_name in SIDES_POSTED:
            side = item[side_name]
            if side is not None:
                side = item[side_name] = asdict(side)
                output = side["output"]
                if type(output) not in _SCALARS and _nests_deeper(output):
                    return None
        given = item["input"]
        if given is not None:
            given = item["input"] = {"text": None, "segments": None, **given}
            segments = given["segments"]
            if segments is not None and not (
                type(segments) is list and all(type(n) is int for n in segments)
            ):
                return None  # pydantic would coerce, or refuse: let it decide
            for value in given.values():
                if type(value) not in _SCALARS and _nests_deeper(value):
                    return None
        results.append(item)
        stamps.append(item["ts"])
    try:
        times = _STAMPS.validate_python(stamps)
    except ValidationError:
        return None
    for item, ts in zip(results, times, strict=True):
        item["ts"] = ts
    return results


def _nests_deeper(value: Any, limit: int = _WIRE_DEPTH) -> bool:
    """Whether lists and objects inside a JSON value (an output, or a value of the input)
    nest more than `limit` levels deep."""
    stack = [(value, 1)]
    while stack:
        inner, depth = stack.pop()
        if depth > limit:
            return True
        if type(inner) is dict:
            stack.extend((v, depth + 1) for v in inner.values() if type(v) not in _SCALARS)
        elif type(inner) is list:
            stack.extend((v, depth + 1) for v in inner if type(v) not in _SCALARS)
    return False


def validate_body_pydantic(
    body: bytes, max_items: int
) -> tuple[list[tuple[int, ResultIn]], list[Rejected]]:
    """`validate_body` for the bodies msgspec leaves: pydantic's fast path, then the careful one."""
    try:
        # Fast path: a batch where every item is valid, validated straight from the bytes.
        # (Its parser refuses lone surrogates and nesting deeper than 200.)
        results = _BATCH.validate_json(body)["results"]
    except ValidationError:
        pass  # a single result, a bad item, or not a result at all: the careful path decides
    else:
        if len(results) > max_items:
            raise BodyError(f"results: {len(results)} items, at most {max_items} per request")
        return _refuse_impossible(list(enumerate(results)), [], check_nul=spells_nul(body))
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
        errors = exc.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]
        return "; ".join(
            first_problems(
                [f"{'.'.join(field_path(e['loc'])) or '(result)'}: {e['msg']}" for e in errors],
                exc.error_count(),
            )
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
        elif repeated := repeat_problem(item):
            error = f"cloud_repeat: {repeated}"
        elif check_nul and (fields := nul_fields(item)):
            error = "; ".join(f"{f}: must not contain the NUL character" for f in fields)
        else:
            kept.append((index, item))
            continue
        bad.append(Rejected(index=index, request_id=_request_id(item), error=error))
    bad.sort(key=lambda r: r.index)
    return kept, bad

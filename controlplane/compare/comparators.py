"""Comparators: pure functions judging the edge output against the cloud output
(docs/evidence.md, "Comparators"), and the registry that maps a config's `kind` to one.

Each returns `agree`, `conflict` or `invalid`, a diff and its version. The cloud output is
the reference, so a reference that breaks the schema makes a `conflict`: evidence never
leans towards the edge. What is read is bounded (`max_chars`, `MAX_DEPTH`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from controlplane.compare import conservation, native
from controlplane.compare.jsonutil import dumps, loads, short_repr
from controlplane.compare.redaction import MAX_CHARS as MAX_CHARS

Outcome = Literal["agree", "conflict", "invalid"]
# Bodies are at most 64 deep (controlplane.http); deeper JSON text inside an output would
# otherwise reach the parser's and canonical()'s recursion.
MAX_DEPTH = 64
_TOO_DEEP = f"JSON nested deeper than {MAX_DEPTH} levels"


@dataclass(frozen=True, slots=True)
class Comparison:
    # None: not compared (an output longer than max_chars); the diff says why.
    outcome: Outcome | None
    diff: dict[str, Any] | None
    version: int


@dataclass(frozen=True, slots=True)
class Comparator:
    kind: str
    version: int
    compare: Callable[[Mapping[str, Any], Any, Any], Comparison]


REGISTRY: dict[str, Comparator] = {}


def register(kind: str, version: int) -> Callable[[Callable[..., Comparison]], Comparator]:
    def wrap(fn: Callable[..., Comparison]) -> Comparator:
        comparator = Comparator(kind=kind, version=version, compare=fn)
        REGISTRY[kind] = comparator
        return comparator

    return wrap


def compare(
    spec: Mapping[str, Any], edge: Any, cloud: Any, *, max_chars: int = MAX_CHARS
) -> Comparison:
    """Compare with the comparator the task's config names (`spec["kind"]`); an output
    string longer than `max_chars` is not compared (outcome None, `too_long` in the diff)."""
    comparator = REGISTRY[spec["kind"]]
    if too_long := _too_long(edge, cloud, max_chars):
        return Comparison(None, {"too_long": too_long}, comparator.version)
    return comparator.compare(spec, edge, cloud)


def _too_long(edge: Any, cloud: Any, max_chars: int) -> dict[str, int | None] | None:
    # Only the outputs that are strings: text, labels and the JSON text json_fields parses
    # are where reading costs grow with size; parsed JSON values came through the body
    # parser, whose limits already hold.
    e = len(edge) if isinstance(edge, str) else None
    c = len(cloud) if isinstance(cloud, str) else None
    if (e is None or e <= max_chars) and (c is None or c <= max_chars):
        return None
    return {"edge": e, "cloud": c, "max_chars": max_chars}


def comparator_version(kind: str) -> int:
    return REGISTRY[kind].version


def _invalid(edge_problem: Any, cloud_problem: Any) -> Comparison:
    """An invalid edge output: its problem, and the cloud's when the reference is unusable
    too. Both are read, so the diff of two invalid answers names each of them, not only
    the one read first (a blind diff naming one would tell which was the edge's)."""
    diff = {"edge": edge_problem}
    if cloud_problem:
        diff["cloud"] = cloud_problem
    return Comparison("invalid", diff, 1)


# --- label -------------------------------------------------------------------------


def normalise_label(value: Any) -> str | None:
    """Case- and space-normalised label, or None when the value is not a usable label."""
    if not isinstance(value, str):
        return None
    label = " ".join(value.split()).casefold()
    return label or None


@lru_cache(maxsize=256)
def _allowed_labels(labels: tuple[str, ...]) -> frozenset[str]:
    return frozenset(normalise_label(x) or "" for x in labels)


def _label_problem(value: Any, label: str | None, allowed: frozenset[str] | None) -> str | None:
    if label is None:
        return f"not a non-empty string label: {short_repr(value)}"
    if allowed is not None and label not in allowed:
        return f"label {label!r} is not one of {sorted(allowed)}"
    return None


@register("label", version=1)
def compare_label(spec: Mapping[str, Any], edge: Any, cloud: Any) -> Comparison:
    labels = spec.get("labels")
    allowed = _allowed_labels(tuple(labels)) if labels else None
    e, c = normalise_label(edge), normalise_label(cloud)
    e_problem, c_problem = _label_problem(edge, e, allowed), _label_problem(cloud, c, allowed)
    if e_problem:
        return _invalid(e_problem, c_problem)
    if c_problem:
        return Comparison("conflict", {"cloud": c_problem}, 1)
    if e == c:
        return Comparison("agree", None, 1)
    return Comparison("conflict", {"label": {"edge": e, "cloud": c}}, 1)


# --- exact -------------------------------------------------------------------------


def canonical(value: Any, _depth: int = 0) -> Any:
    """JSON value with integral floats as ints, so 1 and 1.0 compare equal; ValueError
    when it is nested deeper than MAX_DEPTH levels."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        # Integral floats below 2**53 are exact integers: 1.0 is 1. Larger ones stay floats.
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, dict | list | tuple) and _depth >= MAX_DEPTH:
        raise ValueError(_TOO_DEEP)
    if isinstance(value, dict):
        return {str(k): canonical(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v, _depth + 1) for v in value]
    return value


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether a JSON value nests more than `limit` arrays and objects (read without
    recursion, so any depth is safe)."""
    stack = [(value, 0)] if isinstance(value, dict | list | tuple) else []
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list | tuple))
    return False


# A JSON text's strings and brackets: a string runs to its closing quote or to the end (so
# an unclosed one is read once, not once from each quote inside it).
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[{]|[\]}]')


def text_too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether a JSON text nests more than `limit` arrays and objects, outside strings."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        mark = token.group()[0]
        if mark in "[{":
            depth += 1
            if depth > limit:
                return True
        elif mark in "]}":
            depth -= 1
    return False


def canonical_json(value: Any) -> bytes:
    return dumps(canonical(value), sort_keys=True)


def _differing_paths(a: Any, b: Any, path: str, out: list[str], limit: int = 20) -> None:
    # Recursion is bounded: a and b came out of canonical(), at most MAX_DEPTH deep.
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(sub)
            else:
                _differing_paths(a[key], b[key], sub, out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _differing_paths(x, y, f"{path}[{i}]", out, limit)
    elif a != b:
        out.append(path or "$")


@register("exact", version=1)
def compare_exact(spec: Mapping[str, Any], edge: Any, cloud: Any) -> Comparison:
    try:
        c, c_problem = canonical(cloud), None
    except ValueError as error:
        c, c_problem = None, str(error)
    try:
        e = canonical(edge)
    except ValueError as error:
        return _invalid(str(error), c_problem)
    if c_problem:
        return Comparison("conflict", {"cloud": c_problem}, 1)
    if canonical_json(e) == canonical_json(c):
        return Comparison("agree", None, 1)
    paths: list[str] = []
    _differing_paths(e, c, "", paths)
    return Comparison("conflict", {"paths": paths}, 1)


# --- json_fields -------------------------------------------------------------------

FIELD_TYPES = ("string", "number", "integer", "boolean", "array", "object")


def _is_type(value: Any, type_name: str) -> bool:
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "number":
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (not isinstance(value, float) or math.isfinite(value))
        )
    if type_name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "object":
        return isinstance(value, dict)
    raise ValueError(f"unknown field type {type_name!r}")


def _as_object(value: Any) -> tuple[dict[str, Any] | None, str]:
    """LLM outputs often arrive as JSON text: accept an object or a string holding one.
    Returns the object, or None and what is wrong."""
    obj = value
    if isinstance(value, str):
        if text_too_deep(value):
            return None, _TOO_DEEP  # json.loads would recurse once per level
        try:
            obj = loads(value)
        except ValueError:
            obj = None
    if not isinstance(obj, dict):
        return None, f"not a JSON object: {short_repr(value)}"
    if too_deep(obj):
        return None, _TOO_DEEP
    return obj, ""


def _schema_problems(
    obj: dict[str, Any], fields: Mapping[str, str], required: list[str]
) -> list[str]:
    problems = [f"missing required field {name!r}" for name in required if obj.get(name) is None]
    for name, type_name in fields.items():
        value = obj.get(name)
        if value is not None and not _is_type(value, type_name):
            problems.append(f"field {name!r} should be {type_name}, got {short_repr(value)}")
    return problems


def _field_equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return " ".join(a.split()) == " ".join(b.split())
    return canonical_json(a) == canonical_json(b)


@register("json_fields", version=1)
def compare_json_fields(spec: Mapping[str, Any], edge: Any, cloud: Any) -> Comparison:
    fields: Mapping[str, str] = spec["fields"]
    required: list[str] = list(spec.get("required") or [])
    (e, e_problem), (c, c_problem) = _as_object(edge), _as_object(cloud)
    e_problems = [e_problem] if e is None else _schema_problems(e, fields, required)
    c_problems = [c_problem] if c is None else _schema_problems(c, fields, required)
    if e_problems:
        return _invalid(e_problems, c_problems)
    if c_problems:
        return Comparison("conflict", {"cloud": c_problems}, 1)
    assert e is not None and c is not None  # else its problems were named above
    differing = {
        name: {"edge": e.get(name), "cloud": c.get(name)}
        for name in fields
        if not _field_equal(e.get(name), c.get(name))
    }
    if not differing:
        return Comparison("agree", None, 1)
    return Comparison("conflict", {"fields": differing}, 1)


# --- text_conservation -----------------------------------------------------------------

DEFAULT_LENGTH_RATIO = (0.7, 1.4)


def _text_problem(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return None
    return f"not a non-empty text: {short_repr(value)}"


# What a failed check lists: every item of each side, and what the edge misses or adds.
SIDES = ("edge", "cloud", "missing", "extra")


def multiset_diff(
    edge: Counter[str], cloud: Counter[str]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The SIDES of two multisets, each sorted (the compiled reader's in one walk)."""
    return (
        sorted(edge.elements()),
        sorted(cloud.elements()),
        sorted((cloud - edge).elements()),
        sorted((edge - cloud).elements()),
    )


def set_diff(
    edge: frozenset[str], cloud: frozenset[str]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The SIDES of two sets, each sorted (the compiled reader's in one walk)."""
    return sorted(edge), sorted(cloud), sorted(cloud - edge), sorted(edge - cloud)


def _same_counts(a: Counter[str], b: Counter[str]) -> bool:
    """Counter equality (a missing key counts as zero), tried as dict equality first, in C:
    counts read from a text hold no zeros, so equal readings are equal dicts (Counter's own
    == walks both in Python, 10x the time)."""
    return dict.__eq__(a, b) is True or a == b


@register("text_conservation", version=1)
def compare_text_conservation(spec: Mapping[str, Any], edge: Any, cloud: Any) -> Comparison:
    """A rewrite agrees when it conserves sentences, length, negations, numbers and names."""
    e_problem, c_problem = _text_problem(edge), _text_problem(cloud)
    if e_problem:
        return _invalid(e_problem, c_problem)
    if c_problem:
        return Comparison("conflict", {"cloud": c_problem}, 1)
    lo, hi = spec.get("length_ratio") or DEFAULT_LENGTH_RATIO
    e, c = conservation.read(edge), conservation.read(cloud)
    diff: dict[str, Any] = {}
    if e.sentences != c.sentences:
        diff["sentences"] = {"edge": e.sentences, "cloud": c.sentences}
    ratio = e.length / c.length if c.length else (1.0 if not e.length else math.inf)
    if not lo <= ratio <= hi:
        diff["length_ratio"] = {
            "edge": e.length,
            "cloud": c.length,
            "ratio": round(ratio, 3) if math.isfinite(ratio) else None,
            "bounds": [lo, hi],
        }
    compiled = native.READER
    for name, edge_set, cloud_set in (
        ("negations", e.negations, c.negations),
        ("numbers", e.numbers, c.numbers),
    ):
        if name == "negations":
            # Compared by count per language: a rewrite may trade 没有 for 暂无, or "no" for
            # "not"; dropping or adding one changes the count. The diff shows the words.
            # The same words are the same counts: most pairs need no count.
            same = _same_counts(edge_set, cloud_set) or (
                conservation.negation_counts(edge_set) == conservation.negation_counts(cloud_set)
            )
        else:
            same = _same_counts(edge_set, cloud_set)
        if not same:
            lists = (compiled.multiset_diff if compiled is not None else multiset_diff)(
                edge_set, cloud_set
            )
            diff[name] = dict(zip(SIDES, lists, strict=True))
    if e.spans != c.spans:
        lists = (compiled.set_diff if compiled is not None else set_diff)(e.spans, c.spans)
        diff["spans"] = dict(zip(SIDES, lists, strict=True))
    if not diff:
        return Comparison("agree", None, 1)
    return Comparison("conflict", {"failed": list(diff), **diff}, 1)

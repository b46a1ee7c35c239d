"""Fingerprints: what a comparator compares, kept as keyed digests instead of the text, so an
output stored under any payload policy can later be scored against a second answer to the
same input (a free repeat pair). Also the normalised input identity those pairs are found
by, and how a comparison of two cloud answers reads as a repeat outcome. Pure.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from controlplane.compare import conservation, native
from controlplane.compare.comparators import (
    DEFAULT_LENGTH_RATIO,
    MAX_CHARS,
    Comparison,
    _allowed_labels,
    _as_object,
    _schema_problems,
    canonical,
    canonical_json,
    normalise_label,
)
from controlplane.compare.jsonutil import dumps
from controlplane.compare.streamsafe import stream_safe

# Hex digits kept of each keyed digest: 64 bits, so two different values share one with a
# probability near 5e-20; a print never needs more, and stays small in every row.
DIGEST_CHARS = 16
# Hex digits of an input hash (the results column is 32 characters wide).
INPUT_HASH_CHARS = 32
# The text_conservation checks, named as the comparator names them in `failed`.
CHECKS = ("sentences", "length_ratio", "negations", "numbers", "spans")


# --- input identity --------------------------------------------------------------------


def normalise_text(text: str) -> str:
    """NFKC, whitespace runs collapsed to one space, trimmed (by the compiled reader when
    it runs: NFKC only where a character needs it, see _normal.pyx)."""
    reader = native.READER
    if reader is not None:
        return reader.normal(text if type(text) is str else str.__str__(text))
    return normalise_text_python(text)


def normalise_text_python(text: str) -> str:
    """The reference: NFKC (of the text made stream-safe: a run of more than 30 combining
    marks cut, so NFKC takes time linear in it), whitespace runs collapsed to one space,
    trimmed."""
    return " ".join(unicodedata.normalize("NFKC", stream_safe(text)).split())


def input_identity(value: Any) -> bytes | None:
    """The bytes an input is known by: a string normalised, an input object as canonical
    JSON with its `text` string normalised; None when there is nothing to know it by."""
    # Text that is empty or only whitespace is no text: every such input would look alike.
    if isinstance(value, str):
        return normalise_text(value).encode() or None
    if not isinstance(value, Mapping):
        return None if value is None else canonical_json(value)
    held = {k: v for k, v in value.items() if v is not None}
    text = held.get("text")
    if isinstance(text, str):
        held["text"] = normalise_text(text)
        if not held["text"]:
            del held["text"]
    if not held.keys() - {"segments"}:
        return None  # no text and nothing else: every such input would look alike
    if isinstance(held.get("text"), str):
        if len(held) == 1:  # the usual input: its canonical JSON needs no walk
            return dumps(held)
    return canonical_json(held)


def input_hash(key: bytes, value: Any) -> str | None:
    """Keyed hash (HMAC-SHA256, 32 hex digits) of an input's identity: equal for inputs
    that differ only in spacing or Unicode compatibility forms, and reveals nothing of them."""
    identity = input_identity(value)
    if identity is None:
        return None
    return keyed_hex(key, identity)[:INPUT_HASH_CHARS]


@lru_cache(maxsize=16)
def _pads(key: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's inner and outer hash states for a key (RFC 2104), made once per key:
    each digest copies them, every step a C call (the hmac module's object adds a Python
    layer to each: about half of a short digest's cost)."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))
    return inner, outer


_BLOCK = 64  # SHA-256's block size (bytes)


def keyed_hex(key: bytes, data: bytes) -> str:
    """HMAC-SHA256 of `data` under `key`, in hex (equal to hmac.new(key, data, "sha256")).

    Not `hmac.digest`: OpenSSL 3 looks the algorithm up in its provider store on every
    one-shot call, which costs a few microseconds more in a process with many threads (the
    API's) than these copies of states made once per key."""
    inner, outer = _pads(key)
    state = inner.copy()
    state.update(data)
    result = outer.copy()
    result.update(state.digest())
    return result.hexdigest()


# --- fingerprints ------------------------------------------------------------------------


def _digest(key: bytes, value: Any) -> str:
    return keyed_hex(key, dumps(value, sort_keys=True))[:DIGEST_CHARS]


def spec_digest(spec: Mapping[str, Any]) -> str:
    """Which comparator spec a print was taken under: prints taken under another are not
    compared (a changed field list or label set would make them mean other things)."""
    # A task's spec is one object for as long as its config version is current: its digest
    # is kept by identity (the object is held too, so its id cannot be reused meanwhile).
    cached = _SPEC_DIGESTS.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    digest = hashlib.sha256(canonical_json(dict(spec))).hexdigest()[:DIGEST_CHARS]
    if len(_SPEC_DIGESTS) >= 1024:
        _SPEC_DIGESTS.clear()
    _SPEC_DIGESTS[id(spec)] = (spec, digest)
    return digest


_SPEC_DIGESTS: dict[int, tuple[Mapping[str, Any], str]] = {}


def fingerprint(
    spec: Mapping[str, Any], output: Any, key: bytes, *, max_chars: int = MAX_CHARS
) -> dict[str, Any] | None:
    """Keyed digests of exactly what the spec's comparator compares of this output (the
    normalised label; the canonical JSON; each declared field; each conservation check's
    reading), or `invalid: true` for an output outside the task's schema. None when there
    is no output, or it is longer than the comparator reads."""
    if output is None or (isinstance(output, str) and len(output) > max_chars):
        return None
    kind = spec["kind"]
    # The spec's digest names the comparator too: prints of two kinds are never compared.
    head: dict[str, Any] = {"spec": spec_digest(spec)}
    invalid = {**head, "invalid": True}
    if kind == "label":
        labels = spec.get("labels")
        allowed = _allowed_labels(tuple(labels)) if labels else None
        label = normalise_label(output)
        if label is None or (allowed is not None and label not in allowed):
            return invalid
        return {**head, "label": _digest(key, label)}
    if kind == "exact":
        try:
            value = canonical(output)
        except ValueError:
            return invalid
        return {**head, "value": _digest(key, canonical_json(value).decode())}
    if kind == "json_fields":
        fields: Mapping[str, str] = spec["fields"]
        obj, _ = _as_object(output)
        if obj is None or _schema_problems(obj, fields, list(spec.get("required") or [])):
            return invalid
        return {
            **head,
            "fields": {name: _digest(key, _field_form(obj.get(name))) for name in fields},
        }
    if kind == "text_conservation":
        if not isinstance(output, str) or not output.strip():
            return invalid
        reading = conservation.read(output)
        return {
            **head,
            "sentences": reading.sentences,
            "length": reading.length,
            "negations": _digest(
                key, sorted(conservation.negation_counts(reading.negations).items())
            ),
            "numbers": _digest(key, sorted(reading.numbers.elements())),
            "spans": _digest(key, sorted(reading.spans)),
        }
    raise ValueError(f"no fingerprint for comparator kind {kind!r}")


def _field_form(value: Any) -> list[str]:
    # What the comparator's field equality reads: two strings compare with their spaces
    # collapsed, anything else (a string against a number too) as canonical JSON.
    if isinstance(value, str):
        return ["s", " ".join(value.split())]
    return ["j", canonical_json(value).decode()]


def comparable(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two prints were taken under the same comparator spec."""
    return a.get("spec") is not None and a.get("spec") == b.get("spec")


def compare_prints(
    spec: Mapping[str, Any], reference: Mapping[str, Any], repeat: Mapping[str, Any]
) -> tuple[str, list[str]]:
    """A repeat pair scored from prints: (agree | conflict | invalid, the sorted names of
    the fields or checks that differ), as `repeat_outcome(compare(spec, repeat_output,
    reference_output))` scores it from the outputs. ValueError for prints not comparable."""
    if not comparable(reference, repeat) or reference["spec"] != spec_digest(spec):
        raise ValueError("prints taken under different comparator specs")
    if reference.get("invalid") or repeat.get("invalid"):
        return "invalid", []
    kind = spec["kind"]
    names: list[str]
    if kind == "label":
        return ("agree" if reference["label"] == repeat["label"] else "conflict"), []
    if kind == "exact":
        return ("agree" if reference["value"] == repeat["value"] else "conflict"), []
    if kind == "json_fields":
        ref_fields, rep_fields = reference["fields"], repeat["fields"]
        names = sorted(n for n in spec["fields"] if ref_fields.get(n) != rep_fields.get(n))
    elif kind == "text_conservation":
        lo, hi = spec.get("length_ratio") or DEFAULT_LENGTH_RATIO
        ref_length, rep_length = reference["length"], repeat["length"]
        if ref_length:
            ratio = rep_length / ref_length
        else:
            ratio = 1.0 if not rep_length else math.inf
        names = [
            check
            for check in CHECKS
            if (
                not lo <= ratio <= hi
                if check == "length_ratio"
                else reference[check] != repeat[check]
            )
        ]
    else:
        raise ValueError(f"no fingerprint for comparator kind {kind!r}")
    return ("conflict" if names else "agree"), sorted(names)


# --- a comparison read as a repeat pair ------------------------------------------------------


def repeat_outcome(comparison: Comparison) -> tuple[str, list[str]] | None:
    """A comparison of a repeat (as the compared side) against the cloud answer (as the
    reference) as a repeat pair: invalid when either answer is outside the schema (the
    comparator calls a bad reference a conflict: for the cloud's own noise it is neither
    side's disagreement), else its outcome, with the sorted names of the fields or checks
    that differed. None when it was not compared (an output too long)."""
    outcome, diff = comparison.outcome, comparison.diff
    if outcome is None:
        return None
    if outcome == "invalid" or (diff is not None and "cloud" in diff):
        return "invalid", []
    if outcome == "agree" or diff is None:
        return outcome, []
    if "fields" in diff:
        return outcome, sorted(diff["fields"])
    if "failed" in diff:
        return outcome, sorted(diff["failed"])
    return outcome, []

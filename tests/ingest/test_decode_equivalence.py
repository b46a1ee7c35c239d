"""msgspec's fast path (`decode_batch`) answers every body exactly as pydantic's paths did:
the same accepted results (same keys in the same order, same types, the same datetimes with
the same tzinfo), the same rejections (index, request id, message), the same 422s. Fed the
hostile families of step 5 and the values where the two libraries differ."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.compare.jsonutil import dumps
from controlplane.ingest.validation import (
    _BATCH,
    BodyError,
    decode_batch,
    validate_body,
    validate_body_pydantic,
)
from tests.conftest import make_result
from tests.ingest.test_ingest_fuzz import FIELDS, json_values


def shape(value: Any) -> Any:
    """A value with everything equality forgets spelt out: key order, int vs float, -0.0,
    a datetime's tzinfo class and offset."""
    if type(value) is dict:
        return ["dict", *[(k, shape(v)) for k, v in value.items()]]
    if type(value) is list:
        return ["list", *[shape(v) for v in value]]
    if isinstance(value, datetime):
        return ["datetime", value.isoformat(), type(value.tzinfo).__name__, value.utcoffset()]
    if type(value) is float:
        return ["float", repr(value)]
    return [type(value).__name__, value]


def answer(decode: Any, body: bytes, max_items: int) -> Any:
    try:
        good, bad = decode(body, max_items)
    except BodyError as exc:
        return ["422", str(exc)]
    return [
        [(index, shape(item)) for index, item in good],
        [(r.index, r.request_id, r.error) for r in bad],
    ]


def assert_same_answers(body: bytes, max_items: int = 1000) -> list[Any] | None:
    """Both decoders answer alike; what msgspec takes, pydantic's fast path takes alike too."""
    assert answer(validate_body, body, max_items) == answer(validate_body_pydantic, body, max_items)
    taken = decode_batch(body)
    if taken is not None:
        assert shape(taken) == shape(_BATCH.validate_json(body)["results"])
    return taken


# Raw JSON spellings (they go into the body as written): where JSON parsers, pydantic's
# lax mode and msgspec's strict one part ways. Step 5's hostile values come first.
HOSTILE = [
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "-Infinity",
    '"ok \\ud800 ok"',
    '"s-\\udc00"',
    '"\\ud800\\ud800"',
    "1" + "0" * 5000,
    "9" * 4300,
    "-" + "9" * 4300,
    '"a\\u0000b"',
    "[" * 5000 + "]" * 5000,
    '"\\ud83d\\ude00 a pair"',
    "123456789012345678901234567890",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "1" * 400 + ".5",
    "-0",
    "-0.0",
    "0",
    "1",
    "1.0",
    "0.5",
    "1e2",
    "2147483647",
    "2147483648",
    "-1",
    "true",
    "false",
    "null",
    '""',
    '"12"',
    '"1.5"',
    '"true"',
    '"edge"',
    '"Edge"',
    '"cloud"',
    "[]",
    "{}",
    "[1, 2.0]",
    '[1, "2"]',
    "[true]",
    '{"a": 1, "a": 2}',
    '"\\u00e9\\/\\n\\t"',
    '"' + "😀" * 64 + '"',
    '"' + "😀" * 65 + '"',
    '"' + "😀" * 200 + '"',
    '"' + "😀" * 201 + '"',
    *[("[" * depth + "]" * depth) for depth in (62, 63, 64, 65, 150, 195, 196, 200, 201, 300)],
    *[('{"a":' * depth + "1" + "}" * depth) for depth in (63, 64, 65, 199)],
]
TIMES = [
    "2026-11-30T02:00:00Z",
    "2026-11-30T02:00:00+00:00",
    "2026-11-30T02:00:00-05:30",
    "2026-11-30T02:00:00+14:00",
    "2026-11-30T02:00:00+24:00",
    "2026-11-30 02:00:00Z",
    "2026-11-30t02:00:00z",
    "2026-11-30T02:00:00",
    "2026-11-30T02:00",
    "2026-11-30",
    "2026-11-30T02:00:00.1234567891Z",
    "2026-11-30T02:00:00,5Z",
    "2026-11-30T02:00:60Z",
    "2026-11-30T24:00:00Z",
    "2026-02-30T00:00:00Z",
    "9999-12-31T23:59-01:00",
    "0001-01-01T00:00:00+01:00",
    "1700000000",
    "1700000000.5",
    "-1",
    "",
    "now",
]
SIDE_FIELDS = [
    "output",
    "error",
    "error_message",
    "latency_ms",
    "ttfb_ms",
    "model",
    "input_tokens",
    "output_tokens",
    "cost",
    "confidence",
    "valid",
]
SIDES = ["edge", "cloud", "cloud_repeat"]
# Invalid UTF-8 (a lone byte, an encoded surrogate), put into the body where a string was.
BAD_BYTES = [b'"\xff"', b'"\xed\xa0\x80"', b'"\xc0\xaf"']


@st.composite
def raw_items(draw: st.DrawFn) -> bytes:
    """One posted result as raw JSON: a valid one, then up to three mutations: step 5's
    mangling (fields removed or replaced by any JSON), hostile spellings anywhere (fields,
    sides, input, outputs, unknown fields), other times, duplicate keys, bad UTF-8."""
    request_ids = ["r-1", "r-2", "r-1", "r-3", "😀" * 200, "a\x00b", "😀" * 201, ""]
    result = make_result(request_id=draw(st.sampled_from(request_ids)))
    if draw(st.booleans()):
        result["cloud_repeat"] = {"output": "refund", "latency_ms": 400}
    raws: dict[str, bytes] = {}

    def hostile() -> str:
        placeholder = f"@R{len(raws)}@"
        if draw(st.sampled_from([False] * 9 + [True])):
            raws[placeholder] = draw(st.sampled_from(BAD_BYTES))
        else:
            raws[placeholder] = draw(st.sampled_from(HOSTILE)).encode()
        return placeholder

    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))):
        kind = draw(st.integers(0, 7))
        if kind == 0:  # step 5: a field removed or replaced by arbitrary JSON
            name = draw(st.sampled_from(FIELDS))
            if draw(st.booleans()):
                result.pop(name, None)
            else:
                result[name] = draw(json_values)
        elif kind == 1:
            result[draw(st.sampled_from([*FIELDS, "cloud_repeat"]))] = hostile()
        elif kind == 2:
            side = result.get(draw(st.sampled_from(SIDES)))
            if isinstance(side, dict):
                side[draw(st.sampled_from(SIDE_FIELDS))] = draw(
                    st.one_of(json_values, st.builds(hostile))
                )
        elif kind == 3:
            result["ts"] = draw(st.sampled_from(TIMES))
        elif kind == 4:  # the input: text, segments, kept unknown fields (their order)
            value = draw(st.one_of(json_values, st.builds(hostile)))
            key = draw(st.sampled_from(["text", "segments", "zeta", "alpha", "a"]))
            if isinstance(result.get("input"), dict):
                result["input"][key] = value
        elif kind == 5:  # an unknown field: on the result or a side
            target = result.get(draw(st.sampled_from(SIDES))) if draw(st.booleans()) else result
            if isinstance(target, dict):
                target["zz_unknown"] = draw(st.one_of(json_values, st.builds(hostile)))
        elif kind == 6:  # numbers where the contract has counts and measures
            number = draw(st.one_of(st.integers(), st.floats(allow_nan=False)))
            result[draw(st.sampled_from(["input_tokens", "flag_version"]))] = (
                number if number not in (float("inf"), float("-inf")) else hostile()
            )
        else:  # a text field at its limits, astral characters, NUL, empty
            text = draw(st.sampled_from(["", "x" * 200, "x" * 201, "😀" * 100, "e\x00", "ok"]))
            name = draw(st.sampled_from(["session_id", "user_id", "degrade_reason", "skipped"]))
            if name == "skipped":  # a skipped side's reason, the side maybe carried too
                side = draw(st.sampled_from([*SIDES, "repeat"]))
                result["skipped"] = {side: text if draw(st.booleans()) else hostile()}
            else:
                result[name] = text
    body = dumps(result)
    twice = draw(st.sampled_from([False] * 4 + [True]))
    if twice:  # a key given twice: the later one counts, in both
        name = draw(st.sampled_from(["request_id", "input_tokens", "served", "edge", "ts"]))
        value = draw(st.one_of(json_values.map(dumps), st.just(b'"@D@"')))
        if value == b'"@D@"':
            value = draw(st.sampled_from(HOSTILE)).encode()
        body = body[:-1] + b',"' + name.encode() + b'":' + value + b"}"
    for placeholder, raw in raws.items():
        body = body.replace(dumps(placeholder), raw)
    return body


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    items = draw(st.lists(raw_items(), min_size=1, max_size=3))
    body = draw(st.sampled_from(["batch"] * 8 + ["single", "batch with a note"]))
    if body == "single":
        return items[0]
    if body == "batch with a note":
        return b'{"note": 1, "results": [' + b",".join(items) + b"]}"
    return b'{"results": [' + b",".join(items) + b"]}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_bodies(), st.sampled_from([1000, 1000, 1000, 2]))
def test_hostile_batches_get_the_same_answers(body: bytes, max_items: int) -> None:
    assert_same_answers(body, max_items)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "latency_ms": st.one_of(
                    st.floats(min_value=0, allow_infinity=False), st.integers(0, 10**30)
                ),
                "confidence": st.floats(0, 1),
                "output": json_values,
                "model": st.text(max_size=200),
            }
        ),
        min_size=1,
        max_size=4,
    ),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
def test_valid_batches_are_taken_by_msgspec_and_decoded_alike(
    edges: list[dict[str, Any]], extra_input: dict[str, Any]
) -> None:
    items = [
        make_result(
            request_id=f"r-{i}",
            edge=edge,
            input={**extra_input, "text": "hi", "segments": [0, 2**70]},
        )
        for i, edge in enumerate(edges)
    ]
    body = dumps({"results": items})
    assert assert_same_answers(body) is not None  # taken by msgspec, and alike


def nested(depth: int) -> list[Any]:
    """A list inside a list... `depth` levels in all."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


TAKEN = {
    "ints for measures become floats": {"edge": {"output": "a", "latency_ms": 12, "cost": 0}},
    "a measure beyond 64 bits": {"cloud": {"output": "a", "latency_ms": 10**25}},
    "minus zero": {"cloud": {"output": -0.0, "cost": -0.0}},
    "an output nested 63 deep": {"cloud": {"output": nested(63)}},
    "input fields it does not know, in their order": {"input": {"z": 1, "text": "t", "a": [1]}},
    "offsets and naive times": {"ts": "2026-11-30T02:00:00-05:30"},
    "a naive time": {"ts": "2026-11-30T02:00:00"},
    "a NUL in a text field (rejected after decoding)": {"session_id": "s\x00"},
    "an impossible result (rejected after decoding)": {"served": "edge", "edge": None},
    "the sides a client skipped": {"edge": None, "served": "cloud", "skipped": {"edge": "busy"}},
    "no side skipped": {"skipped": {}},
    "a side skipped and carried (rejected after decoding)": {"skipped": {"cloud": "busy"}},
    "a NUL in a skipped side's reason (rejected after decoding)": {
        "skipped": {"cloud_repeat": "a\x00"}
    },
}
LEFT = {
    "a count sent as a string": {"input_tokens": "300"},
    "a count sent as a float": {"input_tokens": 300.0},
    "a boolean sent as a number": {"degraded": 0},
    "an unknown field": {"note": "from a newer router"},
    "segments as floats": {"input": {"text": "t", "segments": [1.0]}},
    "a time as a number": {"ts": 1700000000},
    "a time as digits": {"ts": "1700000000"},
    "a bare date": {"ts": "2026-11-30"},
    "a count sent as a boolean": {"input_tokens": True},
    "a boolean sent as a string": {"degraded": "false"},
    "a measure sent as a string": {"cloud": {"output": "a", "latency_ms": "12"}},
    "an output nested 64 deep": {"cloud": {"output": nested(64)}},
    "a side skipped that no result has": {"skipped": {"repeat": "busy"}},
    "a skipped side's reason too long": {"skipped": {"cloud_repeat": "x" * 1001}},
    "skipped as a list": {"skipped": ["edge"]},
}


@pytest.mark.parametrize("overrides", TAKEN.values(), ids=TAKEN.keys())
def test_these_are_taken_by_msgspec(overrides: dict[str, Any]) -> None:
    body = dumps({"results": [make_result(request_id="r", **overrides), make_result()]})
    assert assert_same_answers(body) is not None


@pytest.mark.parametrize("overrides", LEFT.values(), ids=LEFT.keys())
def test_these_are_left_to_pydantic(overrides: dict[str, Any]) -> None:
    body = dumps({"results": [make_result(request_id="r", **overrides), make_result()]})
    assert assert_same_answers(body) is None


# A value of another JSON type than the contract gives, which pydantic's lax mode would
# convert and store (a boolean or a string for a count or a measure, a string for a
# boolean, a number or a bare date for a time): rejected alone, its field named first.
OTHER_TYPES = [
    ("ts", {"ts": "2026-11-30"}),
    ("ts", {"ts": 1795996800}),
    ("ts", {"ts": "1795996800"}),
    ("input_tokens", {"input_tokens": True}),
    ("input_tokens", {"input_tokens": "300"}),
    ("flag_version", {"flag_version": "3"}),
    ("degraded", {"degraded": "false"}),
    ("degraded", {"degraded": 0}),
    ("edge.valid", {"edge": {"output": "a", "valid": "true"}}),
    ("edge.confidence", {"edge": {"output": "a", "confidence": True}}),
    ("cloud.latency_ms", {"cloud": {"output": "a", "latency_ms": "12.5"}}),
    ("cloud.output_tokens", {"cloud": {"output": "a", "output_tokens": False}}),
    ("input.segments.0", {"input": {"text": "t", "segments": ["1"]}}),
]


@pytest.mark.parametrize(("field", "overrides"), OTHER_TYPES, ids=repr)
def test_a_value_of_another_json_type_is_rejected_naming_its_field(
    field: str, overrides: dict[str, Any]
) -> None:
    good = make_result(request_id="good")
    body = dumps({"results": [good, make_result(request_id="r", **overrides)]})
    assert assert_same_answers(body) is None
    kept, rejected = validate_body(body, 1000)
    assert [i for i, _ in kept] == [0]
    ((index, request_id, error),) = [(r.index, r.request_id, r.error) for r in rejected]
    assert (index, request_id) == (1, "r")
    assert error.startswith(f"{field}: "), error
    assert "valid" in error or "not a date-time" in error, error


# Every bound of the contract, at it and one past it, on a result and on each side.
LONG = {n: "x" * n for n in (64, 65, 100, 101, 200, 201)}
COUNTS = [-1, 0, 2**31 - 1, 2**31, 2**63, 2**64]
MEASURES = [-0.0, -5e-324, 0, 1.7976931348623157e308, 10**308, 10**309]
RESULT_BOUNDS = [
    *[("request_id", v) for v in ["", LONG[200], LONG[201], "😀" * 200, "😀" * 201]],
    *[("task", v) for v in ["", LONG[100], LONG[101]]],
    *[
        (f, v)
        for f in ("session_id", "user_id", "degrade_reason")
        for v in ["", LONG[200], LONG[201]]
    ],
    *[(f, v) for f in ("input_tokens", "flag_version") for v in [*COUNTS, None]],
    *[(f, v) for f in ("decision", "served") for v in ["edge", "cloud", "shadow", "EDGE", None]],
    *[("degraded", v) for v in [True, False, None, 1, "true"]],
    *[("input", v) for v in [None, {}, [], "text", {"segments": None}, {"segments": []}]],
    *[(side, v) for side in ("edge", "cloud", "cloud_repeat") for v in [None, {}, [], "x"]],
]
SIDE_BOUNDS = [
    *[("error", v) for v in ["", LONG[64], LONG[65], "😀" * 64, "😀" * 65, None]],
    *[("model", v) for v in ["", LONG[200], LONG[201]]],
    *[("error_message", v) for v in ["", LONG[201], 1]],
    *[(f, v) for f in ("latency_ms", "ttfb_ms", "cost") for v in MEASURES],
    *[(f, v) for f in ("input_tokens", "output_tokens") for v in COUNTS],
    *[("confidence", v) for v in [-0.0, 0, 1, 1.0000000000000002, -5e-324, True]],
    *[("valid", v) for v in [True, False, None, 1, "false"]],
]


def short(value: Any) -> str:
    return repr(value)[:24]


@pytest.mark.parametrize(("field", "value"), RESULT_BOUNDS, ids=short)
def test_each_bound_of_a_result_is_answered_alike(field: str, value: Any) -> None:
    body = dumps({"results": [make_result(**{"request_id": "r", field: value}), make_result()]})
    assert_same_answers(body)


@pytest.mark.parametrize("side", ["edge", "cloud"])
@pytest.mark.parametrize(("field", "value"), SIDE_BOUNDS, ids=short)
def test_each_bound_of_a_side_is_answered_alike(side: str, field: str, value: Any) -> None:
    result = make_result(request_id="r", cloud_repeat={"output": "refund"})
    result[side][field] = value
    assert_same_answers(dumps({"results": [result]}))


@pytest.mark.parametrize("raw", [b'"\xff\xfe"', b'"\xed\xa0\x80"'], ids=["not-utf8", "surrogate"])
@pytest.mark.parametrize("where", ["result", "edge", "cloud", "cloud_repeat", "input"])
def test_bytes_that_are_not_utf8_in_an_unknown_field_are_answered_alike(
    where: str, raw: bytes
) -> None:
    """Unknown fields are ignored, but a body holding bytes that are not UTF-8 is no JSON
    wherever they stand: both paths refuse it whole, at every level an unknown field can be."""
    result = make_result(request_id="r", cloud_repeat={"output": "refund"})
    target = result if where == "result" else result[where]
    target["unknown_field"] = "PLACEHOLDER"
    body = dumps({"results": [result, make_result()]}).replace(b'"PLACEHOLDER"', raw)
    assert raw in body
    assert_same_answers(body)
    assert decode_batch(body) is None

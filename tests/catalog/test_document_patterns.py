"""The task config's single-field rules as the OpenAPI document states them (patterns,
bounds) agree with what the server accepts, value by value, under both validators that read
the document: jsonschema (the server's own `_converted` check) and jsonschema_rs (the one
schemathesis judges with)."""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from controlplane.catalog.schemas import (
    GRADING_SPAN_PATTERN,
    SPAN_SCHEMA,
    GradingConfig,
    Rule,
    whole_numbers,
)


def test_whole_numbers_matches_exactly_the_numbers_in_bounds() -> None:
    # 123 to 4567 with at most 5 digits: "0123" and "04567" are in, "000123" (6 digits),
    # "122" and "4568" are not.
    pattern = re.compile(whole_numbers(123, 4567, 5))
    for n in range(10_000):
        for text in {str(n), str(n).zfill(5), str(n).zfill(6)}:
            assert bool(pattern.fullmatch(text)) == (len(text) <= 5 and 123 <= n <= 4567), text


def _spans() -> list[Any]:
    numbers = [0, 1, 2, 29, 30, 31, 59, 60, 61, 89, 90, 91, 719, 720, 721, 2159, 2160, 2161]
    numbers += [43_199, 43_200, 43_201, 2_591_999, 2_592_000, 2_592_001, 9_999_999]
    texts = [
        shape.format(n=written, unit=unit)
        for n in numbers
        for written in {str(n), str(n).zfill(4), str(n).zfill(7), str(n).zfill(8)}
        for unit in ["", "s", "m", "h", "d", "w"]
        for shape in ["{n}{unit}", " {n} {unit} ", "{n}\t{unit}"]
    ]
    return [*texts, "weekly", "", "1.5h", "٦٠", 5, 59, 60, 5400.0, 5400.5, 2_592_001, True, None]


def _accepted(build: Any, value: Any) -> bool:
    try:
        build(value)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("schema", "build"),
    [
        (SPAN_SCHEMA, lambda v: Rule(metric="net_savings", op=">=", threshold=0, span=v)),
        (
            {"type": "string", "pattern": GRADING_SPAN_PATTERN},
            lambda v: GradingConfig(span=v),
        ),
    ],
    ids=["rollback.rules.span", "grading.span"],
)
def test_a_span_the_document_allows_is_one_the_server_accepts(
    schema: dict[str, Any], build: Any
) -> None:
    rust = jsonschema_rs.validator_for(schema)
    python = Draft202012Validator(schema)
    for value in _spans():
        if value is None and "anyOf" not in schema:
            continue  # grading.span is never null
        accepted = _accepted(build, value)
        assert rust.is_valid(value) == accepted, value
        assert python.is_valid(value) == accepted, value

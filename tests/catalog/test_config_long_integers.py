"""An integer too long to read in a task config is refused naming its field and that reason.

Python reads no integer of more than 4300 digits. Posted as JSON to `POST /v1/tasks`, such
a config was refused as `(body): not valid JSON: number is infinity when parsed as double`
(orjson's words for any integer past a double, from 310 digits), as YAML (the API and
`shadowplane tasks apply`) as `(body): not valid YAML: Exceeds the limit (4300 digits) …`:
neither named the field, and the first called a finite integer infinity."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.catalog.schemas import SECOND_READ_BYTES, ConfigError, read_documents
from tests.conftest import Api
from tests.test_cli import run

TOO_LONG = "9" * 4301  # one digit past what Python reads
PAST_A_DOUBLE = "9" * 400  # past 64 bits and past a double, short enough to read
TOO_MANY = "holds a number of more than 4300 digits, more than any field takes"
PAST_BOTH = "an integer beyond 64 bits and past a double, more than any field takes"


def _json(number: str) -> str:
    return (
        '{"task": "long_numbers", "comparator": {"kind": "text_conservation", '
        f'"length_ratio": [0.7, {number}]}}}}'
    )


def _yaml(number: str) -> str:
    return (
        "task: long_numbers\ncomparator:\n  kind: text_conservation\n"
        f"  length_ratio: [0.7, {number}]\n"
    )


def _post(api: Api, body: str, content_type: str) -> list[str]:
    response = api.client.post(
        "/v1/tasks", content=body, headers={**api.headers("admin"), "content-type": content_type}
    )
    assert response.status_code == 422, response.text[:300]
    detail: list[str] = response.json()["detail"]
    return detail


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
@pytest.mark.parametrize("sign", ["", "-"])
def test_an_integer_of_more_than_4300_digits_is_named_in_its_field(
    api: Api, content_type: str, sign: str
) -> None:
    text = (_yaml if "yaml" in content_type else _json)(sign + TOO_LONG)
    detail = _post(api, text, content_type)
    assert detail == [f"comparator.length_ratio.1: {TOO_MANY}"], [d[:300] for d in detail]


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_an_integer_past_a_double_is_no_infinity(api: Api, content_type: str) -> None:
    # orjson reads an integer past 64 bits as a double; from 310 digits that is infinite.
    text = (_yaml if "yaml" in content_type else _json)(PAST_A_DOUBLE)
    detail = _post(api, text, content_type)
    assert detail == [f"comparator.length_ratio.1: {PAST_BOTH}"], [d[:300] for d in detail]


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_an_integer_beyond_64_bits_that_a_double_holds_is_refused_either_way(
    api: Api, content_type: str
) -> None:
    # orjson reads it as a double (1e+30) and a number field would take that; YAML (and so
    # `shadowplane tasks apply -f config.json`) reads the integer. One text, one answer:
    # refused, with the decimal that a number field may take instead.
    text = (_yaml if "yaml" in content_type else _json)("9" * 30)
    assert _post(api, text, content_type) == [
        "comparator.length_ratio.1: an integer beyond 64 bits, which storage does not keep; "
        "as a decimal (1e+30) a number field may take it"
    ]


def test_a_long_integer_as_a_yaml_key_is_named_at_its_mapping(api: Api) -> None:
    # A YAML key past 1024 characters is spelt with `?`.
    text = f"task: long_numbers\ncomparator: {{kind: exact}}\nfixed_costs:\n  ? {TOO_LONG}\n  : 1\n"
    assert _post(api, text, "application/yaml") == [f"fixed_costs: a key {TOO_MANY}"]


def test_what_json_refuses_otherwise_keeps_its_reason(api: Api) -> None:
    # A float past a double is orjson's to word; a long integer does not hide a later
    # syntax error's answer behind another reason either.
    floating = _post(api, _json("1e999"), "application/json")
    assert len(floating) == 1, floating
    assert floating[0].startswith("(body): not valid JSON: number is infinity"), floating
    literal = _post(api, _json("Infinity"), "application/json")
    assert len(literal) == 1 and literal[0].startswith("(body): not valid JSON: "), literal


def test_the_cli_names_the_field_too(tmp_path: Path) -> None:
    config = tmp_path / "long.yaml"
    config.write_text(_yaml(TOO_LONG))
    done = run(tmp_path, "tasks", "apply", "-f", str(config), ok=False)
    assert done.returncode == 1
    assert f"{config}: comparator.length_ratio.1: {TOO_MANY}" in done.stderr, done.stderr[-500:]


# Past SECOND_READ_BYTES a JSON text is not read a second time: the answer comes from its
# text, at a line and column.
PADDING = "[" + "0, " * (SECOND_READ_BYTES // 3) + "0]"


def _large_json(number: str, tail: str = "") -> str:
    return (
        '{"task": "long_numbers", "comparator": {"kind": "text_conservation"}, '
        f'"padding": {PADDING},\n "costs": [{number}{tail}]}}'
    )


@pytest.mark.parametrize(
    ("number", "tail", "reason"),
    [
        (PAST_A_DOUBLE, ", ", PAST_BOTH),  # orjson stops at the number: infinity
        (TOO_LONG, "", TOO_MANY),
        (
            "-" + "9" * 30,
            "",
            "an integer beyond 64 bits, which storage does not keep; "
            "as a decimal (-1e+30) a number field may take it",
        ),  # orjson takes it for -1e+30
    ],
    ids=["past-a-double", "too-long", "beyond-64-bits"],
)
def test_a_large_json_config_names_the_line_and_column_of_its_long_integer(
    number: str, tail: str, reason: str
) -> None:
    text = _large_json(number, tail)
    assert len(text) > SECOND_READ_BYTES
    with pytest.raises(ConfigError) as refused:
        read_documents(text.encode(), yaml_text=False)
    assert refused.value.errors == [f"(body): at line 2 column 12, {reason}"]


def test_a_large_json_config_keeps_its_decimals_and_its_digits_in_text() -> None:
    # Long digits in a string are no number, and 1e+30 written as a decimal is a double.
    text = _large_json('"' + "9" * 30 + '", 1e30, -1.000000000000000000001e30')
    (document,) = read_documents(text.encode(), yaml_text=False)
    assert document["costs"] == ["9" * 30, 1e30, -1e30]
    # A decimal past a double is infinite: orjson's words stay.
    with pytest.raises(ConfigError) as refused:
        read_documents(_large_json("1e999").encode(), yaml_text=False)
    assert refused.value.errors[0].startswith("(body): not valid JSON: number is infinity")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "a: !!pairs [b: .nan]\n",
            "a.0.1: nan is not a finite number (JSON has no NaN or infinity)",
        ),
        ('a: !!omap [b: "x\\0"]\n', "a.0.1: holds the NUL character, which storage cannot keep"),
    ],
)
def test_what_yaml_pairs_hold_is_checked_as_a_mapping_is(text: str, reason: str) -> None:
    # !!pairs and !!omap are lists of tuples: NaN there became null (the field's default).
    with pytest.raises(ConfigError) as refused:
        read_documents(text.encode(), yaml_text=True)
    assert refused.value.errors == [reason]

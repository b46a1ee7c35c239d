"""An integer too long to read in a task config is refused naming its field and that reason.

Python reads no integer of more than 4300 digits. Posted as JSON to `POST /v1/tasks`, such
a config was refused as `(body): not valid JSON: number is infinity when parsed as double`
(orjson's words for any integer past a double, from 310 digits), as YAML (the API and
`shadowplane tasks apply`) as `(body): not valid YAML: Exceeds the limit (4300 digits) …`:
neither named the field, and the first called a finite integer infinity."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Api
from tests.test_cli import run

TOO_LONG = "9" * 4301  # one digit past what Python reads
PAST_A_DOUBLE = "9" * 400  # past 64 bits and past a double, short enough to read
TOO_MANY = "holds a number of more than 4300 digits, more than any field takes"
BEYOND_64 = "an integer beyond 64 bits, more than any field takes"


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
    assert detail == [f"comparator.length_ratio.1: {BEYOND_64}"], [d[:300] for d in detail]


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

"""Hostile review of d76beff (a refusal names at most MAX_PROBLEMS problems, then counts the
rest; a key quoted in a field's path is cut to MAX_KEY_CHARS; `skipped` and
`input.segments` are refused without walking every bad value), tried as a hostile user
would.

Held: POST /v1/results (three bad 1 MB `skipped` keys: 760 characters, 0.03 s of CPU;
1000 items each past the cap: every reason 21 sentences; a million duplicate `skipped`
keys), FastAPI's 422s (5,000 repeated bad query values: one sentence; 800,000 extra keys:
21 sentences, 2.8 s of CPU in FastAPI's own validation, left open).

Defects found in the task config's refusals (POST /v1/tasks, the CLI's apply), all
fixed with these tests:

- `_converted` (values pydantic converted where the config's JSON Schema wants another
  type) listed every one: 52 sentences for 32 `length_buckets` and 20 `canary_steps`
  spelt as strings;
- a YAML config's NaN or NUL was refused with its path uncut: a 100,000-character key
  gave a refusal of 100,058 characters;
- a key longer than MAX_KEY_CHARS lost the "allowed here" hint of an unknown field (the
  hint was matched by the uncut name against the cut sentence);
- the hint was looked up for every unknown field, not only the described ones: 800,000
  unknown keys (a 9.5 MB body) took 6-9 s of CPU, of which the loop and a second
  materialisation of pydantic's errors were two thirds;
- an unknown comparator kind, and `required` names not in `fields`, were quoted whole: a
  1 MB kind gave a 1 MB refusal, 1000 long names a 10 MB one.
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.catalog import schemas
from controlplane.catalog.schemas import ConfigError, parse_config, read_documents
from controlplane.errors import MAX_KEY_CHARS, MAX_PROBLEMS
from tests.conftest import TICKET_TASK, Api

# A refusal of MAX_PROBLEMS sentences stays well under this (as in
# tests/ingest/test_rejection_bounds.py).
SHORT = MAX_PROBLEMS * (MAX_KEY_CHARS + 300)


def refusal(raw: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    return caught.value.errors


# 52 values pydantic reads by converting them ("1" for 1), each refused by `_converted`.
CONVERTED = {
    **TICKET_TASK,
    "length_buckets": [str(i) for i in range(1, 33)],
    "promotion": {"canary_steps": [str(i) for i in range(1, 21)]},
}


def test_converted_values_name_the_first_problems_and_count_the_rest() -> None:
    errors = refusal(CONVERTED)
    assert len(errors) == MAX_PROBLEMS + 1, errors[-3:]
    assert errors[0] == 'length_buckets.0: must be a whole number (got "1")'
    assert errors[-1] == f"… and {52 - MAX_PROBLEMS} more problems"


def test_a_few_converted_values_are_each_named_as_before() -> None:
    errors = refusal({**TICKET_TASK, "length_buckets": ["128", 512]})
    assert errors == ['length_buckets.0: must be a whole number (got "128")']


def test_the_api_refuses_converted_values_in_a_short_list(api: Api) -> None:
    response = api.client.post("/v1/tasks", json=CONVERTED, headers=api.headers("admin"))
    assert response.status_code == 422, response.text[:300]
    detail = response.json()["detail"]
    assert len(detail) == MAX_PROBLEMS + 1
    assert detail[-1] == f"… and {52 - MAX_PROBLEMS} more problems"


HUGE_KEY = "k" * 100_000


@pytest.mark.parametrize(
    ("value", "why"),
    [(".nan", "is not a finite number"), ('"a\\0b"', "holds the NUL character")],
    ids=["nan", "nul"],
)
def test_a_huge_yaml_key_is_cut_in_the_path_of_a_refusal(value: str, why: str) -> None:
    text = f"task: ticket_classify\ncomparator: {{kind: label}}\nalerts:\n  ? {HUGE_KEY}\n  : {value}\n"
    with pytest.raises(ConfigError) as caught:
        read_documents(text.encode(), yaml_text=True)
    [error] = caught.value.errors
    assert why in error, error[:300]
    path = error.split(": ", 1)[0]
    assert path == "alerts." + "k" * (MAX_KEY_CHARS - 1) + "…", path[:300]
    assert len(error) < SHORT


def test_a_short_yaml_key_is_named_whole_as_before() -> None:
    text = "task: ticket_classify\ncomparator: {kind: label}\nalerts:\n  conflict_jump: .nan\n"
    with pytest.raises(ConfigError) as caught:
        read_documents(text.encode(), yaml_text=True)
    assert caught.value.errors == [
        "alerts.conflict_jump: nan is not a finite number (JSON has no NaN or infinity)"
    ]


def test_a_long_unknown_field_keeps_the_allowed_hint() -> None:
    [error] = refusal({**TICKET_TASK, "w" * 100: 60})
    cut = "w" * (MAX_KEY_CHARS - 1) + "…"
    assert error.startswith(f"{cut}: unknown field; allowed here: alerts, "), error[:300]


def test_allowed_fields_are_looked_up_for_the_described_problems_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each lookup walks the config's models: done for every one of 800,000 unknown keys it
    # held the API's CPU for seconds, for hints no refusal shows.
    looked_up = []
    real = schemas.allowed_fields

    def counted(loc: tuple[Any, ...], raw: Any) -> list[str]:
        looked_up.append(loc)
        return real(loc, raw)

    monkeypatch.setattr(schemas, "allowed_fields", counted)
    errors = refusal({**TICKET_TASK, **{f"x{i}": 1 for i in range(5_000)}})
    assert len(errors) == MAX_PROBLEMS + 1
    assert errors[0].startswith("x0: unknown field; allowed here: alerts, ")
    assert errors[-1] == f"… and {5_000 - MAX_PROBLEMS} more problems"
    assert len(looked_up) <= MAX_PROBLEMS


def test_a_huge_comparator_kind_is_quoted_by_its_start() -> None:
    [error] = refusal({"task": "t1", "comparator": {"kind": "k" * 1_000_000}})
    cut = "k" * (MAX_KEY_CHARS - 1) + "…"
    assert error.startswith(f"comparator: unknown comparator kind '{cut}'; allowed: "), error[:200]
    assert len(error) < SHORT


def test_many_long_required_names_are_quoted_by_their_start() -> None:
    fields = {f"f{i}" + "x" * 5_000: "string" for i in range(1_000)}
    required = [f"r{i}" + "y" * 5_000 for i in range(1_000)]
    comparator = {"kind": "json_fields", "fields": fields, "required": required}
    [error] = refusal({"task": "t1", "comparator": comparator})
    assert error.startswith("comparator: required names ['r0yyy"), error[:200]
    assert f"and {1_000 - MAX_PROBLEMS} more that are not in fields" in error, error[:3000]
    assert len(error) < SHORT

"""Hostile review of 4c8d063 (a task config's integer too long to read is refused at its
field with the true reason), 4cb82d3 (the Review page's change view renews the held item's
lease) and d24df20 (ingest's NUL-escape scan, `validation.spells_nul`), tried as a hostile
user would. Each defect was pinned as a strict xfail that failed because of it; all five
are fixed (109bd49, 57f9614), and these are plain tests now.

Defects, as found:

- JSON: an integer of 310+ digits followed anywhere by another error (a trailing comma,
  trailing text, a second document, a raw control character) is still refused as
  `(body): not valid JSON: number is infinity when parsed as double` (the second, standard
  library read fails too, and orjson's words are kept): the false reason the commit set out
  to remove, and the real syntax error is not said.
- JSON: an integer of 20 to 309 digits is taken by POST /v1/tasks as a double (orjson: 1e20,
  1e300 in `length_ratio`, accepted and stored), while the same JSON text through
  `shadowplane tasks apply -f` (read as YAML) is refused as `an integer beyond 64 bits, more
  than any field takes`, as the API refuses the same integer from 310 digits on: one text,
  two answers, and the reason's "more than any field takes" is untrue for a field that
  takes it.
- YAML: an integer too long to read inside `!!pairs` or `!!omap` (tuples, which the walk does
  not enter) is refused as `... not plain JSON data (...): Type is not JSON serializable:
  _TooLong`: an internal class's name, no field, not the reason.
- POST /v1/tasks reads the body (`read_documents`) on the event loop: with the second JSON
  read, a 16 MB JSON config of small integers ending in a 400-digit one takes 3.7 s
  (lists: 5.2 s) of that loop where a valid one of the same size takes 0.4 s, and every
  other request of the process waits (YAML already did: 1 MB of YAML is 11.5 s).
- Review page (tested in test_review_change_verdict.py's change made while another reviewer
  took the held item): a correction pressed in the change view while the held item's lease
  was lost is stored, but its confirmation ("your verdict is now ...") is replaced by the lost
  lease's warning: the one slot for a message is overwritten and the page drawn again.

Held: YAML anchors, aliases and merge keys (`<<: *x`, `<<: [*x, {...}]`) name the merged
path; `!!int '<4301 digits>'`, `+`/`-` signs, underscores (`1_0…`, `1_0_0…`) and
sexagesimal parts of 4301 digits are too long; `0x…`, `0…` (octal) and `0b…` of thousands
of digits and long sexagesimals are beyond 64 bits; `!!float <4301 digits>` is infinity,
said as before; `.nan`/`.inf`/`-.inf` keep their words; a second document's long integer is
named; a key of 400 digits is refused (keys must be text); JSON floats past a double and
NaN literals keep orjson's words; a 900-deep list names its path; 1100 deep is orjson's
depth limit. No 500 anywhere. Ingest: every text field, `skipped` reasons, input keys and
values and output keys and values, on msgspec's path, pydantic's batch path and the careful
path (a single result): a NUL is refused in text fields and stored as U+FFFD in JSON, and
`\\u0000` (and `\\\\u0000`) spelt in text is stored as posted (`\\U0000` is no JSON escape;
the scan is over the whole body, so no split can hide an escape). Review page: U with
nothing held (after a give-back, with an empty queue) claims nothing; a task picked in the
change view gives the held item back and holds one of that task; a redraw renews the lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.catalog import schemas
from controlplane.catalog.schemas import ConfigError, read_documents
from controlplane.rollout import endpoints
from tests.conftest import Api, make_api

TOO_LONG = "9" * 4301
PAST_A_DOUBLE = "9" * 400
TOO_MANY = "holds a number of more than 4300 digits, more than any field takes"


def _json(number: str, tail: str = "") -> str:
    return (
        '{"task": "long_numbers", "comparator": {"kind": "text_conservation", '
        f'"length_ratio": [0.7, {number}]}}{tail}}}'
    )


def _answer(text: str, *, yaml_text: bool) -> list[str] | None:
    """The refusal of read_documents, or None when it reads the text."""
    try:
        read_documents(text.encode(), yaml_text=yaml_text)
    except ConfigError as exc:
        return list(exc.errors)
    return None


@pytest.mark.parametrize(
    "text",
    [
        _json(PAST_A_DOUBLE, tail=", "),  # a trailing comma
        _json(PAST_A_DOUBLE) + " x",  # trailing text
        _json(PAST_A_DOUBLE) + "\n" + _json("1.3"),  # two documents
        _json(TOO_LONG, tail=', "note": "a\tb"'),  # a raw tab in a string
    ],
    ids=["trailing-comma", "trailing-text", "two-documents", "control-character"],
)
def test_a_long_integer_before_another_json_error_is_not_called_infinity(text: str) -> None:
    errors = _answer(text, yaml_text=False)
    assert errors is not None and len(errors) == 1, errors
    # The integer is finite: whatever the answer names (the syntax error, or the integer at
    # its field), it is not orjson's "number is infinity when parsed as double".
    assert "infinity" not in errors[0], errors[0][:300]


@pytest.mark.parametrize("digits", [20, 300])
def test_one_json_text_gets_one_answer_from_the_api_and_the_cli(digits: int) -> None:
    text = _json("9" * digits)
    # POST /v1/tasks (application/json) reads it with yaml_text=False; `shadowplane tasks
    # apply -f config.json` with yaml_text=True ("JSON is YAML too").
    api, cli = _answer(text, yaml_text=False), _answer(text, yaml_text=True)
    decimal = "1e+20" if digits == 20 else "1e+300"
    assert cli == [
        "comparator.length_ratio.1: an integer beyond 64 bits, which storage does not keep; "
        f"as a decimal ({decimal}) a number field may take it"
    ]
    assert api == cli, (api, cli)


@pytest.mark.parametrize("tag", ["!!pairs", "!!omap"])
def test_a_too_long_integer_in_yaml_pairs_is_refused_with_the_reason(tag: str) -> None:
    errors = _answer(f"task: long_numbers\nfixed_costs: {tag} [a: {TOO_LONG}]\n", yaml_text=True)
    assert errors is not None and len(errors) == 1, errors
    assert "_TooLong" not in errors[0], errors[0]
    assert TOO_MANY in errors[0], errors[0]


@pytest.fixture
def sqlite_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def test_a_task_config_is_read_off_the_event_loop(
    sqlite_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_loop: list[bool] = []
    real = schemas.read_documents

    def reading(text: str | bytes, *, yaml_text: bool) -> list[Any]:
        # The real reader, noting whether it runs in the event loop's thread.
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(text, yaml_text=yaml_text)

    monkeypatch.setattr(endpoints, "read_documents", reading)
    # Small here; at 16 MB of `0,` before the long integer the two reads take 3.7 s.
    body = _json("[" + "0," * 1000 + PAST_A_DOUBLE + "]")
    answer = sqlite_api.client.post(
        "/v1/tasks",
        content=body,
        headers={**sqlite_api.headers("admin"), "content-type": "application/json"},
    )
    assert answer.status_code == 422, answer.text[:300]
    assert on_loop == [False], on_loop

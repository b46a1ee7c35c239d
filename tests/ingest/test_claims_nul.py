"""README claim, on PostgreSQL (which cannot store the NUL character): a NUL in a result's
text field rejects that item alone, naming the field; inside its JSON values (input,
outputs) it is stored as U+FFFD, the item is accepted and counted, and the answer says so
(`altered`, naming the item and the fields; absent when nothing was). Nothing is changed
silently: text that merely spells a backslash and `u0000` is stored as posted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Api, make_api, make_result

pytestmark = pytest.mark.integration


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    yield from make_api(pg_url)


def stored(api: Api, request_id: str) -> dict:
    answer = api.client.get(f"/v1/results/ticket_classify/{request_id}", headers=api.headers())
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_nul_in_json_values_is_stored_as_fffd_and_reported(api: Api) -> None:
    nul_input = make_result(
        request_id="nul-input",
        input={"text": "ref\x00und please", "segments": [1, 2], "note": {"k\x00": "a\x00b"}},
        edge={"output": "exchange\x00", "model": "small@3"},  # a conflict: its payload is kept
    )
    literal = make_result(
        request_id="literal",
        # The six characters \u0000, and a backslash before a real NUL: not a NUL, and one.
        input={"text": 'printf("\\u0000"); a\\\x00b'},
        edge={"output": "exchange", "model": "small@3"},
    )
    clean = make_result(request_id="clean")
    bad_text = make_result(request_id="bad-text", session_id="s\x00")
    report = api.post_results({"results": [nul_input, literal, clean, bad_text]})
    assert report.status_code == 200
    body = report.json()
    # Three stored and counted, one rejected alone, naming the field.
    assert (body["accepted"], body["duplicates"]) == (3, 0), body
    assert body["rejected"] == [
        {
            "index": 3,
            "request_id": "bad-text",
            "error": "session_id: must not contain the NUL character",
        }
    ]
    # What was altered is said, item by item, field by field.
    assert body["altered"] == [
        {
            "index": 0,
            "request_id": "nul-input",
            "fields": ["input", "edge.output"],
            "note": "NUL character stored as U+FFFD (storage cannot hold it)",
        },
        {
            "index": 1,
            "request_id": "literal",
            "fields": ["input"],
            "note": "NUL character stored as U+FFFD (storage cannot hold it)",
        },
    ]

    kept = stored(api, "nul-input")
    assert kept["payload"]["input"] == {
        "text": "ref\ufffdund please",
        "segments": [1, 2],
        "note": {"k\ufffd": "a\ufffdb"},  # object keys too
    }
    assert kept["edge"]["output"] == "exchange\ufffd"
    # Compared on the text as posted: "exchange\0" is no label.
    assert kept["comparison"]["outcome"] == "invalid"
    assert stored(api, "literal")["payload"]["input"] == {
        "text": 'printf("\\u0000"); a\\\ufffdb',
        "segments": None,
    }
    assert stored(api, "clean")["request_id"] == "clean"


def test_a_batch_without_nul_says_nothing_altered(api: Api) -> None:
    literal = make_result(
        request_id="only-literal",
        input={"text": "\\u0000 \\\\u0000"},
        edge={"output": "exchange", "model": "small@3"},
    )
    body = api.post_results({"results": [literal, make_result()]}).json()
    # `altered` only appears when something was.
    assert body == {"accepted": 2, "duplicates": 0, "rejected": []}
    assert stored(api, "only-literal")["payload"]["input"] == {
        "text": "\\u0000 \\\\u0000",
        "segments": None,
    }

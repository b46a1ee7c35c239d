"""A refusal stays short however many problems a body holds, and the problems are found
without walking every bad value: at most MAX_PROBLEMS sentences and a count of the rest,
each key in a field path cut to MAX_KEY_CHARS. Before, one item's 20,000 bad `skipped` keys gave a
4.6 MB reason (2.4 times its body), and 1.5 million bad `input.segments` entries in a
15 MB body took 13 s of the API's CPU (holding its worker) and gave a 105 MB reason; a
422 listed every extra key of a body, 800,000 sentences for an 11 MB run."""

from __future__ import annotations

from typing import Any

import orjson

from controlplane.errors import MAX_KEY_CHARS, MAX_PROBLEMS
from controlplane.ingest.validation import validate_body
from tests.conftest import Api, make_result

# A reason of MAX_PROBLEMS sentences, each a path, a message and a quoted value (at most
# 120 characters), stays well under this.
SHORT = MAX_PROBLEMS * (MAX_KEY_CHARS + 300)


def refused_alone(bad: dict[str, Any]) -> str:
    """The reason the bad item gets, posted after a good one (which must be accepted)."""
    body = orjson.dumps({"results": [make_result(request_id="ok-1"), bad]})
    valid, rejected = validate_body(body, 1000)
    assert [i for i, _ in valid] == [0]
    [refusal] = rejected
    assert refusal.index == 1 and refusal.request_id == "bad-1", refusal
    return refusal.error


def test_many_bad_skipped_keys_are_refused_in_one_sentence() -> None:
    bad = make_result(request_id="bad-1", skipped={f"side{i}": "busy" for i in range(20_000)})
    error = refused_alone(bad)
    assert error.startswith("skipped: at most 3 sides (edge, cloud, cloud_repeat), not 20000"), (
        error[:300]
    )
    assert len(error) < SHORT


def test_a_few_bad_skipped_keys_are_each_named_as_before() -> None:
    bad = make_result(request_id="bad-1", skipped={"side": "busy", "edge": "x" * 1001})
    error = refused_alone(bad)
    assert "skipped.side.[key]: Input should be 'edge', 'cloud' or 'cloud_repeat'" in error
    assert "skipped.edge: String should have at most 1000 characters" in error


def test_many_bad_segments_name_the_first_only() -> None:
    bad = make_result(
        request_id="bad-1", input={"text": "t", "segments": [1, "2", *["x"] * 50_000]}
    )
    error = refused_alone(bad)
    assert error.startswith("input.segments.1: Input should be a valid integer"), error[:300]
    assert error.count("input.segments") == 1
    assert len(error) < SHORT


def test_a_huge_bad_key_is_named_by_its_start() -> None:
    key = "k" * 100_000
    bad = make_result(request_id="bad-1", skipped={key: "busy"})
    error = refused_alone(bad)
    path = error.split(": ", 1)[0]
    assert path.startswith("skipped.kkk") and path.endswith("….[key]"), path[:300]
    assert len(path) <= len("skipped.") + MAX_KEY_CHARS + len(".[key]")
    assert len(error) < SHORT


def sides_all_wrong() -> dict[str, Any]:
    """A result each of whose sides' numeric fields holds a string, and each text field a
    number: one problem each."""
    numeric = ["latency_ms", "ttfb_ms", "input_tokens", "output_tokens", "cost"]
    side = {**{f: "1" for f in numeric}, "error": 5, "error_message": 5, "model": 5}
    edge = {**side, "confidence": "1"}
    return make_result(request_id="bad-1", edge=edge, cloud=side, cloud_repeat=dict(side))


def test_an_item_with_many_problems_lists_the_first_and_counts_the_rest() -> None:
    bad = sides_all_wrong()
    problems = sum(len(bad[s]) for s in ("edge", "cloud", "cloud_repeat"))
    assert problems > MAX_PROBLEMS
    error = refused_alone(bad)
    sentences = error.split("; ")
    assert len(sentences) == MAX_PROBLEMS + 1
    assert sentences[0].startswith("edge.error: Input should be a valid string")
    assert sentences[-1] == f"… and {problems - MAX_PROBLEMS} more problems"


RUNS = "/v1/evalsets/ticket_classify/runs"


def refused_run(api: Api, body: dict[str, Any]) -> list[str]:
    response = api.client.post(RUNS, json=body, headers=api.headers("read"))
    assert response.status_code == 422, response.text[:300]
    assert len(response.content) < SHORT
    detail: list[str] = response.json()["detail"]
    assert len(detail) <= MAX_PROBLEMS + 1
    return detail


def test_a_refused_body_lists_the_first_problems_and_counts_the_rest(api: Api) -> None:
    # Two bad fields and as many unknown ones as are named one by one: 22 problems.
    extra = {f"extra{i}": 1 for i in range(MAX_PROBLEMS)}
    detail = refused_run(api, {"model": 5, "note": 5, "lines": [], **extra})
    assert len(detail) == MAX_PROBLEMS + 1
    assert detail[0] == "body.model: Input should be a valid string"
    assert detail[-1] == "… and 2 more problems"


def test_many_unknown_fields_and_bad_lines_are_each_one_sentence(api: Api) -> None:
    extra = {f"extra{i}": 1 for i in range(5_000)}
    assert refused_run(api, {"model": "m", "lines": [], **extra}) == [
        "body: 5000 unknown fields (extra0, extra1, extra2, …); known: layer, lines, model, note"
    ]
    [line] = refused_run(api, {"model": "m", "lines": [{"id": "not-an-id"}] * 5_000})
    assert line.startswith("body.lines.0.id: String should match pattern"), line


def test_a_huge_extra_key_is_named_by_its_start(api: Api) -> None:
    [sentence] = refused_run(api, {"model": "m", "lines": [], f"{'x' * 50_000}": 1})
    path = sentence.split(":")[0]
    assert path == "body." + "x" * (MAX_KEY_CHARS - 1) + "…", path[:200]

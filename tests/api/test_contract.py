"""The OpenAPI document is the contract: what a schemathesis run (tests/api/test_schema_fuzz.py)
found, each kept as a plain request. Ids are bounded as their columns store them, times are
read only as date-times, a body is as required as the document says, a 405 names the methods
the path has, and every refusal names the parameter and the reason."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import Api, make_api


@pytest.fixture
def pg_api(pg_url: str) -> Iterator[Api]:
    """On PostgreSQL: an id past an INTEGER column failed only there (SQLite's integers are
    64-bit), in the database, and was answered as if the body were at fault."""
    yield from make_api(pg_url)


@pytest.mark.integration
def test_an_id_past_its_column_is_refused_naming_the_path_parameter(pg_api: Api) -> None:
    admin = pg_api.headers("admin")
    for alert_id in (9223372036854775806, 2**31):
        response = pg_api.client.post(f"/v1/alerts/{alert_id}/ack", json={}, headers=admin)
        assert response.status_code == 422, response.text
        (detail,) = response.json()["detail"]
        assert detail.startswith("path.alert_id: ") and "2147483647" in detail, detail
    # The largest id an INTEGER holds is a well-formed id of no alert.
    response = pg_api.client.post(f"/v1/alerts/{2**31 - 1}/ack", json={}, headers=admin)
    assert response.status_code == 404, response.text
    # The document says so.
    document = pg_api.client.get("/openapi.json").json()
    (parameter,) = document["paths"]["/v1/alerts/{alert_id}/ack"]["post"]["parameters"]
    assert parameter["schema"]["maximum"] == 2**31 - 1 and parameter["schema"]["minimum"] == 1


TIME_PARAMETERS = [
    ("/v1/tasks/ticket_classify/windows?until=0.5", "until"),
    ("/v1/tasks/ticket_classify/windows?since=1700000000", "since"),
    ("/v1/tasks/ticket_classify/whatif?until=0.5", "until"),
    ("/v1/audit?since=0.5", "since"),
    ("/v1/audit?since=2026-11-30", "since"),
]


def test_a_time_parameter_takes_only_a_date_time(api: Api) -> None:
    """A number was read as seconds since 1970 and a bare date as its midnight: the document
    says `date-time`, so both are refused, naming the parameter."""
    for url, name in TIME_PARAMETERS:
        response = api.client.get(url, headers=api.headers("read"))
        assert response.status_code == 422, (url, response.text)
        (detail,) = response.json()["detail"]
        assert detail.startswith(f"query.{name}: ") and "date-time" in detail, (url, detail)


def test_an_empty_object_is_not_a_result_nor_a_batch(api: Api) -> None:
    """`{}` matched neither form the document gives (a result, or `{"results": [...]}`) and
    was answered 200 with one rejected item; a result's own problems stay per item."""
    response = api.post_results({})
    assert response.status_code == 422, response.text
    assert "results" in response.text and "request_id" in response.text
    one_bad = api.post_results({"request_id": "r-1", "task": "ticket_classify"})
    assert one_bad.status_code == 200, one_bad.text
    assert [r["index"] for r in one_bad.json()["rejected"]] == [0]


def test_a_405_names_every_method_of_the_path(api: Api) -> None:
    """Two routers share these paths; Starlette's 405 named only the first one's methods."""
    for path in ("/v1/tasks", "/v1/evalsets/ticket_classify/runs"):
        response = api.client.request("PUT", path, headers=api.headers("admin"))
        assert response.status_code == 405, response.text
        assert response.headers["allow"] == "GET, HEAD, POST"
        detail = response.json()["detail"]
        assert "PUT" in detail and "GET, HEAD, POST" in detail, detail


def test_head_is_the_get_without_its_body(api: Api) -> None:
    """RFC 9110 9.3.2: the same status and headers as GET (its length, its ETag), no body,
    the same key checks; a path without GET refuses HEAD naming it; a stream's headers come
    and it ends."""
    for path in ("/healthz", "/v1/tasks", "/v1/flags"):
        got = api.client.get(path, headers=api.headers("admin"))
        head = api.client.head(path, headers=api.headers("admin"))
        assert (head.status_code, head.content) == (got.status_code, b""), path
        for name in ("content-length", "content-type", "etag"):
            assert head.headers.get(name) == got.headers.get(name), (path, name)
    assert api.client.head("/v1/tasks").status_code == 401
    assert api.client.head("/v1/tasks", headers=api.headers("ingest")).status_code == 403
    refused = api.client.head("/v1/kill", headers=api.headers("admin"))
    assert (refused.status_code, refused.headers["allow"]) == (405, "POST")
    stream = api.client.head("/v1/flags/stream", headers=api.headers("admin"))
    assert stream.status_code == 200 and stream.content == b""
    assert stream.headers["content-type"].startswith("text/event-stream")


@pytest.mark.integration
def test_a_task_config_is_taken_as_its_schema_says(pg_api: Api) -> None:
    """What the runs found in POST /v1/tasks: a value of another JSON type was converted, not
    refused; YAML's `\\0` reached storage; three configs the document allows were 500s."""
    admin = pg_api.headers("admin")
    base = {"task": "contract_task", "comparator": {"kind": "label"}}

    def apply(config: dict[str, Any] | str) -> Any:
        if isinstance(config, str):
            yaml = {**admin, "Content-Type": "application/yaml"}
            return pg_api.client.post("/v1/tasks", content=config, headers=yaml)
        return pg_api.client.post("/v1/tasks", json=config, headers=admin)

    for config, field in [
        ({**base, "error_cost": False}, "error_cost: must be a number (got false)"),
        ({**base, "window_seconds": "300"}, 'window_seconds: must be a whole number (got "300")'),
        ({**base, "comparator": {"kind": {}}}, "comparator: unknown comparator kind {}"),
        (
            {
                **base,
                "rollback": {
                    "rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "cap": 5e-324}]
                },
            },
            "cap (4.94066e-324) is too small",
        ),
        ('task: contract_task\ncomparator: {kind: label}\nreview: {guidelines: "a\\0"}', ""),
    ]:
        response = apply(config)
        assert response.status_code == 422, (config, response.text)
        assert field in " ".join(response.json()["detail"]), response.text
    assert "review.guidelines: holds the NUL character" in response.text
    # A side's price given alone keeps the other's default; costs read both.
    applied = apply({**base, "prices": {"edge": {}, "cloud": {"out": 0.01}}})
    assert applied.status_code == 201, applied.text
    prices = applied.json()["config"]["prices"]
    assert prices == {"edge": {"in": 0.00001, "out": 0.00002}, "cloud": {"in": 0.003, "out": 0.01}}
    windows = pg_api.client.get("/v1/tasks/contract_task/whatif", headers=admin)
    assert windows.status_code == 200, windows.text
    # PostgreSQL gives the largest float back as an integer orjson cannot write; the answer is
    # still written, its times in RFC 3339.
    huge = apply({**base, "alerts": {"conflict_jump": 1.7976931348623157e308}})
    assert huge.status_code == 201, huge.text
    (task,) = [
        t
        for t in pg_api.client.get("/v1/tasks", headers=admin).json()["tasks"]
        if t["task"] == "contract_task"
    ]
    assert "T" in task["created_at"] and "T" in task["updated_at"], task


def test_the_documented_text_rules_are_the_checks_rules() -> None:
    """Patterns the document gives for checks made in code with better messages: a string
    is allowed by the one exactly when the other takes it (every character of the BMP alone,
    and a few strings)."""
    from controlplane.catalog.schemas import TASK_NAME
    from controlplane.errors import ActionError
    from controlplane.params import TASK_NAME_PATTERN
    from controlplane.review.actions import check_text
    from controlplane.review.schemas import REVIEW_TEXT_PATTERN
    from controlplane.rollout.actions import check_reason
    from controlplane.rollout.schemas import REASON_PATTERN

    def takes(check: Callable[[str], object], text: str) -> bool:
        try:
            check(text)
        except ActionError:
            return False
        return True

    assert TASK_NAME_PATTERN == f"^{TASK_NAME.pattern}$"
    reason, review = re.compile(REASON_PATTERN), re.compile(REVIEW_TEXT_PATTERN)
    samples = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    samples += ["a\x01", " a ", "\t\n", "  ", "why\r\n", "\u3000x\u2028", "\x85"]
    for text in samples:
        assert (reason.fullmatch(text) is not None) == takes(check_reason, text), repr(text)
        review_takes = takes(lambda t: check_text("note", t, 2000), text)
        assert (review.fullmatch(text) is not None) == review_takes, repr(text)

"""One JSON log line per request: method, path, status, duration, key name; never the key or text."""

from __future__ import annotations

import logging

import orjson
import pytest

from tests.conftest import Api, make_result


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Lines:
    handler = Lines()
    logger = logging.getLogger("shadowplane.http")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_one_json_line_per_request(api: Api, lines: Lines) -> None:
    secret_text = "MY-PRIVATE-TICKET-TEXT"
    api.post_results(
        make_result(request_id="log-1", input={"text": secret_text}, edge={"output": "exchange"})
    )
    api.client.get("/v1/tasks", headers=api.headers("read"))
    api.client.get("/v1/tasks", headers={"Authorization": "Bearer sp_wrong"})
    api.client.get("/healthz")
    records = [orjson.loads(line) for line in lines.lines]
    assert [(r["method"], r["path"], r["status"], r["key"]) for r in records] == [
        ("POST", "/v1/results", 200, "ingest-key"),
        ("GET", "/v1/tasks", 200, "read-key"),
        ("GET", "/v1/tasks", 401, None),
        ("GET", "/healthz", 200, None),
    ]
    assert all(isinstance(r["duration_ms"], float) for r in records)
    joined = "\n".join(lines.lines)
    assert secret_text not in joined
    assert all(key not in joined for key in api.keys.values())
    assert "sp_wrong" not in joined

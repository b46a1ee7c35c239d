"""One JSON log line per request: method, path, status, duration, key name; never the key or text.
Every line the API process prints is a JSON object, uvicorn's included, at the level set."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import orjson
import pytest

from controlplane.client.tls import default_tls
from tests.conftest import Api, make_result
from tests.liveapi import ApiServer, seed, stop_all


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


def printed(log: Path) -> list[dict[str, object]]:
    """Every line of a process's output, each a JSON object (or the test fails naming it)."""
    records = []
    for line in log.read_text().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        assert isinstance(record, dict), f"not a JSON line: {line!r}"
        assert {"ts", "level", "logger", "pid"} <= record.keys(), record
        records.append(record)
    return records


@pytest.mark.integration
def test_every_line_the_api_prints_is_json_at_the_level_set(
    sqlite_url: str, tmp_path: Path
) -> None:
    keys = seed(sqlite_url)
    told = ApiServer(
        sqlite_url, tmp_path / "info.log", keys, {"SHADOWPLANE_LOG_LEVEL": "info"}
    ).start()
    quiet = ApiServer(
        sqlite_url, tmp_path / "warning.log", keys, {"SHADOWPLANE_LOG_LEVEL": "WARNING"}
    ).start()
    try:
        for server in (told, quiet):
            assert httpx.get(f"{server.base}/healthz", verify=default_tls()).status_code == 200
            assert server.call("GET", "/v1/tasks", "read").status_code == 200
            wrong = {"Authorization": "Bearer sp_wrong"}
            assert (
                httpx.get(
                    f"{server.base}/v1/tasks", headers=wrong, verify=default_tls()
                ).status_code
                == 401
            )
    finally:
        stop_all(told, quiet)

    records = printed(tmp_path / "info.log")
    # uvicorn's own lines, start to stop, in the same lines; its access log is off, so each
    # request is told once, by the request log.
    said = [str(r["message"]) for r in records if r["logger"] == "uvicorn.error"]
    for words in ("Started server process", "Application startup complete", "Shutting down"):
        assert any(line.startswith(words) for line in said), said
    assert not [r for r in records if r["logger"] == "uvicorn.access"]
    # The test's requests, after the /healthz polls that waited for the server to start.
    requests = [(r["method"], r["path"], r["status"], r["key"]) for r in records if "path" in r]
    started = len(requests) - 3
    assert requests[:started] == [("GET", "/healthz", 200, None)] * started
    key = str(requests[-2][3])
    assert requests[started:] == [
        ("GET", "/healthz", 200, None),
        ("GET", "/v1/tasks", 200, key),
        ("GET", "/v1/tasks", 401, None),
    ]
    assert key.startswith("read-")
    assert {r["level"] for r in records if "path" in r} == {"INFO"}
    # One process: every line carries its pid.
    assert len({r["pid"] for r in records}) == 1
    # At WARNING, nothing of the above is printed.
    assert [r for r in printed(tmp_path / "warning.log") if r["level"] in ("DEBUG", "INFO")] == []

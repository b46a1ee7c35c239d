"""The API's contract, fuzzed: schemathesis' command (`schemathesis run`, every check it has:
`--checks all`) against a real server on PostgreSQL, with an admin key, a read key and no key,
a fixed seed and a bounded number of examples; any finding fails the test with schemathesis'
report of it. tests/api/schemathesis.toml holds the settings, shared with the longer run
docs/http-api.md gives ("The contract, fuzzed"). What the runs found is kept as plain
requests in tests/api/test_contract.py.

Then: every success answer names its schema, and answers holding real rows match theirs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis

from controlplane.client.tls import default_tls
from tests.conftest import Api, make_api
from tests.liveapi import ApiServer, seed

CONFIG = Path(__file__).with_name("schemathesis.toml")
SEED = 20261205

# Generous rates: the fuzzer must reach the endpoints, not the token buckets (nor the limit on
# failed keys per address, which the runs without a key and with a bad one would reach).
UNLIMITED = {
    f"rate_{scope}_{kind}": value
    for scope in ("ingest", "flags", "read", "review", "admin")
    for kind, value in (("per_second", 1e6), ("burst", 10**6))
}

# (key, arguments) of each run, bounded to seconds each. The admin key reaches every
# operation's work: all phases, coverage included (boundary values, missing parameters,
# methods the path does not answer). A config's coverage alone is thousands of requests
# (its schema is large), so POST /v1/tasks is fuzzed in a run of its own. The read key and no
# key mostly meet 403 and 401: fuzzing and the stateful links suffice there.
RUNS: list[tuple[str | None, list[str]]] = [
    ("admin", ["-n", "5", "--exclude-name", "POST /v1/tasks"]),
    ("admin", ["-n", "10", "--phases", "fuzzing", "--include-name", "POST /v1/tasks"]),
    ("read", ["-n", "3", "--phases", "fuzzing,stateful"]),
    (None, ["-n", "2", "--phases", "fuzzing"]),
]


@pytest.fixture
def live_api(pg_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    keys = seed(pg_url)
    settings = {f"SHADOWPLANE_{name.upper()}": str(value) for name, value in UNLIMITED.items()}
    settings["SHADOWPLANE_AUTH_FAILURES_PER_MINUTE"] = str(10**6)
    server = ApiServer(pg_url, tmp_path / "api.log", keys=keys, settings=settings).start()
    try:
        yield server
    finally:
        server.stop()


def schemathesis_run(base: str, key: str | None, arguments: list[str], workdir: Path) -> str:
    """`schemathesis run` with every check; its report, or a failure showing it."""
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run"]
    command += [f"{base}/openapi.json", "--checks", "all", "--seed", str(SEED)]
    command += ["--request-timeout", "5", "--no-color", *arguments]
    if key is not None:
        command += ["--header", f"Authorization: Bearer {key}"]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=300)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-12000:]
    return report


@pytest.mark.integration
def test_schemathesis_finds_nothing_with_an_admin_key_a_read_key_or_no_key(
    live_api: ApiServer, tmp_path: Path
) -> None:
    tested = 0
    for scope, arguments in RUNS:
        key = live_api.keys[scope] if scope is not None else None
        report = schemathesis_run(live_api.base, key, arguments, tmp_path)
        # Requests were made, every one of them passed, and the operations were reached.
        made = re.search(r"(\d+) generated, (\d+) passed", report)
        assert made is not None and made.group(1) == made.group(2) != "0", report[-3000:]
        reached = re.search(r"Tested: (\d+)", report)
        assert reached is not None, report[-3000:]
        tested += int(reached.group(1))
    # Every operation of the document, the flag stream included, with each key.
    document = httpx.get(f"{live_api.base}/openapi.json", timeout=10, verify=default_tls()).json()
    operations = sum(len(item) for item in document["paths"].values())
    assert tested == 3 * operations, (tested, operations)
    assert "Traceback" not in live_api.log(), live_api.log()


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:600]}"


@pytest.fixture
def fuzz_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url, **UNLIMITED)


# The operations whose 200 is not JSON: the Prometheus text exposition, the flag stream.
TEXT_ONLY = {
    ("get", "/metrics"): "text/plain; version=0.0.4",
    ("get", "/v1/flags/stream"): "text/event-stream",
}


def test_every_success_answer_names_its_schema(fuzz_api: Api) -> None:
    """Every 200/201 of every operation names a response schema (a `$ref` to a model), so
    clients generated from /openapi.json know every answer; /metrics is Prometheus text."""
    document = fuzz_api.client.get("/openapi.json").json()
    missing = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status in ("200", "201"):
                answer = operation["responses"].get(status)
                if answer is None:
                    continue
                content = answer.get("content", {})
                if (method, path) in TEXT_ONLY:
                    if set(content) != {TEXT_ONLY[(method, path)]}:
                        missing.append(f"{method.upper()} {path} {status}: {sorted(content)}")
                    continue
                schema = content.get("application/json", {}).get("schema", {})
                if "$ref" not in schema:
                    missing.append(f"{method.upper()} {path} {status}: {schema}")
            if "200" not in operation["responses"] and "201" not in operation["responses"]:
                missing.append(f"{method.upper()} {path}: no success answer documented")
    assert not missing, "\n".join(missing)
    # Every error answer is the one shape the API gives: {"detail": ...}; except OFREP's
    # evaluation errors (400, 404), whose shape the OpenFeature protocol sets.
    errors = {
        (path, method, status)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        for status, answer in operation["responses"].items()
        if status.startswith("4")
        and not (path.startswith("/ofrep/") and status in ("400", "404"))
        and answer.get("content", {}).get("application/json", {}).get("schema")
        != {"$ref": "#/components/schemas/ErrorOut"}
    }
    assert not errors, sorted(errors)


def test_answers_carrying_data_match_their_schemas(fuzz_api: Api) -> None:
    """The fuzzer mostly meets an empty database; here every reading endpoint and every
    action answers with real rows (results, closed windows, decisions, audit entries,
    flags), and each answer is validated against the schema its operation declares."""
    from datetime import datetime

    from controlplane.scheduler import run_pass
    from tests.conftest import make_result

    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_api.client.app)
    client, admin = fuzz_api.client, fuzz_api.headers("admin")
    posted = [make_result(), make_result(edge={"error": "timeout", "latency_ms": 900.0})]
    assert fuzz_api.post_results({"results": posted}).status_code == 200
    run_pass(fuzz_api.engine, datetime.fromisoformat("2026-11-30T03:00:00+00:00"), veto=1.0)
    task = "ticket_classify"
    reason = {"reason": "schema test"}
    calls: list[tuple[str, str, str, dict[str, Any] | None, int]] = [
        ("POST", "/v1/tasks/{task}/promote", f"/v1/tasks/{task}/promote", reason, 409),
        ("POST", "/v1/tasks/{task}/rollback", f"/v1/tasks/{task}/rollback", reason, 200),
        ("POST", "/v1/tasks/{task}/rearm", f"/v1/tasks/{task}/rearm", reason, 200),
        ("POST", "/v1/kill", "/v1/kill", reason, 200),
        ("POST", "/v1/kill", "/v1/kill", reason, 409),
        ("POST", "/v1/kill/lift", "/v1/kill/lift", reason, 200),
        ("GET", "/v1/tasks", "/v1/tasks", None, 200),
        ("GET", "/v1/tasks/{task}", f"/v1/tasks/{task}", None, 200),
        ("GET", "/v1/tasks/{task}/gate", f"/v1/tasks/{task}/gate", None, 200),
        (
            "GET",
            "/v1/tasks/{task}/windows",
            f"/v1/tasks/{task}/windows?since=2026-11-30T00:00:00Z&until=2026-12-01T00:00:00Z",
            None,
            200,
        ),
        ("GET", "/v1/flags", "/v1/flags", None, 200),
        ("GET", "/v1/flags/{task}", f"/v1/flags/{task}", None, 200),
        ("GET", "/v1/flags/{task}/history", f"/v1/flags/{task}/history", None, 200),
        (
            "GET",
            "/v1/results/{task}/{request_id}",
            f"/v1/results/{task}/{posted[1]['request_id']}",
            None,
            200,
        ),
        ("GET", "/v1/results/{task}/{request_id}", f"/v1/results/{task}/nope", None, 404),
        ("GET", "/v1/decisions", "/v1/decisions", None, 200),
        ("GET", "/v1/audit", "/v1/audit", None, 200),
        ("GET", "/v1/alerts", "/v1/alerts", None, 200),
        ("GET", "/v1/webhooks/deliveries", "/v1/webhooks/deliveries", None, 200),
        ("GET", "/readyz", "/readyz", None, 200),
        ("GET", "/healthz", "/healthz", None, 200),
    ]
    failures = []
    for method, template, url, body, status in calls:
        response = client.request(method, url, json=body, headers=admin)
        assert response.status_code == status, (url, response.text)
        try:
            schema[template][method].validate_response(response)
        except Exception as exc:
            failures.append(f"{method} {url} → {response.status_code}: {_short(exc)}")
    assert not failures, "\n".join(failures)
    # The data was there: the answers validated above were not empty lists.
    assert client.get("/v1/decisions", headers=admin).json()["decisions"]
    assert client.get(f"/v1/tasks/{task}", headers=admin).json()["latest_window"] is not None

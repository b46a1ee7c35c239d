"""Every endpoint of the OpenAPI document, fuzzed by schemathesis (valid and invalid bodies,
parameters and headers), with an admin key and with no key: nothing answers 500, and every
answer is one the document names — its status code, its content type and its body's schema.

Bounded: a fixed number of examples per operation and mode, no deadline (shared machines).
The operations are driven through schemathesis' strategies directly: its pytest plugin
does not run under the pytest this suite uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import Api, make_api

# Generous rates: the fuzzer must reach the endpoints, not the token buckets.
UNLIMITED = {
    f"rate_{scope}_{kind}": value
    for scope in ("ingest", "flags", "read", "review", "admin")
    for kind, value in (("per_second", 1e6), ("burst", 10**6))
}


@pytest.fixture
def fuzz_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url, **UNLIMITED)


# What every answer is checked against: no 5xx, and the status code, content type and body
# the OpenAPI document declares for the operation.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


ENDLESS = {"/v1/flags/stream"}


def server_errors(
    api: Api, headers: dict[str, str], examples: int, nothing_to_negate: set[str]
) -> list[str]:
    """Run every operation in both modes; one line per request that answered 5xx or
    answered something its schema does not describe.

    `nothing_to_negate` holds the operations whose negative mode sends nothing: schemathesis
    finds nothing it can make invalid (e.g. free-form strings in the path and no body) and
    rejects every draft, and Hypothesis gives up only after ~460 of them (half a second or
    more per operation). What it can make invalid does not depend on the key or the number
    of examples, so a run notes these operations there and the next run does not try them
    again."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
    failures: list[str] = []
    # The flag stream never ends by itself: its requests are tested against a real server
    # (tests/rollout/test_flag_stream.py), not by waiting here.
    operations = [
        operation
        for operation in (result.ok() for result in schema.get_all_operations())
        if operation.path not in ENDLESS
    ]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            negative = mode is GenerationMode.NEGATIVE
            if negative and operation.label in nothing_to_negate:
                continue
            try:
                sent = _fuzz(operation, mode, headers, examples, failures)
            except Unsatisfiable:
                # Nothing to make invalid (an operation without parameters or body).
                assert negative, operation.label
                sent = 0
            assert sent or negative, f"{operation.label}: no valid request was made"
            if not sent:
                nothing_to_negate.add(operation.label)
    return failures


def _fuzz(
    operation: Any, mode: GenerationMode, headers: dict[str, str], examples: int, out: list[str]
) -> int:
    """Fuzz one operation in one mode; the number of requests it sent."""
    label = f"{operation.label} ({mode.value})"
    sent = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        # The same examples on every run: CI must not pass or fail by luck. Findings become
        # regression tests of their own (e.g. the 64-bit alert id).
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        nonlocal sent
        sent += 1
        try:
            response = case.call(headers=headers)
        except Exception as exc:  # the test client re-raises what the app did not handle
            out.append(f"{label} → unhandled {exc!r}\n    {case.as_curl_command()}")
            return
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:  # a FailureGroup (or AssertionError) naming each failed check
            out.append(
                f"{label} → {response.status_code}: {_short(exc)}\n"
                f"    body: {response.text[:300]}\n"
                f"    {case.as_curl_command()}"
            )

    run()
    return sent


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:600]}"


def test_no_endpoint_answers_500_with_an_admin_key_or_without_a_key(fuzz_api: Api) -> None:
    """One test for both keys: the operations with nothing to negate are found once."""
    nothing_to_negate: set[str] = set()
    failures = server_errors(fuzz_api, fuzz_api.headers("admin"), 20, nothing_to_negate)
    failures += server_errors(fuzz_api, {}, 8, nothing_to_negate)
    assert not failures, "\n".join(failures[:20])


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

"""Every endpoint of the OpenAPI document, fuzzed by schemathesis (valid and invalid bodies,
parameters and headers), with an admin key and with no key: nothing answers 500.

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


def server_errors(api: Api, headers: dict[str, str], examples: int) -> list[str]:
    """Run every operation in both modes; one line per request that answered 5xx."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz(operation, mode, headers, examples, failures)
            except Unsatisfiable:
                # Nothing to make invalid (an operation without parameters or body).
                assert mode is GenerationMode.NEGATIVE, operation.label
    return failures


def _fuzz(
    operation: Any, mode: GenerationMode, headers: dict[str, str], examples: int, out: list[str]
) -> None:
    label = f"{operation.label} ({mode.value})"

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
        try:
            response = case.call(headers=headers)
        except Exception as exc:  # the test client re-raises what the app did not handle
            out.append(f"{label} → unhandled {exc!r}\n    {case.as_curl_command()}")
            return
        if response.status_code >= 500:
            out.append(
                f"{label} → {response.status_code}: {response.text[:300]}\n"
                f"    {case.as_curl_command()}"
            )

    run()


def test_no_endpoint_answers_500_with_an_admin_key(fuzz_api: Api) -> None:
    failures = server_errors(fuzz_api, fuzz_api.headers("admin"), examples=20)
    assert not failures, "\n".join(failures[:20])


def test_no_endpoint_answers_500_without_a_key(fuzz_api: Api) -> None:
    failures = server_errors(fuzz_api, {}, examples=8)
    assert not failures, "\n".join(failures[:20])

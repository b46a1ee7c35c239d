"""The real OpenFeature client — `openfeature-sdk` with `openfeature-provider-ofrep` —
against a running API (`shadowplane api` under uvicorn on a free port, on PostgreSQL): cloud
in shadow, a sticky share of the edge in canary, cloud past the token cap, after a rollback
and under the kill switch, FLAG_NOT_FOUND for an unknown task, and the provider pausing until
the Retry-After date of a 429."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from openfeature import api as openfeature
from openfeature.client import OpenFeatureClient
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import FlagEvaluationDetails, Reason

from controlplane.client.sticky import sticky_bucket
from controlplane.client.tls import default_tls
from controlplane.db import get_engine, session_scope
from controlplane.keys.service import create_key
from controlplane.rollout.configs import apply_config
from tests.liveapi import ApiServer

pytestmark = pytest.mark.integration

CANARY, FULL = "ticket_route", "invoice_route"
EDGE_PERCENT, CAP = 25, 512
KEYS = 2000


def config(name: str) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "max_input_tokens": CAP,
        "promotion": {"canary_steps": [EDGE_PERCENT]},
    }


@dataclass
class Server:
    base: str
    flags_key: str
    admin_key: str

    def act(self, path: str, **body: Any) -> None:
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        response = httpx.post(
            f"{self.base}{path}", json=body, headers=headers, timeout=30, verify=default_tls()
        )
        assert response.status_code == 200, response.text

    def provider(self, **headers: str) -> OFREPProvider:
        """The OFREP provider, sending `headers` (the key) with every evaluation."""
        return OFREPProvider(self.base, headers_factory=lambda: dict(headers), timeout=10)

    def client(self, domain: str, **headers: str) -> OpenFeatureClient:
        """An OpenFeature client on its own domain, through the OFREP provider."""
        openfeature.set_provider(self.provider(**headers), domain=domain)
        return openfeature.get_client(domain)


def serve(url: str, log: Path, **settings: str) -> Iterator[Server]:
    engine = get_engine(url)
    with session_scope(engine) as session:
        _, flags_key = create_key(session, name="router", scopes=["flags:read"], actor="test")
        _, admin_key = create_key(session, name="ops", scopes=["admin"], actor="test")
        for name in (CANARY, FULL):
            apply_config(session, config(name), actor="test")
    process = ApiServer(url, log, settings=settings).start()
    try:
        yield Server(process.base, flags_key, admin_key)
    finally:
        openfeature.clear_providers()
        process.stop()


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[Server]:
    yield from serve(pg_url, tmp_path / "api.log")


def ask(
    client: OpenFeatureClient, task: str, key: str | None, tokens: int | None = 100
) -> FlagEvaluationDetails[str]:
    attributes = {} if tokens is None else {"input_tokens": tokens}
    context = EvaluationContext(targeting_key=key, attributes=attributes)
    return client.get_string_details(task, "cloud", context)


def answer(details: FlagEvaluationDetails[str]) -> tuple[str, str | None, Any]:
    assert details.error_code is None, (details.error_code, details.error_message)
    return details.value, details.variant, details.reason


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Every API process follows flag changes within about a second; look until it has."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the answer did not change"
        time.sleep(0.02)


def test_the_openfeature_client_routes_as_the_flags_say(server: Server) -> None:
    client = server.client("ofrep-test", **{"X-API-Key": server.flags_key})
    sessions = [f"session-{i}" for i in range(KEYS)]

    # Shadow: the cloud serves every request, the edge runs beside it.
    for key in sessions[:50]:
        assert answer(ask(client, CANARY, key)) == ("cloud", "shadow", Reason.STATIC)
    shadow = ask(client, CANARY, "session-0")
    assert shadow.flag_metadata["stage"] == "shadow" and shadow.flag_metadata["version"] == 1

    # Canary at 25%: exactly the sessions whose sticky bucket is under 25 take the edge.
    server.act(f"/v1/tasks/{CANARY}/promote", reason="canary", force=True)
    wait_until(lambda: ask(client, CANARY, "session-0").reason == Reason.SPLIT)
    served = {key: answer(ask(client, CANARY, key)) for key in sessions}
    edge = {key for key, (value, _, _) in served.items() if value == "edge"}
    expected = {key for key in sessions if (sticky_bucket(CANARY, key) or 0) < EDGE_PERCENT}
    assert edge == expected
    assert all(served[k] == ("edge", "edge", Reason.SPLIT) for k in edge)
    assert all(served[k] == ("cloud", "shadow", Reason.SPLIT) for k in set(sessions) - edge)
    # Near edge_percent: within four standard errors of a fair 25% draw of 2,000 keys.
    share, p = len(edge) / KEYS, EDGE_PERCENT / 100
    assert abs(share - p) <= 4 * math.sqrt(p * (1 - p) / KEYS), share
    metadata = ask(client, CANARY, "session-0").flag_metadata
    assert (metadata["stage"], metadata["edge_percent"], metadata["version"]) == ("canary", 25, 2)

    # Past max_input_tokens (or without a token count) the cloud serves, whatever the bucket.
    for key in sorted(edge)[:20]:
        assert answer(ask(client, CANARY, key, tokens=CAP)) == ("edge", "edge", Reason.SPLIT)
        past = ("cloud", "shadow", Reason.TARGETING_MATCH)
        assert answer(ask(client, CANARY, key, tokens=CAP + 1)) == past
        assert answer(ask(client, CANARY, key, tokens=None)) == past

    # A canary without a sticky key: the provider's error, the caller's default (cloud).
    missing = ask(client, CANARY, None)
    assert (missing.value, missing.error_code) == ("cloud", ErrorCode.TARGETING_KEY_MISSING)
    assert "targetingKey" in (missing.error_message or "")

    # An unknown task: FLAG_NOT_FOUND, and the default.
    unknown = ask(client, "no_such_task", "session-1")
    assert (unknown.value, unknown.error_code) == ("cloud", ErrorCode.FLAG_NOT_FOUND)
    assert "no_such_task" in (unknown.error_message or "")

    # A rollback: every session back on the cloud (the edge keeps running in shadow).
    first = sorted(edge)[0]
    server.act(f"/v1/tasks/{CANARY}/rollback", reason="regression")
    wait_until(lambda: ask(client, CANARY, first).value == "cloud")
    for key in sorted(edge):
        assert answer(ask(client, CANARY, key)) == ("cloud", "shadow", Reason.DISABLED)

    # Full: the edge for everything within the cap — until the kill switch.
    for _ in range(2):
        server.act(f"/v1/tasks/{FULL}/promote", reason="full", force=True)
    wait_until(lambda: ask(client, FULL, None).value == "edge")
    assert answer(ask(client, FULL, None)) == ("edge", "edge", Reason.STATIC)
    # The same answers through Authorization: Bearer.
    bearer = server.client("ofrep-bearer", Authorization=f"Bearer {server.flags_key}")
    assert answer(ask(bearer, FULL, "session-3")) == ("edge", "edge", Reason.STATIC)

    server.act("/v1/kill", reason="incident")
    wait_until(lambda: ask(client, FULL, None).value == "cloud")
    for task in (CANARY, FULL):
        for key in [None, *sessions[:100]]:
            assert answer(ask(client, task, key)) == ("cloud", "cloud", Reason.DISABLED)
            assert answer(ask(client, task, key, tokens=1)) == ("cloud", "cloud", Reason.DISABLED)
    assert ask(client, FULL, None).flag_metadata["killed"] is True


@pytest.fixture
def tight_server(pg_url: str, tmp_path: Path) -> Iterator[Server]:
    # Three evaluations, then about one every 100 s: nothing refills during the test.
    rate = {"SHADOWPLANE_RATE_FLAGS_PER_SECOND": "0.01", "SHADOWPLANE_RATE_FLAGS_BURST": "3"}
    yield from serve(pg_url, tmp_path / "api.log", **rate)


def test_the_provider_waits_for_the_retry_after_date(tight_server: Server) -> None:
    server = tight_server
    provider = server.provider(**{"X-API-Key": server.flags_key})
    openfeature.set_provider(provider, domain="ofrep-limited")
    client = openfeature.get_client("ofrep-limited")
    for _ in range(3):
        assert answer(ask(client, FULL, "s-1")) == ("cloud", "shadow", Reason.STATIC)
    refused = ask(client, FULL, "s-1")
    assert (refused.value, refused.error_code) == ("cloud", ErrorCode.GENERAL)
    assert "Rate limited" in (refused.error_message or "")
    # The provider read the date and holds off until then, without asking the server.
    assert provider.retry_after is not None
    wait = (provider.retry_after - datetime.now(UTC)).total_seconds()
    assert 60 < wait <= 101, wait
    paused = ask(client, FULL, "s-1")
    assert paused.error_code == ErrorCode.GENERAL
    assert "paused" in (paused.error_message or "")

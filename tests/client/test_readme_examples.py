"""README, "For routing services": the code a router's author copies runs as written. The
router in fifteen lines, the OpenFeature snippet and the webhook receiver are read out of
README.md and run — the first two against a running API (`shadowplane api`), the receiver
under a test client — with only the README's placeholders filled in (the URL, the models,
`LABELS`, `handle`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.client import FlagClient, ResultReporter
from controlplane.notify.signing import signature
from tests.liveapi import ApiServer, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
README_URL = '"http://127.0.0.1:8000"'


def python_block(after: str) -> str:
    """The first ```python block of the README after the text `after`."""
    text = README.read_text(encoding="utf-8")
    assert after in text, after
    rest = text.split(after, 1)[1]
    return rest.split("```python\n", 1)[1].split("```", 1)[0]


class Model:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls = 0

    def classify(self, text: str) -> str:
        self.calls += 1
        return self.answer


def ticket(i: int, **overrides: Any) -> dict[str, Any]:
    return {
        "text": f"ticket {i}",
        "session_id": f"s-{i}",
        "tokens": 100,
        "language": "en",
        **overrides,
    }


def stored(api: ApiServer, request_id: str) -> dict[str, Any]:
    response = api.call("GET", f"/v1/results/ticket_classify/{request_id}", scope="read")
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_router_in_fifteen_lines_routes_by_the_flag_and_reports(
    live_api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = live_api.start()
    code = python_block("A router in fifteen lines")
    assert code.count(README_URL) == 1 and "/var/lib/router/flags.json" in code
    code = code.replace(README_URL, repr(api.base)).replace(
        "/var/lib/router/flags.json", str(tmp_path / "flags.json")
    )
    monkeypatch.setenv("SHADOWPLANE_KEY", api.keys["router"])  # ingest and flags:read
    small, large = Model("refund"), Model("exchange")
    namespace: dict[str, Any] = {
        "small_model": small,
        "large_model": large,
        "LABELS": {"refund", "exchange", "complaint", "inquiry"},
    }
    exec(compile(code, "README.md", "exec"), namespace)
    flags: FlagClient = namespace["flags"]
    reporter: ResultReporter = namespace["reporter"]
    classify = namespace["classify"]
    sent: list[dict[str, Any]] = []
    report = reporter.report

    def recording(result: dict[str, Any]) -> bool:
        queued = report(result)
        sent.append(result)
        return queued

    reporter.report = recording  # type: ignore[method-assign]
    try:
        assert flags.wait_ready(30)
        # Shadow: the cloud answers.
        assert classify(ticket(1)) == "exchange"
        while (flag := flags.flag("ticket_classify")) and flag["stage"] != "full":
            api.call(
                "POST", "/v1/tasks/ticket_classify/promote", json={"reason": "t", "force": True}
            ).raise_for_status()
            wait_until(
                lambda v=flag["version"]: flags.flag("ticket_classify")["version"] > v,  # type: ignore[index]
                "the client to hear the promotion",
            )
        # Full: the edge answers; the router's own rules still send a request to the cloud.
        assert classify(ticket(2)) == "refund"
        assert classify(ticket(3, language="fr")) == "exchange"
        # An edge answer `validate` refuses is never served.
        small.answer = "not a label"
        assert classify(ticket(4)) == "exchange"
        # Each result is reported when its side run ends, on another thread: the router
        # closes its reporter as soon as its requests are answered, and close waits for
        # the side runs still going.
        assert reporter.close(timeout=60) is True
        assert len(sent) == 4
    finally:
        flags.close()
    assert reporter.accepted == 4 and reporter.dropped == 0
    # Each call was reported with what it served and why, stored once. In call order: a
    # result is reported when its side run ends (another thread), so two may swap.
    sent.sort(key=lambda result: str(result["session_id"]))
    rows = [stored(api, str(result["request_id"])) for result in sent]
    assert [(r["decision"], r["served"], r["degraded"]) for r in rows] == [
        ("edge", "cloud", False),
        ("edge", "edge", False),
        ("cloud", "cloud", False),
        ("edge", "cloud", True),
    ]
    assert rows[3]["edge"]["error"] == "invalid"
    assert rows[1]["flag_version"] == flags.flag("ticket_classify")["version"]  # type: ignore[index]


def test_the_webhook_receiver_takes_a_signed_delivery_once_and_refuses_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "receiver-secret"
    monkeypatch.setenv("SHADOWPLANE_WEBHOOK_SECRET", secret)
    handled: list[bytes] = []
    namespace: dict[str, Any] = {"handle": handled.append}
    code = python_block("give it the raw body:")
    exec(compile(code, "README.md", "exec"), namespace)
    app = namespace["app"]
    body = json.dumps({"delivery_id": "d-1", "kind": "decision"}).encode()

    def headers(delivery: str, sign_with: str = secret, at: int | None = None) -> dict[str, str]:
        t = int(time.time()) if at is None else at
        return {
            "X-Shadowplane-Delivery": delivery,
            "X-Shadowplane-Signature": signature(sign_with, t, body),
            "Content-Type": "application/json",
        }

    with TestClient(app) as client:
        assert client.post("/shadowplane", content=body, headers=headers("d-1")).status_code == 200
        # The same delivery again (a retry): answered, handled once.
        assert client.post("/shadowplane", content=body, headers=headers("d-1")).status_code == 200
        assert handled == [body]
        # Another secret, an old timestamp (a replay), another delivery id than the body's.
        for refused in (
            headers("d-1", sign_with="another"),
            headers("d-1", at=int(time.time()) - 3600),
            headers("d-2"),
        ):
            assert client.post("/shadowplane", content=body, headers=refused).status_code == 401
        assert handled == [body]


def test_the_openfeature_snippet_routes_by_the_flag_and_errors_go_to_the_cloud(
    live_api: ApiServer,
) -> None:
    from openfeature import api as openfeature

    api = live_api.start()
    code = python_block("In Python\n(`pip install openfeature-sdk openfeature-provider-ofrep`):")
    assert '"ticket_classify"' in code and '"input_tokens": 812' in code

    def run(key: str, *, task: str = "ticket_classify", tokens: int = 812) -> dict[str, Any]:
        snippet = code.replace('"ticket_classify"', repr(task)).replace(
            '"input_tokens": 812', f'"input_tokens": {tokens}'
        )
        namespace: dict[str, Any] = {"URL": api.base, "KEY": key, "session_id": "s-1"}
        try:
            exec(compile(snippet, "README.md", "exec"), namespace)
        finally:
            openfeature.shutdown()
        return namespace

    flags_key = api.keys["flags"]
    shadow = run(flags_key, tokens=100)
    assert (shadow["served"], shadow["details"].variant) == ("cloud", "shadow")
    assert shadow["meta"]["version"] >= 1
    for _ in range(10):
        if api.call("GET", "/v1/flags/ticket_classify", scope="flags").json()["stage"] == "full":
            break
        api.call(
            "POST", "/v1/tasks/ticket_classify/promote", json={"reason": "t", "force": True}
        ).raise_for_status()
    full = run(flags_key, tokens=100)
    assert (full["served"], full["details"].variant) == ("edge", "edge")
    assert full["meta"]["version"] > shadow["meta"]["version"]
    # The README's 812 tokens are past the task's cap (512 here): the cloud.
    assert run(flags_key)["served"] == "cloud"
    # Errors take the default value, "cloud": a task the API does not know, a key it refuses.
    assert run(flags_key, task="no_such_task", tokens=100)["served"] == "cloud"
    assert run("sp_not_a_key", tokens=100)["served"] == "cloud"
    assert run(flags_key, tokens=100)["served"] == "edge"

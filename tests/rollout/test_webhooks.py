"""Webhooks: every decision and alert is POSTed, signed; a failing receiver never blocks a decision."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from controlplane.client import verify_signature
from tests.conftest import make_api

SECRET = "s3cret"


class Receiver:
    def __init__(self, status: int = 200) -> None:
        self.received: list[tuple[bytes, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append((body, self.headers.get("X-Shadowplane-Signature", "")))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait(self, n: int) -> list[tuple[bytes, str]]:
        deadline = time.monotonic() + 20
        while len(self.received) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.received


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_a_decision_is_posted_signed_with_an_explanation_and_links(
    sqlite_url: str, receiver: Receiver
) -> None:
    for api in make_api(
        sqlite_url,
        webhook_urls=f"{receiver.url}, http://127.0.0.1:9/unreachable",
        webhook_secret=SECRET,
        public_url="https://shadowplane.example",
    ):
        answer = api.client.post(
            "/v1/tasks/ticket_classify/rollback", json={"reason": "pager"}, headers=api.headers()
        )
        assert answer.status_code == 200  # the unreachable receiver blocks nothing
        body, signature = receiver.wait(1)[0]
        assert verify_signature(SECRET, {"X-Shadowplane-Signature": signature}, body)
        document = json.loads(body)
        assert (document["task"], document["action"], document["actor"]) == (
            "ticket_classify",
            "rollback",
            "admin-key",
        )
        assert document["explanation"] == "rolled back by hand: pager"
        assert document["links"]["task"] == "https://shadowplane.example/v1/tasks/ticket_classify"
        assert (
            document["evidence"]["flag_version_after"]
            == document["evidence"]["flag_version_before"] + 1
        )


def test_alerts_are_posted_too(sqlite_url: str, receiver: Receiver) -> None:
    from datetime import UTC, datetime, timedelta

    from controlplane.scheduler import run_pass

    for api in make_api(sqlite_url, webhook_urls=receiver.url, webhook_secret=SECRET):
        run_pass(api.engine, datetime.now(UTC) + timedelta(hours=1))
        documents = [json.loads(b) for b, _ in receiver.wait(2)]
        assert {(d["kind"], d["action"], d["rule"]) for d in documents} == {
            ("alert", "alert_opened", "no_traffic")
        }
        assert {d["task"] for d in documents} == {"ticket_classify", "invoice_extract"}

"""OFREP keeps one request's work small: context ids are held to the length ingest stores
(INVALID_CONTEXT naming the field and the limit), an evaluation body to a few KiB, and a
running API keeps answering everyone else while evaluation bodies at every limit arrive."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

from controlplane.client.tls import default_tls
from controlplane.ingest.schemas import MAX_ID_LENGTH, ResultIn
from controlplane.rollout.ofrep import MAX_EVALUATION_BODY_BYTES, Refused, read_context
from tests.conftest import Api
from tests.rollout.test_ofrep_openfeature import Server, serve

ONE = "/ofrep/v1/evaluate/flags/{}"
BULK = "/ofrep/v1/evaluate/flags"
COMPARATOR = {"kind": "label", "labels": ["refund", "exchange"]}
CANARIES = ("bound_a", "bound_b", "bound_c")
FIELDS = ("targetingKey", "session_id", "user_id")
RESULT = {
    "request_id": "r-1", "task": "bound_a", "input_tokens": 1, "decision": "cloud",
    "served": "cloud", "cloud": {"output": "refund"},
}  # fmt: skip


def test_the_bound_is_the_one_ingest_holds_ids_to() -> None:
    results = TypeAdapter(ResultIn)
    for name in ("session_id", "user_id"):
        fine = {**RESULT, name: "k" * MAX_ID_LENGTH}
        assert results.validate_python(fine)[name] == fine[name]  # type: ignore[literal-required]
        with pytest.raises(ValidationError, match=name):
            results.validate_python({**RESULT, name: "k" * (MAX_ID_LENGTH + 1)})


@pytest.mark.parametrize("field", FIELDS)
def test_read_context_refuses_an_id_over_ingests_limit(field: str) -> None:
    longest = "k" * MAX_ID_LENGTH
    assert read_context(orjson_body({field: longest, "input_tokens": 1})) is not None
    with pytest.raises(Refused) as refused:
        read_context(orjson_body({field: longest + "k", "input_tokens": 1}))
    assert refused.value.code == "INVALID_CONTEXT"
    assert refused.value.details == (
        f"context.{field}: at most {MAX_ID_LENGTH} characters, the longest session or user "
        f"id ingest stores (got {MAX_ID_LENGTH + 1})"
    )
    # Characters, as ingest counts them, not bytes.
    assert read_context(orjson_body({field: "é" * MAX_ID_LENGTH})) is not None


def orjson_body(context: dict[str, Any]) -> bytes:
    return orjson.dumps({"context": context})


@pytest.fixture
def canary(api: Api) -> Api:
    for name in CANARIES:
        created = api.client.post(
            "/v1/tasks", json={"task": name, "comparator": COMPARATOR}, headers=api.headers()
        )
        assert created.status_code == 201, created.text
        promoted = api.client.post(
            f"/v1/tasks/{name}/promote", json={"reason": "test", "force": True},
            headers=api.headers(),
        )  # fmt: skip
        assert promoted.status_code == 200, promoted.text
    return api


def test_an_over_long_key_is_invalid_context_naming_the_field_and_the_limit(canary: Api) -> None:
    read = canary.headers("flags:read")
    for field in FIELDS:
        context = {field: "x" * 60_000, "input_tokens": 10}  # within the body limit
        one = canary.client.post(ONE.format("bound_a"), json={"context": context}, headers=read)
        assert one.status_code == 400, one.text
        body = one.json()
        assert (body["key"], body["errorCode"]) == ("bound_a", "INVALID_CONTEXT")
        assert f"context.{field}: at most {MAX_ID_LENGTH} characters" in body["errorDetails"]
        bulk = canary.client.post(BULK, json={"context": context}, headers=read)
        assert bulk.status_code == 400, bulk.text
        assert bulk.json()["errorCode"] == "INVALID_CONTEXT"
        assert f"context.{field}: at most {MAX_ID_LENGTH}" in bulk.json()["errorDetails"]
    # At the limit: evaluated.
    fine = {"targetingKey": "x" * MAX_ID_LENGTH, "input_tokens": 10}
    answer = canary.client.post(ONE.format("bound_a"), json={"context": fine}, headers=read)
    assert answer.status_code == 200 and answer.json()["reason"] == "SPLIT", answer.text
    assert canary.client.post(BULK, json={"context": fine}, headers=read).status_code == 200


def test_an_evaluation_body_past_its_limit_is_413_before_it_is_parsed(canary: Api) -> None:
    read = {**canary.headers("flags:read"), "Content-Type": "application/json"}
    padding = b" " * (MAX_EVALUATION_BODY_BYTES - 40)
    within = b'{"context": {"input_tokens": 1}}' + padding
    assert len(within) <= MAX_EVALUATION_BODY_BYTES
    assert (
        canary.client.post(ONE.format("bound_a"), content=within, headers=read).json()["errorCode"]
        == "TARGETING_KEY_MISSING"
    )
    over = b'{"context": {"input_tokens": 1}}' + b" " * MAX_EVALUATION_BODY_BYTES
    for path in (ONE.format("bound_a"), BULK):
        refused = canary.client.post(path, content=over, headers=read)
        assert refused.status_code == 413, refused.text
        assert refused.json()["detail"].startswith(
            f"body: larger than the {MAX_EVALUATION_BODY_BYTES}-byte limit of an evaluation"
        )
        assert f"at most {MAX_ID_LENGTH} characters" in refused.json()["detail"]
        # A key too long for the body limit is refused there, before it is read.
        context = {"context": {"targetingKey": "k" * MAX_EVALUATION_BODY_BYTES}}
        long_key = canary.client.post(path, json=context, headers=read)
        assert long_key.status_code == 413, long_key.text


# --- a running API -------------------------------------------------------------------------


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[Server]:
    for running in serve(pg_url, tmp_path / "api.log"):
        admin = {"Authorization": f"Bearer {running.admin_key}"}
        for name in CANARIES:
            created = httpx.post(
                f"{running.base}/v1/tasks",
                json={"task": name, "comparator": COMPARATOR},
                headers=admin,
                timeout=30,
                verify=default_tls(),
            )
            assert created.status_code == 201, created.text
            running.act(f"/v1/tasks/{name}/promote", reason="test", force=True)
        yield running


def _chunks(body: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.integration
def test_long_keys_at_every_body_limit_do_not_stop_the_api_answering(server: Server) -> None:
    """While evaluation bodies as large as the API accepts, full of one long targetingKey,
    arrive on several connections at once, /healthz keeps answering. (Each of them once
    took seconds of hashing on the event loop: every other request waited.)"""
    settings_limit = 16 * 1024 * 1024  # SHADOWPLANE_MAX_BODY_BYTES' default
    headers = {"X-API-Key": server.flags_key, "Content-Type": "application/json"}

    def body(size: int) -> bytes:
        head, tail = b'{"context": {"input_tokens": 10, "targetingKey": "', b'"}}'
        return head + b"k" * (size - len(head) - len(tail)) + tail

    at_api_limit, at_evaluation_limit = body(settings_limit), body(MAX_EVALUATION_BODY_BYTES)
    assert len(at_api_limit) == settings_limit
    # Small attributes instead: parsing them alone once held the interpreter for a second.
    attributes = b",".join(b'"a%d":%d' % (i, i) for i in range(1_000_000))
    many = b'{"context":{' + attributes[: settings_limit - 20].rsplit(b",", 1)[0] + b"}}"
    assert len(many) <= settings_limit
    answers: list[Any] = []

    def post(path: str, content: Any) -> None:
        try:
            with httpx.Client(timeout=120, verify=default_tls()) as client:
                answers.append(client.post(server.base + path, content=content, headers=headers))
        except httpx.TransportError as exc:  # a refused body may close the connection early
            answers.append(exc)

    cases = [
        (ONE.format("bound_a"), at_api_limit),
        (BULK, at_api_limit),
        (BULK, _chunks(at_api_limit)),  # no Content-Length: counted while it is read
        (ONE.format("bound_b"), at_evaluation_limit),
        (BULK, at_evaluation_limit),
        (BULK, many),
    ]
    senders = [
        threading.Thread(target=post, args=case, daemon=True) for case in cases for _ in range(2)
    ]
    health: list[int | str] = []
    with httpx.Client(timeout=5, verify=default_tls()) as poll:
        for t in senders:
            t.start()
        while any(t.is_alive() for t in senders) or len(health) < 20:
            try:
                health.append(poll.get(f"{server.base}/healthz").status_code)
            except httpx.HTTPError as exc:
                health.append(repr(exc))
            assert len(health) < 3000, "the evaluations did not finish"
            threading.Event().wait(0.05)
    for t in senders:
        t.join(timeout=120)
    assert health and all(h == 200 for h in health), [h for h in health if h != 200][:5]
    statuses = sorted(a.status_code for a in answers if isinstance(a, httpx.Response))
    assert len(answers) == len(senders)
    # Every answer is a refusal: over the evaluation limit (413), or a key over the id limit.
    # (A refused body may also close its connection before the answer is read.)
    assert set(statuses) <= {400, 413}, statuses
    assert statuses.count(400) == 4, statuses
    for a in answers:
        if isinstance(a, httpx.Response) and a.status_code == 400:
            assert "context.targetingKey: at most" in a.json()["errorDetails"]

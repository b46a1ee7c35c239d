"""Ingest under `payload_policy: redacted`: only masked text reaches the database, and the
comparison is the one on the original text."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from controlplane.api import create_app
from controlplane.client.sticky import sticky_bucket
from controlplane.compare.comparators import compare
from controlplane.db import make_engine, session_scope
from controlplane.ingest import service
from controlplane.models import Payload
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings
from tests.conftest import Api, make_api, make_result

# Runs once with each reader (the text_reader parameter, tests/conftest.py).
pytestmark = pytest.mark.text_reader

REPLY_TASK: dict[str, Any] = {
    "task": "reply_rewrite",
    "comparator": {"kind": "text_conservation", "length_ratio": [0.7, 1.4]},
    "payload_policy": "redacted",
    "keep_agreeing_rate": 1.0,  # keep every payload, so every one can be checked
}
SECRETS = [
    "zhang.san@example.com",
    "13800138000",
    "138 0013 8000",
    "11010519491231002X",
    "4111 1111 1111 1111",
    "192.168.1.10",
    "INV-2024-001",
    "987654321",
]
RESULTS = [
    # (edge, cloud): a faithful rewrite, a dropped negation, a changed number, an edge error.
    (
        "您好，退款已退回 zhang.san@example.com 对应的账户。如有问题请致电 13800138000。",
        "您好，退款已经退回到 zhang.san@example.com 的账户。如有疑问请拨打 138 0013 8000。",
    ),
    (
        "We can refund order INV-2024-001 to card 4111 1111 1111 1111.",
        "We cannot refund order INV-2024-001 to card 4111 1111 1111 1111.",
    ),
    ("身份证 11010519491231002X 的用户退款三百元。", "身份证 11010519491231002X 的用户退款500元。"),
]


@pytest.fixture
def reply_api(db_url: str) -> Iterator[Api]:
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(session, REPLY_TASK, actor="test")
        yield api


def test_only_masked_text_is_stored_and_outcomes_are_the_originals(reply_api: Api) -> None:
    api = reply_api
    results = [
        make_result(
            request_id=f"rw-{i}",
            task="reply_rewrite",
            input={"text": f"客户 zhang.san@example.com 来电 13800138000，单号 987654321：{cloud}"},
            edge={"output": edge},
            cloud={"output": cloud},
        )
        for i, (edge, cloud) in enumerate(RESULTS)
    ]
    results.append(
        make_result(
            request_id="rw-err",
            task="reply_rewrite",
            input={"text": "IP 192.168.1.10"},
            edge={
                "output": None,
                "error": "timeout",
                "error_message": "no answer from 192.168.1.10",
            },
            cloud={"output": "ok"},
        )
    )
    assert api.post_results({"results": results}).json() == {
        "accepted": 4,
        "duplicates": 0,
        "rejected": [],
    }

    # Read the stored payloads back raw, as text, bypassing every model.
    with api.engine.connect() as conn:
        raw = [
            " ".join(str(v) for v in row) for row in conn.execute(text("SELECT * FROM payloads"))
        ]
    assert len(raw) == 4
    for secret in SECRETS:
        assert all(secret not in row for row in raw), secret
    joined = " ".join(raw)
    for placeholder in (
        "<EMAIL_1>",
        "<PHONE_1>",
        "<IDCARD_1>",
        "<CARD_1>",
        "<IP_1>",
        "<ID_1>",
        "<NUM_1>",
    ):
        assert placeholder in joined, placeholder

    spec = REPLY_TASK["comparator"]
    for i, (edge, cloud) in enumerate(RESULTS):
        stored = api.client.get(
            f"/v1/results/reply_rewrite/rw-{i}", headers=api.headers("read")
        ).json()
        assert stored["comparison"]["outcome"] == compare(spec, edge, cloud).outcome
    outcomes = [
        api.client.get(f"/v1/results/reply_rewrite/rw-{i}", headers=api.headers("read")).json()[
            "comparison"
        ]["outcome"]
        for i in range(3)
    ]
    assert outcomes == ["agree", "conflict", "conflict"]

    dropped = api.client.get("/v1/results/reply_rewrite/rw-1", headers=api.headers("read")).json()
    assert dropped["payload"]["policy"] == "redacted"
    assert dropped["payload"]["edge_output"] == "We can refund order <ID_1> to card <CARD_1>."
    assert dropped["comparison"]["diff"]["failed"] == ["negations"]
    err = api.client.get("/v1/results/reply_rewrite/rw-err", headers=api.headers("read")).json()
    assert err["payload"]["edge_error_message"] == "no answer from <IP_1>"
    assert err["payload"]["input"] == {"text": "IP <IP_1>", "segments": None}


def test_the_same_value_is_one_placeholder_across_input_and_outputs(reply_api: Api) -> None:
    api = reply_api
    api.post_results(
        make_result(
            request_id="same",
            task="reply_rewrite",
            input={"text": "写信给 ann@example.com"},
            edge={"output": "已回复 ann@example.com。"},
            cloud={"output": "已回复 bob@example.com。"},
        )
    )
    with api.engine.connect() as conn:
        payload = conn.execute(
            select(Payload.input, Payload.edge_output, Payload.cloud_output)
        ).one()
    assert payload.input["text"] == "写信给 <EMAIL_1>"
    assert payload.edge_output == "已回复 <EMAIL_1>。"
    assert payload.cloud_output == "已回复 <EMAIL_2>。"


# --- ids, sticky buckets and degrade reasons under each policy ----------------------------

RAW_SESSION = "sess-alice-7731"
RAW_USER = "alice.smith@example.org"
PERSONAL = [
    RAW_SESSION,
    RAW_USER,
    "bob.jones@example.net",
    "13800138000",
    "13900139000",
    "carol@example.com",
]


def degraded_result(request_id: str, task: str, **overrides: Any) -> dict[str, Any]:
    """A degraded result whose ids, reason, input (keys too) and outputs hold personal data."""
    fields: dict[str, Any] = dict(
        request_id=request_id,
        task=task,
        ts=datetime.now(UTC).isoformat(),
        session_id=RAW_SESSION,
        user_id=RAW_USER,
        served="cloud",
        degraded=True,
        degrade_reason="low confidence; user bob.jones@example.net asked to call 13900139000",
        input={
            "text": "客户 bob.jones@example.net 来电 13800138000，要求退款。",
            "contact": {"carol@example.com": "13900139000"},
        },
        edge={
            "output": None,
            "error": "timeout",
            "error_message": "no answer for carol@example.com",
        },
        cloud={"output": "已为 bob.jones@example.net 退款，请拨打 13800138000。"},
    )
    return make_result(**{**fields, **overrides})


def every_stored_value(api: Api) -> str:
    """Every column of every results and payloads row, as text, read past the models."""
    with api.engine.connect() as conn:
        rows = [
            *conn.execute(text("SELECT * FROM results")),
            *conn.execute(text("SELECT * FROM payloads")),
        ]
    return "\n".join(" ".join(str(v) for v in row) for row in rows)


def expected_hash(key: bytes, value: str) -> str:
    return "h:" + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()[:32]


def db_secret(api: Api) -> bytes:
    with api.engine.connect() as conn:
        values = list(conn.scalars(text("SELECT value FROM server_secrets")))
    assert len(values) == 1
    return bytes.fromhex(values[0])


def test_under_redacted_nothing_personal_is_stored_or_returned(reply_api: Api) -> None:
    api = reply_api
    response = api.post_results(degraded_result("red-1", "reply_rewrite"))
    assert response.json()["accepted"] == 1, response.text
    view = api.client.get("/v1/results/reply_rewrite/red-1", headers=api.headers("read"))
    stored, returned = every_stored_value(api), view.text
    for value in PERSONAL:
        assert value not in stored, value
        assert value not in returned, value

    answer = view.json()
    key = db_secret(api)
    assert answer["session_id"] == expected_hash(key, RAW_SESSION)
    assert answer["user_id"] == expected_hash(key, RAW_USER)
    assert answer["sticky_bucket"] == sticky_bucket("reply_rewrite", RAW_SESSION)
    assert answer["degraded"] is True
    assert answer["degrade_reason"] == "low confidence; user <EMAIL_1> asked to call <PHONE_1>"
    assert answer["payload"]["policy"] == "redacted"
    with api.engine.connect() as conn:
        row = conn.execute(text("SELECT session_id, user_id, sticky_bucket FROM results")).one()
    assert tuple(row) == (answer["session_id"], answer["user_id"], answer["sticky_bucket"])


def test_under_none_no_free_text_and_no_raw_id_is_stored(api: Api) -> None:
    # invoice_extract keeps no payload (payload_policy: none).
    result = degraded_result(
        "none-1",
        "invoice_extract",
        cloud={"output": {"amount": 3, "currency": "EUR", "note": "bob.jones@example.net"}},
    )
    assert api.post_results(result).json()["accepted"] == 1
    view = api.client.get("/v1/results/invoice_extract/none-1", headers=api.headers("read"))
    stored, returned = every_stored_value(api), view.text
    for value in PERSONAL:
        assert value not in stored, value
        assert value not in returned, value
    answer = view.json()
    assert answer["degraded"] is True and answer["degrade_reason"] is None
    assert answer["payload"] is None
    key = db_secret(api)
    assert answer["session_id"] == expected_hash(key, RAW_SESSION)
    assert answer["user_id"] == expected_hash(key, RAW_USER)
    assert answer["sticky_bucket"] == sticky_bucket("invoice_extract", RAW_SESSION)


def test_under_full_ids_are_kept_and_the_sticky_bucket_follows_sticky_by(api: Api) -> None:
    with session_scope(api.engine) as session:
        apply_config(
            session,
            {"task": "by_user", "comparator": {"kind": "label"}, "sticky_by": "user"},
            actor="test",
        )
    results = [
        make_result(request_id="full-1", session_id="s-1", user_id="u-9", degrade_reason=None),
        make_result(request_id="by-user", task="by_user", session_id="s-1", user_id="u-9"),
        make_result(request_id="no-key", task="by_user", session_id="s-1", user_id=None),
        make_result(request_id="no-session", session_id=None, user_id="u-9"),
    ]
    assert api.post_results({"results": results}).json()["accepted"] == 4

    def view(task: str, rid: str) -> dict[str, Any]:
        response = api.client.get(f"/v1/results/{task}/{rid}", headers=api.headers("read"))
        return dict(response.json())

    full = view("ticket_classify", "full-1")
    assert (full["session_id"], full["user_id"]) == ("s-1", "u-9")
    assert full["sticky_bucket"] == sticky_bucket("ticket_classify", "s-1") == 84
    assert view("by_user", "by-user")["sticky_bucket"] == sticky_bucket("by_user", "u-9")
    assert view("by_user", "no-key")["sticky_bucket"] is None
    assert view("ticket_classify", "no-session")["sticky_bucket"] is None


def test_the_id_secret_is_generated_once_and_shared(db_url: str) -> None:
    # Two engines of their own (two processes) on one database agree on the key...
    engines = [make_engine(db_url), make_engine(db_url)]
    try:
        keys = []
        for engine in engines:
            with session_scope(engine) as session:
                keys.append(service.id_hash_key(session, None))
    finally:
        for engine in engines:
            engine.dispose()
    assert keys[0] == keys[1] and len(keys[0]) == 32

    # ...and so do two apps: the second reads what the first generated.
    for api in make_api(db_url):
        assert api.post_results(degraded_result("app-1", "invoice_extract")).json()["accepted"]
        other = create_app(Settings(database_url=db_url, tick_seconds=0))
        with TestClient(other) as client:
            response = client.post(
                "/v1/results",
                json=degraded_result("app-2", "invoice_extract"),
                headers=api.headers("ingest"),
            )
            assert response.json()["accepted"] == 1, response.text
        with api.engine.connect() as conn:
            hashes = set(conn.scalars(text("SELECT session_id FROM results")))
        assert hashes == {expected_hash(keys[0], RAW_SESSION)}
        assert db_secret(api) == keys[0]


def test_a_configured_id_secret_wins(db_url: str) -> None:
    for api in make_api(db_url, id_hash_secret="configured-secret"):
        assert api.post_results(degraded_result("conf-1", "invoice_extract")).json()["accepted"]
        with api.engine.connect() as conn:
            row = conn.execute(text("SELECT session_id, user_id FROM results")).one()
            generated = list(conn.scalars(text("SELECT value FROM server_secrets")))
        assert tuple(row) == (
            expected_hash(b"configured-secret", RAW_SESSION),
            expected_hash(b"configured-secret", RAW_USER),
        )
        assert generated == []  # the database's key is neither made nor read

"""Ingest under `payload_policy: redacted`: only masked text reaches the database, and the
comparison is the one on the original text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, text

from controlplane.catalog.service import apply_config
from controlplane.db import session_scope
from controlplane.ingest.comparators import compare
from controlplane.models import Payload
from tests.conftest import Api, make_api, make_result

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

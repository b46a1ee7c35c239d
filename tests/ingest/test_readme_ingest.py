"""README, "A five-minute tour" and "What the API refuses": the bad batch the README posts
is answered as the README shows it (the good item stored, each bad one rejected alone with
its field), a resend stores nothing twice, and a NUL character in any of the text fields the
README names rejects that item alone, naming the field. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.models import Result
from tests.conftest import Api, make_api, make_result

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    # The default bound on old results (7 days): the README's batch carries no `ts` but one.
    yield from make_api(db_url, max_backfill=timedelta(days=7))


def readme_batch() -> tuple[str, list[str]]:
    """The body the README's bad-batch `curl` posts (as text: it spells `1e999`), and its
    answer's lines as written."""
    text = README.read_text(encoding="utf-8")
    block = text.split("Try a bad batch", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    body = block.split("-d '", 1)[1].split("'\n", 1)[0]
    answer = [line.removeprefix("# ") for line in block.splitlines() if line.startswith("# ")]
    return body, answer


def post(api: Api, body: str) -> Any:
    headers = {**api.headers("ingest"), "Content-Type": "application/json"}
    response = api.client.post("/v1/results", content=body.encode(), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def stored_ids(api: Api) -> set[str]:
    with api.engine.connect() as conn:
        return set(conn.scalars(select(Result.request_id)))


def test_the_readme_bad_batch_is_answered_as_the_readme_shows(api: Api) -> None:
    body, answer = readme_batch()
    assert len(json.loads(body, parse_float=str)["results"]) == 3
    # The README's answer, its elisions (…) standing for what depends on the clock.
    head = re.match(r'\{"accepted":(\d+),"duplicates":(\d+),"rejected":\[', answer[0])
    assert head, answer[0]
    written = [json.loads(line.strip().rstrip(",").removesuffix("]}")) for line in answer[1:]]

    report = post(api, body)
    assert (report["accepted"], report["duplicates"]) == (int(head[1]), int(head[2]))
    assert len(report["rejected"]) == len(written)
    for got, shown in zip(report["rejected"], written, strict=True):
        assert (got["index"], got["request_id"]) == (shown["index"], shown["request_id"])
        pieces = [p.strip() for p in shown["error"].split("…") if p.strip()]
        assert got["error"].startswith(pieces[0]), (got["error"], shown["error"])
        for piece in pieces[1:]:
            assert piece in got["error"], (got["error"], shown["error"])
    assert stored_ids(api) == {"t-1"}

    # The same batch again (a router's retry): nothing is stored twice.
    again = post(api, body)
    assert (again["accepted"], again["duplicates"]) == (0, 1)
    assert [r["index"] for r in again["rejected"]] == [r["index"] for r in report["rejected"]]
    assert stored_ids(api) == {"t-1"}


# The text fields the README names: ids, `task`, `degrade_reason`, a side's `error`,
# `error_message` or `model`. (field path, how to put a NUL in it.)
NUL = "a\x00b"
TEXT_FIELDS: list[tuple[str, dict[str, Any]]] = [
    ("request_id", {"request_id": NUL}),
    ("session_id", {"session_id": NUL}),
    ("user_id", {"user_id": NUL}),
    ("task", {"task": NUL}),
    ("degrade_reason", {"degraded": True, "degrade_reason": NUL}),
    ("edge.error", {"edge": {"output": None, "error": NUL}}),
    ("edge.error_message", {"edge": {"output": None, "error": "timeout", "error_message": NUL}}),
    ("edge.model", {"edge": {"output": "refund", "model": NUL}}),
    ("cloud.model", {"cloud": {"output": "refund", "model": NUL}}),
    ("cloud.error_message", {"cloud": {"output": None, "error": "x", "error_message": NUL}}),
]


def test_a_nul_in_each_named_text_field_rejects_its_item_alone_naming_the_field(
    api: Api,
) -> None:
    ts = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    items = []
    for i, (_, overrides) in enumerate(TEXT_FIELDS):
        items.append(make_result(request_id=f"good-{i}", ts=ts))
        items.append(make_result(**{"request_id": f"nul-{i}", "ts": ts, **overrides}))
    items.append(make_result(request_id="good-last", ts=ts))
    report = api.post_results({"results": items}).json()
    assert report["accepted"] == len(TEXT_FIELDS) + 1, report
    errors = {r["index"]: r["error"] for r in report["rejected"]}
    assert sorted(errors) == [2 * i + 1 for i in range(len(TEXT_FIELDS))]
    for i, (field, _) in enumerate(TEXT_FIELDS):
        error = errors[2 * i + 1]
        assert error.startswith(f"{field}: ") and "NUL" in error, (field, error)
    assert stored_ids(api) == {f"good-{i}" for i in range(len(TEXT_FIELDS))} | {"good-last"}


def test_the_batch_limit_is_the_setting(db_url: str) -> None:
    """`SHADOWPLANE_MAX_BATCH_ITEMS`: results per ingest request."""
    for api in make_api(db_url, max_batch_items=3):
        items = [make_result(request_id=f"limit-{i}") for i in range(4)]
        refused = api.post_results({"results": items})
        assert refused.status_code == 422, refused.text
        assert "4 items, at most 3" in refused.text
        assert stored_ids(api) == set()
        assert api.post_results({"results": items[:3]}).json()["accepted"] == 3

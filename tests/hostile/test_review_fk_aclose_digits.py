"""Hostile review of bd1c30f (results without a foreign key to tasks), b327afd
(`ResultReporter.aclose`) and 0b2d8bc (a 422 for integers past 4300 digits).

bd1c30f's way down on a database where a task was deleted by hand (the only way orphans
arise): results of that task in a day's partition and in the default partition, with their
payloads, are deleted, every other row is kept, and the key is back; on PostgreSQL both
partitions of the parent get it. `ResultReporter.aclose` twice, after a body that raises,
and with `timeout=0`. The 422 for a long integer wherever it sits in a body (negative,
nested), a long float left to the field, and the per-item answer of `POST /v1/results`."""

from __future__ import annotations

import asyncio
import json

import pytest
import sqlalchemy as sa

from controlplane.client import ResultReporter
from controlplane.db import get_engine
from tests.client.fake import FakeServer
from tests.client.test_repeats import Ingest
from tests.client.test_reporter_aclose import serve_one
from tests.conftest import Api, make_api, make_result
from tests.db.migrating import migrate_to

BEFORE = "df084010e878"
TOO_MANY = "body: holds a number of more than 4300 digits, more than any field takes"
DIGITS = "1" * 5000


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with get_engine(url).connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


@pytest.mark.fresh_db  # deletes a task by hand, migrates down and up
def test_the_way_down_drops_orphans_in_every_partition_and_keeps_the_rest(db_url: str) -> None:
    for api in make_api(db_url):
        for request_id, ts in (("day", "2026-11-30T02:00:00Z"), ("old", "2001-01-01T00:00:00Z")):
            for task in ("ticket_classify", "invoice_extract"):
                item = make_result(request_id=f"{task}-{request_id}", ts=ts, task=task)
                if task == "invoice_extract":
                    item["edge"]["output"] = item["cloud"]["output"] = {"amount": 1}
                else:
                    item["edge"]["output"] = "exchange"  # a disagreement keeps its payload
                answer = api.post_results(item).json()
                assert answer["accepted"] == 1, answer
    postgres = db_url.startswith("postgresql")
    if postgres:
        # One result of each task lies in the default partition, one in a day's.
        held = _rows(db_url, "SELECT count(*) FROM results_default")
        assert held == [(2,)], held
    # A task deleted by hand: its results stay, orphaned, without the key's cascade.
    with get_engine(db_url).begin() as conn:
        conn.execute(sa.text("DELETE FROM tasks WHERE name = 'ticket_classify'"))
    orphans = "SELECT count(*) FROM results WHERE task_id NOT IN (SELECT id FROM tasks)"
    assert _rows(db_url, orphans) == [(2,)]
    assert _rows(db_url, "SELECT count(*) FROM payloads") == [(2,)]  # ticket's only

    migrate_to(db_url, BEFORE, down=True)
    assert _rows(db_url, orphans) == [(0,)]
    assert _rows(db_url, "SELECT count(*) FROM payloads") == [(0,)]
    kept = _rows(db_url, "SELECT request_id FROM results ORDER BY request_id")
    assert kept == [("invoice_extract-day",), ("invoice_extract-old",)]
    if postgres:
        # The key is on the parent and on each partition (the default one too).
        per_partition = _rows(
            db_url,
            "SELECT c.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
            "WHERE k.contype = 'f' AND k.confrelid = 'tasks'::regclass "
            "AND c.relname LIKE 'results%' ORDER BY c.relname",
        )
        names = [name for (name,) in per_partition]
        assert "results" in names and "results_default" in names, names
        assert "results_p20261130" in names, names
    with pytest.raises(sa.exc.IntegrityError), get_engine(db_url).begin() as conn:
        conn.execute(sa.text("UPDATE results SET task_id = 999999"))


def _posted(ingest: Ingest) -> list[str]:
    return [p["request_id"] for p in ingest.posted]


def test_aclose_twice_after_a_body_that_raises_and_at_once() -> None:
    ingest = Ingest()

    async def main(base: str) -> tuple[bool, bool, ResultReporter]:
        reporter = ResultReporter(base, "k", flush_interval=0.01)
        with pytest.raises(KeyError):
            async with reporter:
                release = await serve_one(reporter, "raised")
                asyncio.get_running_loop().call_later(0.05, release.set)
                raise KeyError("the body's own error goes on")
        # Closed: a second aclose (and a report after it) neither hangs nor raises.
        again = await reporter.aclose(timeout=1)
        refused = reporter.report(make_result(request_id="late"))
        return again, refused, reporter

    with FakeServer(ingest) as server:
        again, refused, reporter = asyncio.run(main(server.base))
    assert _posted(ingest) == ["raised"]
    assert again is True and refused is False and reporter.drop_reasons == {"closed": 1}

    held = Ingest()

    async def at_once(base: str) -> tuple[bool, int, dict[str, int]]:
        reporter = ResultReporter(base, "k", flush_interval=0.01)
        release = await serve_one(reporter, "given-up")
        closed = await reporter.aclose(timeout=0)  # does not wait for the side beside
        pending = reporter.pending
        release.set()
        return closed, pending, dict(reporter.drop_reasons)

    with FakeServer(held) as server:
        closed, pending, dropped = asyncio.run(at_once(server.base))
    # The result given up on is counted as dropped at close, and not sent when it comes.
    assert (closed, pending, held.posted, dropped) == (False, 0, [], {"closed": 1})


@pytest.mark.parametrize(
    "body",
    [
        '{"reason": -' + DIGITS + "}",
        '{"reason": {"deep": [[1, ' + DIGITS + "]]}}",
        '{"reason": "x", "extra": ' + DIGITS + "}",
    ],
)
def test_a_long_integer_anywhere_in_a_body_is_named(api: Api, body: str) -> None:
    headers = {**api.headers(), "content-type": "application/json"}
    answer = api.client.post("/v1/kill", content=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == [TOO_MANY]


def test_a_long_float_is_no_long_integer_and_results_answer_per_item(api: Api) -> None:
    headers = {**api.headers(), "content-type": "application/json"}
    floating = api.client.post("/v1/kill", content='{"reason": ' + DIGITS + ".5}", headers=headers)
    assert floating.status_code == 422 and TOO_MANY not in floating.text, floating.text
    good = json.dumps(make_result(request_id="good"))
    bad = json.dumps(make_result(request_id="bad")).replace(
        '"input_tokens": 300', '"input_tokens": -' + DIGITS
    )
    answer = api.client.post(
        "/v1/results",
        content='{"results": [' + good + "," + bad + "]}",
        headers={**api.headers("ingest"), "content-type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["accepted"] == 1 and [r["request_id"] for r in report["rejected"]] == ["bad"]

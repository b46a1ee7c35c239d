"""POST /v1/results and GET /v1/results/{task}/{request_id}, on SQLite and real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DataError, InternalError, OperationalError

from controlplane.catalog.service import no_task
from controlplane.ingest.endpoints import failed
from controlplane.models import Payload, Result, ResultKey
from tests.conftest import Api, make_api, make_result


def count(api: Api, model: Any) -> int:
    with api.engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(model)) or 0)


def test_batch_with_in_batch_duplicates_and_bad_items(api: Api) -> None:
    good = [make_result(request_id=f"r-{i}") for i in range(5)]
    batch = [
        good[0],
        good[1],
        make_result(request_id="r-0", edge={"output": "exchange"}),  # 2: in-batch duplicate of 0
        {"request_id": "r-x", "task": "ticket_classify"},  # 3: missing fields
        good[2],
        make_result(request_id="r-y", task="no_such_task"),  # 5: unknown task
        make_result(request_id="r-z", input_tokens=-3),  # 6: negative tokens
        good[3],
        "not an object",  # 8
        make_result(request_id="r-w", edge=None, cloud=None),  # 9: no side at all
        good[4],
        make_result(request_id="r-1"),  # 11: in-batch duplicate of 1
    ]
    response = api.post_results({"results": batch})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["accepted"] == 5
    assert report["duplicates"] == 2
    assert [r["index"] for r in report["rejected"]] == [3, 5, 6, 8, 9]
    by_index = {r["index"]: r for r in report["rejected"]}
    assert by_index[3]["request_id"] == "r-x"
    assert "input_tokens: field required" in by_index[3]["error"]
    assert "decision: field required" in by_index[3]["error"]
    assert "task: unknown task 'no_such_task'" in by_index[5]["error"]
    assert (
        "input_tokens: Input should be greater than or equal to 0 (got -3)" in by_index[6]["error"]
    )
    assert by_index[8]["request_id"] is None
    assert "at least one of 'edge' or 'cloud'" in by_index[9]["error"]
    assert count(api, Result) == 5
    # First write wins: r-0 keeps its first appearance (agreeing), not the conflicting resend.
    stored = api.client.get("/v1/results/ticket_classify/r-0", headers=api.headers("read")).json()
    assert stored["comparison"]["outcome"] == "agree"


def test_resend_is_all_duplicates(api: Api) -> None:
    batch = {"results": [make_result(request_id=f"r-{i}") for i in range(30)]}
    assert api.post_results(batch).json() == {"accepted": 30, "duplicates": 0, "rejected": []}
    assert api.post_results(batch).json() == {"accepted": 0, "duplicates": 30, "rejected": []}
    # A resend mixed with new results counts each once.
    mixed = {"results": [make_result(request_id=f"r-{i}") for i in range(25, 35)]}
    assert api.post_results(mixed).json() == {"accepted": 5, "duplicates": 5, "rejected": []}
    assert count(api, Result) == 35


def test_single_result_and_single_bad_result(api: Api) -> None:
    assert api.post_results(make_result(request_id="one")).json() == {
        "accepted": 1,
        "duplicates": 0,
        "rejected": [],
    }
    response = api.post_results(make_result(request_id="two", served="edge", edge=None))
    assert response.status_code == 200
    assert response.json()["rejected"] == [
        {
            "index": 0,
            "request_id": "two",
            "error": "(result): served is 'edge' but there is no 'edge' side",
        }
    ]


def test_stored_result_is_scored_and_bucketed(api: Api) -> None:
    result = make_result(
        request_id="conf",
        input_tokens=812,
        edge={"output": "Refund", "confidence": 0.83},
        cloud={"output": "exchange", "cost": 0.0021},
        flag_version=17,
        input={"text": "long ticket", "segments": [2, 5]},
    )
    assert api.post_results(result).json()["accepted"] == 1
    stored = api.client.get("/v1/results/ticket_classify/conf", headers=api.headers("read")).json()
    assert stored["bucket"] == "512-2047"
    assert stored["comparison"] == {
        "outcome": "conflict",
        "diff": {"label": {"edge": "refund", "cloud": "exchange"}},
        "comparator": "label",
        "comparator_version": 1,
    }
    assert stored["payload"]["keep_probability"] == 1.0
    assert stored["payload"]["input"] == {"text": "long ticket", "segments": [2, 5]}
    assert stored["input_segments"] == [2, 5]
    assert stored["flag_version"] == 17
    assert stored["config_version"] == 1
    assert stored["cloud"]["cost"] == 0.0021
    assert stored["ts"].startswith("2026-11-30T02:00:00")
    assert stored["received_at"] is not None


def test_not_a_pair_has_no_outcome(api: Api) -> None:
    results = [
        make_result(
            request_id="err", edge={"output": None, "error": "timeout", "error_message": "after 2s"}
        ),
        make_result(request_id="inv", edge={"output": "refund", "valid": False}),
        make_result(request_id="cloud-only", edge=None, decision="cloud"),
    ]
    assert api.post_results({"results": results}).json()["accepted"] == 3
    for rid in ("err", "inv", "cloud-only"):
        stored = api.client.get(
            f"/v1/results/ticket_classify/{rid}", headers=api.headers("read")
        ).json()
        assert stored["comparison"]["outcome"] is None, rid
    err = api.client.get("/v1/results/ticket_classify/err", headers=api.headers("read")).json()
    assert err["edge"]["error"] == "timeout"
    assert err["payload"]["edge_error_message"] == "after 2s"


def test_agreeing_payloads_are_sampled_at_the_keep_rate(api: Api) -> None:
    batch = {"results": [make_result(request_id=f"a-{i}") for i in range(400)]}
    assert api.post_results(batch).json()["accepted"] == 400
    kept = count(api, Payload)
    # keep_agreeing_rate 0.05 of 400 = 20 expected; a deterministic draw per request id.
    assert 5 <= kept <= 45, kept
    with api.engine.connect() as conn:
        probabilities = set(conn.scalars(select(Payload.keep_probability)))
    assert probabilities == {0.05}


def test_none_policy_keeps_no_text(api: Api) -> None:
    marker = "SECRET-INVOICE-TEXT"
    results = [
        make_result(
            request_id=f"inv-{i}",
            task="invoice_extract",
            input={"text": f"{marker} {i}"},
            edge={
                "output": {"amount": i, "currency": "EUR", "note": marker},
                "error_message": marker,
            },
            cloud={"output": {"amount": i + (i % 2), "currency": "EUR"}},
        )
        for i in range(40)
    ]
    assert api.post_results({"results": results}).json()["accepted"] == 40
    assert count(api, Payload) == 0
    with api.engine.connect() as conn:
        rows = conn.execute(select(Result)).all()
        outcomes = [r.outcome for r in rows]
        dump = " ".join(repr(tuple(r)) for r in rows)
    assert marker not in dump
    assert outcomes.count("conflict") == 20 and outcomes.count("agree") == 20  # metrics still work
    stored = api.client.get("/v1/results/invoice_extract/inv-1", headers=api.headers("read")).json()
    assert stored["payload"] is None
    assert stored["comparison"]["outcome"] == "conflict"
    assert stored["comparison"]["diff"] is None


def test_body_over_the_limit_is_413(db_url: str) -> None:
    for small in make_api(db_url, max_body_bytes=20_000):
        batch = {"results": [make_result(request_id=f"big-{i}") for i in range(200)]}
        response = small.post_results(batch)
        assert response.status_code == 413
        assert "SHADOWPLANE_MAX_BODY_BYTES" in response.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
            for _ in range(30):
                yield b" " * 1000

        response = small.client.post(
            "/v1/results", content=chunks(), headers=small.headers("ingest")
        )
        assert response.status_code == 413
        assert count(small, Result) == 0


def test_default_limit_is_16_mib(api: Api) -> None:
    body = b'{"results": [' + b" " * (16 * 1024 * 1024) + b"]}"
    response = api.client.post(
        "/v1/results",
        content=body,
        headers={**api.headers("ingest"), "Content-Type": "application/json"},
    )
    assert response.status_code == 413


def test_1001_items_is_422_and_1000_is_fine(api: Api) -> None:
    too_many = {"results": [make_result(request_id=f"m-{i}") for i in range(1001)]}
    response = api.post_results(too_many)
    assert response.status_code == 422
    assert "1001 items, at most 1000" in response.json()["detail"]
    assert count(api, Result) == 0
    response = api.post_results({"results": too_many["results"][:1000]})
    assert response.json() == {"accepted": 1000, "duplicates": 0, "rejected": []}


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"a string"', b'{"results": {"a": 1}}'])
def test_a_body_that_is_not_a_result_is_422(api: Api, body: bytes) -> None:
    response = api.client.post("/v1/results", content=body, headers=api.headers("ingest"))
    assert response.status_code == 422
    assert response.json()["detail"].split(":")[0] in {"body", "results"}


def test_unknown_result_is_404(api: Api) -> None:
    response = api.client.get("/v1/results/ticket_classify/nope", headers=api.headers("read"))
    assert response.status_code == 404
    assert response.json()["detail"] == "no result 'nope' for task 'ticket_classify'"


def test_an_unknown_task_is_404_in_the_shared_words(api: Api) -> None:
    response = api.client.get("/v1/results/nosuchtask/1", headers=api.headers("read"))
    assert response.status_code == 404
    assert (
        response.json()
        == {"detail": no_task("nosuchtask")}
        == {"detail": "task: no task 'nosuchtask'"}
    )


def test_storage_failure_mid_write_leaves_nothing_half_written(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    from controlplane.ingest import repository

    real_copy = repository._copy
    calls: list[str] = []

    def broken(*args: Any, **kwargs: Any) -> None:
        calls.append("payloads")
        raise OperationalError("INSERT INTO payloads", {}, Exception("connection lost"))

    def copy_but_not_payloads(session: Any, table: str, *args: Any) -> None:
        if table == "payloads":
            broken()
        real_copy(session, table, *args)

    # Results go in first, then payloads: fail the payload write and nothing may remain.
    monkeypatch.setattr(repository, "_copy", copy_but_not_payloads)
    monkeypatch.setattr(repository, "insert_payload", broken)
    batch = {
        "results": [
            make_result(request_id=f"h-{i}", edge={"output": "exchange"}) for i in range(50)
        ]
    }
    response = api.post_results(batch)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert calls == ["payloads"]
    assert count(api, Result) == 0
    monkeypatch.undo()
    assert api.post_results(batch).json() == {"accepted": 50, "duplicates": 0, "rejected": []}
    assert count(api, Payload) == 50


@pytest.mark.integration
def test_a_batch_that_waits_out_a_lock_is_answered_503_counted_and_not_half_stored(
    pg_url: str,
) -> None:
    """While a migration holds the results table, a batch whose read of earlier answers
    waits past lock_timeout is answered 503 with Retry-After, timed in the latency
    histogram under 503, and leaves nothing (not even its claimed keys); the retry stores it."""
    impatient = (
        make_url(pg_url)
        .update_query_dict({"options": "-c lock_timeout=300"})
        .render_as_string(hide_password=False)
    )
    for api in make_api(impatient):
        result = make_result()
        locker = create_engine(pg_url)
        try:
            with locker.connect() as conn:
                conn.execute(text("LOCK TABLE results IN ACCESS EXCLUSIVE MODE"))
                answer = api.post_results(result)
                conn.rollback()
        finally:
            locker.dispose()
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        assert (count(api, Result), count(api, ResultKey), count(api, Payload)) == (0, 0, 0)
        metrics = api.client.get("/metrics", headers=api.headers("read")).text
        assert 'shadowplane_ingest_request_duration_seconds_count{code="503"} 1.0' in metrics
        again = api.post_results(result)
        assert again.json() == {"accepted": 1, "duplicates": 0, "rejected": []}


def test_a_failed_batch_is_counted_under_the_status_it_is_answered() -> None:
    lock = psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    assert failed(OperationalError("SELECT", {}, lock)) == "503"
    assert failed(lock) == "503"  # the COPY path's errors arrive unwrapped
    assert failed(DataError("INSERT", {}, Exception("NUL"))) == "422"
    aborted = psycopg.errors.InFailedSqlTransaction("current transaction is aborted")
    assert failed(InternalError("SELECT", {}, aborted)) == "500"
    assert failed(ValueError("a bug")) == "500"


def test_no_text_written_for_nul_characters(api: Api) -> None:
    response = api.post_results(
        {
            "results": [
                make_result(request_id="bad\x00id"),
                make_result(
                    request_id="ok", edge={"output": "refu\x00nd"}, input={"text": "a\x00b"}
                ),
            ]
        }
    )
    report = response.json()
    assert [r["index"] for r in report["rejected"]] == [0]
    assert "NUL" in report["rejected"][0]["error"]
    assert report["accepted"] == 1


def test_results_table_has_the_time_range_index(api: Api) -> None:
    with api.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            names = set(
                conn.scalars(text("SELECT indexname FROM pg_indexes WHERE tablename = 'results'"))
            )
        else:
            names = {r[1] for r in conn.execute(text("PRAGMA index_list('results')"))}
    assert "ix_results_task_id_ts" in names


def test_partial_resend_of_a_large_batch(api: Api) -> None:
    # On PostgreSQL a batch this size takes the COPY path; its overlap with stored rows
    # makes the optimistic COPY fail and the staged merge sort it out.
    first = {
        "results": [
            make_result(request_id=f"p-{i}", edge={"output": "exchange"}) for i in range(40)
        ]
    }
    assert api.post_results(first).json()["accepted"] == 40
    overlap = {
        "results": [
            make_result(request_id=f"p-{i}", edge={"output": "exchange"}) for i in range(20, 80)
        ]
    }
    assert api.post_results(overlap).json() == {"accepted": 40, "duplicates": 20, "rejected": []}
    assert count(api, Result) == 80
    assert count(api, Payload) == 80  # conflicts: every payload kept, once


def test_concurrent_resends_store_each_result_once(api: Api) -> None:
    from concurrent.futures import ThreadPoolExecutor

    batch = {
        "results": [
            make_result(request_id=f"c-{i}", edge={"output": "exchange"}) for i in range(200)
        ]
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        reports = [r.json() for r in pool.map(lambda _: api.post_results(batch), range(4))]
    assert sum(r["accepted"] for r in reports) == 200
    assert sum(r["duplicates"] for r in reports) == 600
    assert count(api, Result) == 200
    assert count(api, Payload) == 200


def test_overlapping_resends_in_opposite_orders_store_each_result_once(api: Api) -> None:
    # Two routers resending the same results in opposite orders: every writer takes the
    # unique-key locks in one order, so they wait for each other instead of deadlocking,
    # and every result is stored once.
    from concurrent.futures import ThreadPoolExecutor

    forward = [make_result(request_id=f"o-{i}", edge={"output": "exchange"}) for i in range(1000)]
    batches = [{"results": forward}, {"results": list(reversed(forward))}] * 4
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(api.post_results, batches))
    assert [r.status_code for r in responses] == [200] * 8
    reports = [r.json() for r in responses]
    assert sum(r["accepted"] for r in reports) == 1000
    assert sum(r["duplicates"] for r in reports) == 7000
    assert count(api, Result) == 1000
    assert count(api, Payload) == 1000


def test_every_item_is_answered_exactly_once(api: Api) -> None:
    # A law: accepted + duplicates + rejected = items, whatever the mix.
    import random

    rng = random.Random(5)
    stored: set[str] = set()
    for round_ in range(5):
        items: list[Any] = []
        for _ in range(rng.randrange(1, 120)):
            kind = rng.random()
            rid = f"law-{rng.randrange(150)}"
            if kind < 0.7:
                items.append(make_result(request_id=rid))
            elif kind < 0.8:
                items.append(make_result(request_id=rid, task="nope"))
            elif kind < 0.9:
                items.append(make_result(request_id=rid, input_tokens=-1))
            else:
                items.append({"request_id": rid})
        report = api.post_results({"results": items}).json()
        answered = report["accepted"] + report["duplicates"] + len(report["rejected"])
        assert answered == len(items), (round_, report)
        good = {
            i["request_id"]
            for i in items
            if isinstance(i, dict)
            and i.get("task") == "ticket_classify"
            and i.get("input_tokens", -1) >= 0
        }
        assert report["accepted"] == len(good - stored)
        stored |= good
    assert count(api, Result) == len(stored)


def test_integers_beyond_64_bits_are_stored_and_read_back(api: Api) -> None:
    big = 123456789012345678901234567890
    results = [
        make_result(
            request_id="big-1",
            task="ticket_classify",
            input={"text": "x", "ref": big},
            edge={"output": "exchange"},
        ),
        make_result(
            request_id="big-2",
            task="invoice_extract",
            edge={"output": {"amount": big, "currency": "EUR"}},
            cloud={"output": {"amount": big, "currency": "EUR"}},
        ),
        {"request_id": "bad", "n": big},  # a bad item beside them: the careful path parses it all
    ]
    report = api.post_results({"results": results}).json()
    assert report["accepted"] == 2 and [r["index"] for r in report["rejected"]] == [2]
    stored = api.client.get("/v1/results/ticket_classify/big-1", headers=api.headers("read"))
    assert stored.status_code == 200
    assert stored.json()["payload"]["input"]["ref"] == big
    invoice = api.client.get(
        "/v1/results/invoice_extract/big-2", headers=api.headers("read")
    ).json()
    assert invoice["comparison"]["outcome"] == "agree"

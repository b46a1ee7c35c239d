"""Repeat pairs at ingest, on SQLite and PostgreSQL: a `cloud_repeat` scored against `cloud`
with the task's comparator (never the edge pair), and free repeats: a later answer by the
cloud to the same normalised input, found by its keyed hash and scored from prints."""

from __future__ import annotations

import hashlib
import hmac
import json
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from controlplane.catalog import service as catalog
from controlplane.db import session_scope
from controlplane.ingest.repository import COPY_MIN_ROWS
from controlplane.rollout.configs import apply_config
from tests.conftest import INVOICE_TASK, TICKET_TASK, Api, make_api, make_result

# Runs once with each reader (the text_reader parameter, tests/conftest.py).
pytestmark = pytest.mark.text_reader

REPLY_TASK: dict[str, Any] = {
    "task": "reply_rewrite",
    "comparator": {"kind": "text_conservation", "length_ratio": [0.7, 1.4]},
    "payload_policy": "redacted",
}
# Free repeats within ten minutes only.
SHORT_TASK: dict[str, Any] = {
    **TICKET_TASK,
    "task": "short_span",
    "grading": {"duplicate_seconds": 600},
}
REPEAT_COLUMNS = ("repeat_outcome", "repeat_source", "repeat_diff", "repeat_cost")


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    for running in make_api(db_url):
        with session_scope(running.engine) as session:
            apply_config(session, REPLY_TASK, actor="test")
            apply_config(session, SHORT_TASK, actor="test")
        yield running


def stored(api: Api, request_id: str) -> dict[str, Any]:
    """The stored results row, every column, read past the models."""
    with api.engine.connect() as conn:
        row = conn.execute(
            text("SELECT * FROM results WHERE request_id = :r"), {"r": request_id}
        ).one()
    values = dict(row._mapping)
    for name in ("repeat_diff", "cloud_print", "input_segments"):
        if isinstance(values[name], str):  # SQLite hands JSON back as its text
            values[name] = json.loads(values[name])
    return values


def view(api: Api, task: str, request_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/results/{task}/{request_id}", headers=api.headers("read"))
    assert response.status_code == 200, response.text
    return dict(response.json())


def accepted(api: Api, *results: dict[str, Any]) -> None:
    report = api.post_results({"results": list(results)}).json()
    assert report == {"accepted": len(results), "duplicates": 0, "rejected": []}, report


def cloud_prices(api: Api, task: str) -> dict[str, float]:
    answer = api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()
    return dict(answer["config"]["prices"]["cloud"])


def invoice(request_id: str, cloud: Any, repeat: Any = None, **overrides: Any) -> dict[str, Any]:
    result = make_result(
        request_id=request_id,
        task="invoice_extract",
        input={"text": "Invoice 7 from ACME: 12.50 EUR, paid"},
        edge={"output": cloud},
        cloud={"output": cloud, "latency_ms": 300.0},
        **overrides,
    )
    if repeat is not None:
        result["cloud_repeat"] = {"output": repeat, "latency_ms": 310.0}
    return result


# --- asked repeats ----------------------------------------------------------------------


CASES = [
    # (task, cloud output, repeat output, outcome, differing names)
    ("ticket_classify", "refund", " Refund", "agree", []),
    ("ticket_classify", "refund", "exchange", "conflict", []),
    ("ticket_classify", "refund", "cancel", "invalid", []),  # the repeat outside the labels
    ("ticket_classify", "cancel", "refund", "invalid", []),  # the cloud answer itself outside
    (
        "invoice_extract",
        {"amount": 12.5, "currency": "EUR", "note": "paid"},
        '{"amount": 12.5, "currency": "eur", "note": "paid"}',
        "conflict",
        ["currency"],
    ),
    ("invoice_extract", {"amount": 12.5}, {"amount": 12.50, "currency": None}, "agree", []),
    ("invoice_extract", {"amount": 12.5}, {"currency": "EUR"}, "invalid", []),
    (
        "reply_rewrite",
        "We did not charge you twice. The refund of 120 EUR is on its way.",
        "We charged you twice. The refund of 150 EUR is on its way.",
        "conflict",
        ["negations", "numbers"],
    ),
    (
        "reply_rewrite",
        "We did not charge you twice. The refund of 120 EUR is on its way.",
        "We did not bill you twice. Your refund of 120 EUR is on the way.",
        "agree",
        [],
    ),
]


@pytest.mark.parametrize(("task", "cloud", "repeat", "outcome", "names"), CASES)
def test_an_asked_repeat_is_scored_against_the_cloud_answer(
    api: Api, task: str, cloud: Any, repeat: Any, outcome: str, names: list[str]
) -> None:
    result = make_result(
        request_id="rep-1",
        task=task,
        edge={"output": cloud},
        cloud={"output": cloud},
        cloud_repeat={"output": repeat, "input_tokens": 280, "output_tokens": 12},
    )
    accepted(api, result)
    row = stored(api, "rep-1")
    assert (row["repeat_outcome"], row["repeat_source"], row["repeat_diff"]) == (
        outcome,
        "asked",
        names,
    )
    # No reported cost: its own tokens at the task's cloud prices (per 1k tokens).
    prices = cloud_prices(api, task)
    assert row["repeat_cost"] == pytest.approx((280 * prices["in"] + 12 * prices["out"]) / 1000)
    assert view(api, task, "rep-1")["repeat"] == {
        "outcome": outcome,
        "source": "asked",
        "diff": names,
    }


def test_a_repeat_costs_what_it_reports_else_its_tokens(api: Api) -> None:
    prices = cloud_prices(api, "ticket_classify")
    reported = make_result(request_id="c-1", cloud_repeat={"output": "refund", "cost": 0.0042})
    # No tokens of its own: the result's input tokens, no output tokens.
    counted = make_result(request_id="c-2", input_tokens=500, cloud_repeat={"output": "refund"})
    # A repeat that failed is paid for all the same, and is no pair.
    failed = make_result(
        request_id="c-3", cloud_repeat={"error": "timeout", "output_tokens": 0, "cost": 0.001}
    )
    accepted(api, reported, counted, failed)
    assert stored(api, "c-1")["repeat_cost"] == 0.0042
    assert stored(api, "c-2")["repeat_cost"] == pytest.approx(500 * prices["in"] / 1000)
    row = stored(api, "c-3")
    assert (row["repeat_outcome"], row["repeat_source"], row["repeat_cost"]) == (
        None,
        "asked",
        0.001,
    )
    assert view(api, "ticket_classify", "c-3")["repeat"] == {
        "outcome": None,
        "source": "asked",
        "diff": None,
    }


def test_a_repeat_never_changes_the_edge_pair(api: Api) -> None:
    # The same results with and without a repeat that disagrees: every other column alike.
    base = [
        make_result(edge={"output": "refund"}, cloud={"output": "refund"}),  # an agreeing pair
        make_result(edge={"output": "exchange"}, cloud={"output": "refund"}),  # a conflict
        make_result(served="cloud", edge=None, cloud={"output": "refund"}),  # no edge: no pair
        make_result(edge={"error": "timeout"}, cloud={"output": "refund"}),  # edge failed
    ]
    plain = [{**r, "request_id": f"plain-{i}"} for i, r in enumerate(base)]
    repeated = [
        {**r, "request_id": f"rep-{i}", "cloud_repeat": {"output": "complaint", "cost": 0.002}}
        for i, r in enumerate(base)
    ]
    accepted(api, *plain, *repeated)
    for i, expected in enumerate([("agree",), ("conflict",), (None,), (None,)]):
        without, with_repeat = stored(api, f"plain-{i}"), stored(api, f"rep-{i}")
        assert (with_repeat["outcome"],) == expected
        assert with_repeat["repeat_outcome"] == "conflict"
        skip = {"id", "request_id", "received_at", *REPEAT_COLUMNS}
        assert {k: v for k, v in with_repeat.items() if k not in skip} == {
            k: v for k, v in without.items() if k not in skip
        }
        assert (
            view(api, "ticket_classify", f"rep-{i}")["comparison"]
            == (view(api, "ticket_classify", f"plain-{i}")["comparison"])
        )
    # The repeat's answer is stored nowhere (the payloads hold the edge and cloud answers).
    with api.engine.connect() as conn:
        rows = [
            *conn.execute(text("SELECT * FROM results")),
            *conn.execute(text("SELECT * FROM payloads")),
        ]
    assert "complaint" not in "\n".join(" ".join(str(v) for v in row) for row in rows)


@pytest.mark.parametrize("batch", [False, True], ids=["alone", "in-a-batch"])
def test_a_bad_repeat_rejects_only_its_item(api: Api, batch: bool) -> None:
    bad = [
        (
            make_result(request_id="b-1", cloud_repeat={"output": "refund", "latency_ms": -1}),
            "cloud_repeat.latency_ms",
        ),
        (
            make_result(request_id="b-2", cloud_repeat={"output": "refund", "error": ""}),
            "cloud_repeat.error",
        ),
        (
            make_result(request_id="b-3", cloud_repeat={"output": "refund", "cost": "much"}),
            "cloud_repeat.cost",
        ),
        (
            make_result(request_id="b-4", cloud_repeat={"output": "x", "error": "bad\x00"}),
            "cloud_repeat.error",
        ),
        (make_result(request_id="b-5", cloud_repeat=[1]), "cloud_repeat"),
    ]
    good = make_result(request_id="g-1", cloud_repeat={"output": "refund"})
    if batch:
        report = api.post_results({"results": [good, *(r for r, _ in bad)]}).json()
        assert report["accepted"] == 1
        rejected = report["rejected"]
    else:
        rejected = []
        accepted(api, good)
        for result, _ in bad:
            report = api.post_results(result).json()
            assert report["accepted"] == 0
            rejected += report["rejected"]
    assert [r["request_id"] for r in rejected] == [r["request_id"] for r, _ in bad]
    for answer, (_, field) in zip(rejected, bad, strict=True):
        assert answer["error"].startswith(f"{field}:"), answer
    assert stored(api, "g-1")["repeat_outcome"] == "agree"


def test_a_repeat_output_that_is_not_finite_rejects_its_item(api: Api) -> None:
    body = json.dumps(
        {
            "results": [
                make_result(request_id="n-1", cloud_repeat={"output": {"amount": 1}}),
                make_result(request_id="n-2"),
            ]
        }
    ).replace('{"amount": 1}', '{"amount": 1e999}')
    response = api.client.post(
        "/v1/results",
        content=body,
        headers={**api.headers("ingest"), "Content-Type": "application/json"},
    )
    report = response.json()
    assert report["accepted"] == 1
    assert [r["request_id"] for r in report["rejected"]] == ["n-1"]
    assert report["rejected"][0]["error"].startswith("cloud_repeat.output: holds a number")


def test_a_repeat_without_the_cloud_answer_is_rejected(api: Api) -> None:
    alone = make_result(
        request_id="alone",
        served="edge",
        cloud=None,
        cloud_repeat={"output": "refund"},
    )
    report = api.post_results({"results": [alone, make_result(request_id="ok")]}).json()
    assert report["accepted"] == 1
    assert report["rejected"] == [
        {
            "index": 0,
            "request_id": "alone",
            "error": "cloud_repeat: requires a 'cloud' side (the answer it repeats)",
        }
    ]


# --- free repeats -----------------------------------------------------------------------


def at(minute: int) -> str:
    return f"2026-11-30T02:{minute:02d}:00Z"


def test_the_same_input_answered_again_is_a_free_repeat(api: Api) -> None:
    first = make_result(
        request_id="f-1", ts=at(0), input={"text": "I want my money back for order 1234"}
    )
    # Spaced otherwise, full-width digits and an ideographic space: the same input.
    again = make_result(
        request_id="f-2",
        ts=at(5),
        input={"text": "  I want my\u3000money back\nfor order １２３４ "},
        cloud={"output": "exchange"},
    )
    accepted(api, first)
    accepted(api, again)
    assert stored(api, "f-1")["repeat_source"] is None  # nothing before it
    row = stored(api, "f-2")
    assert (
        row["repeat_outcome"],
        row["repeat_source"],
        row["repeat_diff"],
        row["repeat_cost"],
    ) == (
        "conflict",
        "duplicate",
        [],
        None,  # free: nobody paid for it
    )
    assert row["input_hash"] == stored(api, "f-1")["input_hash"]
    assert view(api, "ticket_classify", "f-2")["repeat"] == {
        "outcome": "conflict",
        "source": "duplicate",
        "diff": [],
    }
    # Within one batch, an earlier item counts; the latest earlier answer is the reference.
    accepted(
        api,
        make_result(request_id="f-3", ts=at(6), input={"text": "Where is my parcel?"}),
        make_result(
            request_id="f-4",
            ts=at(7),
            input={"text": "Where is my parcel?"},
            cloud={"output": "inquiry"},
        ),
        make_result(
            request_id="f-5",
            ts=at(8),
            input={"text": "where is my parcel?"},  # another letter case: another input
            cloud={"output": "inquiry"},
        ),
        make_result(
            request_id="f-6",
            ts=at(9),
            input={"text": "I want my money back for order 1234"},
            cloud={"output": "Exchange "},  # agrees with f-2, the latest before it
        ),
    )
    assert stored(api, "f-3")["repeat_source"] is None
    assert stored(api, "f-4")["repeat_outcome"] == "conflict"
    assert stored(api, "f-5")["repeat_source"] is None
    assert (stored(api, "f-6")["repeat_outcome"], stored(api, "f-6")["repeat_source"]) == (
        "agree",
        "duplicate",
    )
    # The edge pairs are untouched: each agrees or conflicts on its own answers.
    assert [stored(api, f"f-{i}")["outcome"] for i in range(1, 7)] == [
        "agree",
        "conflict",
        "agree",
        "conflict",
        "conflict",
        "conflict",
    ]


def test_a_repeat_beyond_the_span_or_without_the_cloud_is_not_free(api: Api) -> None:
    question = {"text": "Can I change the size of my shoes?"}
    accepted(
        api,
        make_result(request_id="s-1", task="short_span", ts=at(0), input=question),
        # Eleven minutes later: beyond the task's ten.
        make_result(request_id="s-2", task="short_span", ts=at(11), input=question),
        # Within ten minutes of s-2, but its cloud side failed: no answer to compare.
        make_result(
            request_id="s-3",
            task="short_span",
            ts=at(12),
            input=question,
            cloud={"error": "timeout"},
        ),
        # No cloud at all (the edge served).
        make_result(
            request_id="s-4",
            task="short_span",
            ts=at(13),
            input=question,
            served="edge",
            cloud=None,
        ),
        # An asked repeat is scored as asked, not as a free one.
        make_result(
            request_id="s-5",
            task="short_span",
            ts=at(14),
            input=question,
            cloud_repeat={"output": "exchange"},
        ),
        # Ten minutes after s-2 exactly: within the span.
        make_result(request_id="s-6", task="short_span", ts=at(21), input=question),
    )
    sources = {i: stored(api, f"s-{i}")["repeat_source"] for i in range(1, 7)}
    assert sources == {1: None, 2: None, 3: None, 4: None, 5: "asked", 6: "duplicate"}
    assert stored(api, "s-5")["repeat_outcome"] == "conflict"
    # s-6's reference is the latest answer within the span: s-5's own cloud answer (refund).
    assert stored(api, "s-6")["repeat_outcome"] == "agree"
    # A result whose cloud failed keeps its input hash but no print.
    assert stored(api, "s-3")["input_hash"] == stored(api, "s-1")["input_hash"]
    assert stored(api, "s-3")["cloud_print"] is None


def test_a_resend_is_not_a_repeat(api: Api) -> None:
    first = make_result(request_id="r-1", ts=at(0))
    accepted(api, first)
    assert api.post_results({"results": [first]}).json()["duplicates"] == 1
    # The resent id, answered otherwise: still the first write, still no repeat of itself.
    resent = {**first, "cloud": {"output": "exchange"}}
    assert api.post_results({"results": [resent]}).json()["duplicates"] == 1
    row = stored(api, "r-1")
    assert (row["repeat_source"], row["outcome"]) == (None, "agree")
    # A new request with that input finds the stored answer, not the resend's.
    accepted(api, make_result(request_id="r-2", ts=at(1), cloud={"output": "refund"}))
    assert stored(api, "r-2")["repeat_outcome"] == "agree"


def test_under_payload_none_the_input_is_hashed_never_stored(api: Api) -> None:
    # invoice_extract keeps no payload (payload_policy: none).
    assert INVOICE_TASK["payload_policy"] == "none"
    paid = {"amount": 12.5, "currency": "EUR"}
    accepted(api, invoice("i-1", paid, ts=at(0)))
    accepted(api, invoice("i-2", {"amount": 12.5, "currency": "USD"}, ts=at(3)))
    with api.engine.connect() as conn:
        rows = [
            *conn.execute(text("SELECT * FROM results")),
            *conn.execute(text("SELECT * FROM payloads")),
        ]
    everything = "\n".join(" ".join(str(v) for v in row) for row in rows)
    assert "ACME" not in everything and "EUR" not in everything and "USD" not in everything
    with api.engine.connect() as conn:
        (secret,) = conn.scalars(text("SELECT value FROM server_secrets")).all()
    # The keyed hash of the normalised input object, computed here on its own.
    canonical = json.dumps(
        {
            "text": " ".join(
                unicodedata.normalize("NFKC", "Invoice 7 from ACME: 12.50 EUR, paid").split()
            )
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    digest = hmac.new(bytes.fromhex(secret), canonical.encode(), hashlib.sha256).hexdigest()[:32]
    assert stored(api, "i-1")["input_hash"] == digest
    row = stored(api, "i-2")
    assert (row["repeat_outcome"], row["repeat_source"], row["repeat_diff"]) == (
        "conflict",
        "duplicate",
        ["currency"],
    )


def test_an_input_sent_often_still_finds_the_latest_cloud_answer(api: Api) -> None:
    # Many results of one input since the cloud last answered it: edge-only ones (the cloud
    # did not run) and failed ones hold no answer and never hide the one that does.
    accepted(api, make_result(request_id="p-0", ts=at(0), cloud={"output": "exchange"}))
    accepted(
        api,
        *(
            make_result(request_id=f"p-e{i}", ts=at(1 + i), served="edge", cloud=None)
            for i in range(6)
        ),
        *(
            make_result(request_id=f"p-f{i}", ts=at(10 + i), cloud={"error": "timeout"})
            for i in range(6)
        ),
    )
    accepted(api, make_result(request_id="p-1", ts=at(30), cloud={"output": "refund"}))
    assert (stored(api, "p-1")["repeat_outcome"], stored(api, "p-1")["repeat_source"]) == (
        "conflict",
        "duplicate",
    )
    # Then many cloud answers: the latest before a result is its reference.
    accepted(api, *(make_result(request_id=f"p-c{i}", ts=at(31 + i)) for i in range(6)))
    accepted(api, make_result(request_id="p-2", ts=at(50), cloud={"output": "exchange"}))
    outcomes = [stored(api, f"p-c{i}")["repeat_outcome"] for i in range(6)]
    assert outcomes == ["agree"] * 6
    assert stored(api, "p-2")["repeat_outcome"] == "conflict"


def test_a_large_batch_stores_every_repeat_column(api: Api) -> None:
    # 30 results: on PostgreSQL a batch this large is written with COPY, not INSERT.
    assert COPY_MIN_ROWS <= 30
    questions = [{"text": f"Question number {i % 10}"} for i in range(30)]
    batch = [
        make_result(
            request_id=f"big-{i}",
            ts=at(i),
            input=questions[i],
            cloud={"output": "refund" if i % 3 else "exchange", "cost": 0.002},
            **({"cloud_repeat": {"output": "complaint", "cost": 0.003}} if i % 7 == 0 else {}),
        )
        for i in range(30)
    ]
    accepted(api, *batch)
    for i in range(30):
        row = stored(api, f"big-{i}")
        assert row["input_hash"] == stored(api, f"big-{i % 10}")["input_hash"]
        assert row["cloud_print"] is not None
        if i % 7 == 0:
            expected = ("conflict", "asked", [], 0.003)
        elif i < 10:
            expected = (None, None, None, None)  # the first time its question is asked
        else:
            # Ten minutes before: the same question, answered alike when both are (or are not)
            # multiples of 3 (i and i - 10 are apart by 10, so only when 3 divides neither).
            same = (i % 3 == 0) == ((i - 10) % 3 == 0)
            expected = ("agree" if same else "conflict", "duplicate", [], None)
        assert tuple(row[c] for c in REPEAT_COLUMNS) == expected, i


def test_answers_under_another_comparator_spec_are_not_paired(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    accepted(api, make_result(request_id="v-1", ts=at(0)))
    with session_scope(api.engine) as session:
        apply_config(
            session,
            {**TICKET_TASK, "comparator": {"kind": "label", "labels": ["refund", "exchange"]}},
            actor="test",
        )
    # Ingest reads the new version at once (not within the second its cache allows).
    monkeypatch.setattr(catalog, "_runtimes", {})
    accepted(api, make_result(request_id="v-2", ts=at(1)))
    accepted(api, make_result(request_id="v-3", ts=at(2)))
    assert stored(api, "v-1")["config_version"] != stored(api, "v-2")["config_version"]
    assert stored(api, "v-2")["repeat_source"] is None  # v-1's print meant other labels
    assert stored(api, "v-3")["repeat_outcome"] == "agree"


def test_the_newest_comparable_answer_is_the_reference_among_at_most_four(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored answers to one input are read newest first, at most four: answers under
    another comparator spec in between are passed over while the four reach past them."""

    def configure(labels: list[str] | None) -> None:
        comparator = TICKET_TASK["comparator"]
        if labels is not None:
            comparator = {"kind": "label", "labels": labels}
        with session_scope(api.engine) as session:
            apply_config(session, {**TICKET_TASK, "comparator": comparator}, actor="test")
        monkeypatch.setattr(catalog, "_runtimes", {})  # read the new version at once

    # Five answers under the task's spec: the newest says exchange, the older ones refund.
    accepted(
        api,
        *(make_result(request_id=f"n-{i}", ts=at(i), cloud={"output": "refund"}) for i in range(4)),
    )
    accepted(api, make_result(request_id="n-4", ts=at(4), cloud={"output": "exchange"}))
    # Three answers under another spec, newer still.
    configure(["refund", "exchange", "complaint"])
    accepted(api, *(make_result(request_id=f"n-o{i}", ts=at(5 + i)) for i in range(3)))
    # Back to the task's spec: n-4 is the newest comparable answer (the fourth read).
    configure(None)
    accepted(api, make_result(request_id="n-9", ts=at(9), cloud={"output": "exchange"}))
    row = stored(api, "n-9")
    assert (row["repeat_outcome"], row["repeat_source"]) == ("agree", "duplicate")

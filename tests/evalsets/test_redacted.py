"""Under `payload_policy: redacted` no raw personal value travels from ingest to review to
eval sets: results posted with an email and a phone number in the input and both answers
are sampled, claimed (the blind view shows placeholders, not the values), labelled,
backfilled and exported; the JSONL and CSV exports hold placeholders only, and each item
records the policy it was kept under."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controlplane.db import session_scope
from controlplane.evalsets import actions as evalset_actions
from controlplane.evalsets import service
from controlplane.review import actions as review_actions
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
WINDOW, LATENESS = 60, 30
TASK = "masked_reply"
N = 4


def email(i: int) -> str:
    return f"ann.lee{i}@example.com"


def phone(i: int) -> str:
    return f"+1 415 555 01{i:02d}"


# Every raw value, and the phone's digits without spaces (how a leak could also look).
RAW = [v for i in range(N) for v in (email(i), phone(i), f"41555501{i:02d}")] + ["ann.lee"]


QUESTIONS = ["where the parcel is", "why it is late", "for a refund", "to change the address"]


def results() -> list[dict[str, Any]]:
    """N conflicts whose input and both answers carry the customer's email and phone."""
    return [
        make_result(
            request_id=f"{TASK}-{i}",
            task=TASK,
            ts=(T0 + timedelta(seconds=i)).isoformat(),
            input={"text": f"Customer {email(i)} (phone {phone(i)}) asks {QUESTIONS[i]}"},
            edge={"output": f"We will email {email(i)} today", "confidence": 0.9, "model": "s@1"},
            cloud={"output": f"We will call {phone(i)} and email {email(i)}", "model": "l@2"},
        )
        for i in range(N)
    ]


def assert_masked(text: str) -> None:
    for raw in RAW:
        assert raw not in text, raw
    assert "<EMAIL_1>" in text and "<PHONE_1>" in text, text


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    for one in make_api(db_url):
        with session_scope(one.engine) as session:
            apply_config(
                session,
                {
                    "task": TASK,
                    "comparator": {"kind": "exact"},
                    "payload_policy": "redacted",
                    "window_seconds": WINDOW,
                    "allowed_lateness_seconds": LATENESS,
                },
                actor="test",
            )
        yield one


def test_redacted_text_stays_masked_from_review_to_the_export(api: Api, tmp_path: Path) -> None:
    masked_inputs = {f"Customer <EMAIL_1> (phone <PHONE_1>) asks {q}" for q in QUESTIONS}
    post_all(api, results())
    report = run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS))
    assert report.failed == [] and report.sampled == N

    # The reviewer sees placeholders where the values were, in the input and both answers.
    now = T0 + timedelta(hours=1)
    for step in range(N):
        view = review_actions.claim(api.engine, TASK, "ann", now + timedelta(seconds=step))
        assert view is not None
        shown = json.dumps(view)
        assert_masked(shown)
        assert view["input"]["text"] in masked_inputs
        assert "<EMAIL_1>" in view["a"] and "<EMAIL_1>" in view["b"]
        # The answer that calls names the phone too.
        assert any("<PHONE_1>" in side for side in (view["a"], view["b"]))
        cloud_side = "a" if "call" in view["a"] else "b"
        labelled = review_actions.label(
            api.engine,
            view["id"],
            "ann",
            verdict=f"{cloud_side}_correct",
            now=now + timedelta(seconds=step),
        )
        assert labelled["state"] == "done"
    assert review_actions.claim(api.engine, TASK, "ann", now + timedelta(minutes=1)) is None

    added = evalset_actions.backfill(api.engine, task=TASK, actor="test")
    assert added["tasks"] == {TASK: {"boundary": N}}, added

    with session_scope(api.engine) as session:
        jsonl = service.export(session, tmp_path / "jsonl", task=TASK, fmt="jsonl")
        csvs = service.export(session, tmp_path / "csv", task=TASK, fmt="csv")
    assert [w[0] for w in jsonl.files] == [f"{TASK}/boundary.jsonl"]
    assert [w[0] for w in csvs.files] == [f"{TASK}/boundary.csv"]

    text = (tmp_path / "jsonl" / TASK / "boundary.jsonl").read_text()
    assert_masked(text)
    lines = [json.loads(x) for x in text.splitlines()]
    assert len(lines) == N
    assert {line["input"]["text"] for line in lines} == masked_inputs
    for line in lines:
        assert line["provenance"]["policy"] == "redacted"
        # The right answer (the cloud's), masked as stored.
        assert "<PHONE_1>" in line["expected"] and "<EMAIL_1>" in line["expected"]

    table = (tmp_path / "csv" / TASK / "boundary.csv").read_text()
    assert_masked(table)
    rows = list(csv.DictReader(io.StringIO(table)))
    assert len(rows) == N
    assert all(json.loads(row["provenance"])["policy"] == "redacted" for row in rows)
    # Nothing else in either export folder holds a raw value.
    for path in [*(tmp_path / "jsonl").rglob("*"), *(tmp_path / "csv").rglob("*")]:
        if path.is_file():
            data = path.read_text()
            assert not any(raw in data for raw in RAW), path

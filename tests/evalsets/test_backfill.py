"""Backfill: labelled review items become self-contained eval items (expected answer,
complete provenance, schema-valid lines), idempotently, deduplicated by normalised input,
and still whole after `prune` removed the results they came from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.errors import ActionError
from controlplane.evalsets import actions, service
from controlplane.evalsets.items import SCHEMA, item_id, schema_bytes
from controlplane.ingest.retention import prune
from controlplane.models import AuditEntry, EvalItem, OutboxEvent, Result
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.evalsets.helpers import (
    T0,
    TASK,
    TASK_CONFIG,
    cloud_verdict,
    edge_verdict,
    label,
    label_by_truth,
    post_tickets,
    queue,
)

REPO = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    for one in make_api(db_url):
        with session_scope(one.engine) as session:
            apply_config(session, TASK_CONFIG, actor="test")
        yield one


def lines(api: Api, layer: str = "boundary") -> list[dict[str, Any]]:
    with session_scope(api.engine) as session:
        return service.layer_lines(session, service.task_named(session, TASK), layer)


def test_the_repository_schema_is_the_one_export_writes() -> None:
    assert (REPO / "evalsets" / "schema.json").read_bytes() == schema_bytes()
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_backfill_takes_the_right_answer_or_the_correction_with_complete_provenance(
    api: Api,
) -> None:
    ids = post_tickets(api, 7, conflict_every=2)  # 0, 2, 4, 6 conflict
    with session_scope(api.engine) as session:
        items = queue(session, TASK, ids)
        by_rid = {i.request_id: i for i in items}
        label(session, items[0], "ann", cloud_verdict(items[0]), failure_class="wrong_label")
        label(session, items[1], "ann", "both_correct")
        label(session, items[2], "ann", edge_verdict(items[2]))  # the reviewer sides with edge
        label(session, items[3], "ann", "both_wrong", corrected="complaint")
        label(session, items[4], "ann", "unclear")  # no expected answer: waits
        label(session, items[5], "ann", "both_wrong")  # needs a correction: waits
        # Two reviewers; the newer label of ann supersedes her first.
        label(session, items[6], "ann", edge_verdict(items[6]), done=False)
        label(session, items[6], "bob", cloud_verdict(items[6]), done=False)
        label(session, items[6], "ann", cloud_verdict(items[6]), failure_class="tone")
        results = {
            r.request_id: r.id
            for r in session.scalars(select(Result).where(Result.request_id.in_(ids)))
        }

    report = actions.backfill(api.engine, task=TASK, actor="ann")
    assert report == {
        "added": 5,
        "tasks": {TASK: {"boundary": 5}},
        "needs_correction": 2,
        "invalid_expected": 0,
        "duplicates": 0,
        "remade": 0,
        "withdrawn": 0,
    }
    got = {line["provenance"]["request_id"]: line for line in lines(api)}
    assert set(got) == {ids[0], ids[1], ids[2], ids[3], ids[6]}
    assert got[ids[0]]["expected"] == by_rid[ids[0]].cloud_output
    assert got[ids[1]]["expected"] == by_rid[ids[1]].cloud_output
    assert got[ids[2]]["expected"] == by_rid[ids[2]].edge_output != by_rid[ids[2]].cloud_output
    assert got[ids[3]]["expected"] == "complaint"
    assert got[ids[6]]["expected"] == by_rid[ids[6]].cloud_output
    assert got[ids[6]]["failure_class"] == "tone"
    assert got[ids[0]]["failure_class"] == "wrong_label"

    for rid, line in got.items():
        VALIDATOR.validate(line)
        assert line["id"] == item_id(TASK, line["input"])
        p = line["provenance"]
        item = by_rid[rid]
        assert p["result_id"] == results[rid]
        assert p["review_item_id"] == item.id
        assert p["comparator"] == "label" and p["comparator_version"] == 1
        assert p["flag_version"] == 7 and p["config_version"] >= 1
        assert p["window_start"] == item.window_start.isoformat()
        assert p["result_ts"] == item.result_ts.isoformat()
        assert p["inclusion_probability"] == item.inclusion_probability
        assert p["labels"] and p["reviewers"]
        assert line["bucket"] == item.bucket
        assert line["edge_output"] == item.edge_output and line["input"] == item.input
    six = got[ids[6]]["provenance"]
    assert six["reviewers"] == ["ann", "bob"]
    assert [(x["reviewer"], x["counted"]) for x in six["labels"]] == [
        ("ann", False),
        ("bob", True),
        ("ann", True),
    ]
    assert six["consensus"] == "cloud_correct"

    # The two that waited enter once someone gives the expected answer.
    with session_scope(api.engine) as session:
        item4 = session.get(type(items[4]), items[4].id)
        assert item4 is not None
        label(session, item4, "bob", "both_wrong", corrected="inquiry")
    again = actions.backfill(api.engine, actor="bob")
    assert again["added"] == 1 and again["needs_correction"] == 1
    assert actions.backfill(api.engine, actor="bob")["added"] == 0


def test_the_same_input_enters_a_task_once_whatever_its_spacing_or_width(api: Api) -> None:
    body = []
    for rid, text in (
        ("w-1", "Refund  please\n order １２３"),
        ("w-2", " Refund please order 123 "),
    ):
        body.append(
            {
                "request_id": rid,
                "task": TASK,
                "ts": T0.isoformat(),
                "input_tokens": 20,
                "decision": "edge",
                "served": "cloud",
                "input": {"text": text},
                "edge": {"output": "refund"},
                "cloud": {"output": "refund"},
            }
        )
    assert api.post_results({"results": body}).json()["accepted"] == 2
    label_by_truth(api.engine, TASK, ["w-1", "w-2"])
    report = actions.backfill(api.engine, task=TASK, actor="t")
    assert report["added"] == 1 and report["duplicates"] == 1
    assert [x["provenance"]["request_id"] for x in lines(api)] == ["w-1"]
    assert actions.backfill(api.engine, task=TASK, actor="t")["duplicates"] == 1


def test_backfill_twice_exports_the_same_bytes_and_the_items_outlive_prune(
    api: Api, tmp_path: Path
) -> None:
    ids = post_tickets(api, 12)
    label_by_truth(api.engine, TASK, ids[:8])
    label_by_truth(
        api.engine,
        TASK,
        ids[8:10],
        layer="regression",
        provenance={
            "decision_id": 4,
            "rule": "agreement >= 0.9",
            "cell": "all",
            "window_start": T0.isoformat(),
            "window_end": (T0 + timedelta(minutes=5)).isoformat(),
        },
    )
    first = actions.backfill(api.engine, actor="t")
    assert first["tasks"] == {TASK: {"boundary": 8, "regression": 2}}
    with session_scope(api.engine) as session:
        service.export(session, tmp_path / "a")
        service.export(session, tmp_path / "a", fmt="csv")
    assert actions.backfill(api.engine, actor="t")["added"] == 0
    with session_scope(api.engine) as session:
        service.export(session, tmp_path / "b")
        service.export(session, tmp_path / "b", fmt="csv")
    files = sorted(
        p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()
    )
    assert [str(f) for f in files] == [
        "manifest.json",
        "schema.json",
        f"{TASK}/boundary.csv",
        f"{TASK}/boundary.jsonl",
        f"{TASK}/regression.csv",
        f"{TASK}/regression.jsonl",
    ]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_bytes())
    counts = {x["path"]: x["count"] for x in manifest["files"]}
    assert counts == {
        f"{TASK}/boundary.csv": 8,
        f"{TASK}/boundary.jsonl": 8,
        f"{TASK}/regression.csv": 2,
        f"{TASK}/regression.jsonl": 2,
    }
    import hashlib

    for x in manifest["files"]:
        assert x["sha256"] == hashlib.sha256((tmp_path / "a" / x["path"]).read_bytes()).hexdigest()
    regression = [
        json.loads(x) for x in (tmp_path / "a" / TASK / "regression.jsonl").read_text().splitlines()
    ]
    assert all(x["provenance"]["regression"]["rule"] == "agreement >= 0.9" for x in regression)
    for x in regression:
        VALIDATOR.validate(x)

    # Prune every result: the eval items are copies and do not change. Items labelled
    # before the prune but backfilled after it still carry everything of their own.
    label_by_truth(api.engine, TASK, ids[10:])
    with session_scope(api.engine) as session:
        result_ids = dict(session.execute(select(Result.request_id, Result.id)).all())
    pruned = prune(api.engine, before=T0 + timedelta(days=1))
    assert pruned.results == 12
    actions.backfill(api.engine, actor="t")
    with session_scope(api.engine) as session:
        assert session.scalars(select(Result)).first() is None
        service.export(session, tmp_path / "c")
    assert (tmp_path / "c" / TASK / "regression.jsonl").read_bytes() == (
        tmp_path / "a" / TASK / "regression.jsonl"
    ).read_bytes()
    after = (tmp_path / "c" / TASK / "boundary.jsonl").read_bytes()
    assert after.startswith((tmp_path / "a" / TASK / "boundary.jsonl").read_bytes())
    late = [json.loads(x) for x in after.decode().splitlines()[8:]]
    assert [x["provenance"]["request_id"] for x in late] == ids[10:]
    for x in late:
        VALIDATOR.validate(x)
        assert x["input"]["text"] and x["expected"] in (
            "refund",
            "exchange",
            "complaint",
            "inquiry",
        )
        # The result row is gone; the item still names it, by id and by request id.
        assert x["provenance"]["result_id"] == result_ids[x["provenance"]["request_id"]]


def test_backfill_is_audited_and_announced_and_refuses_unknown_names(api: Api) -> None:
    ids = post_tickets(api, 3)
    label_by_truth(api.engine, TASK, ids)
    actions.backfill(api.engine, task=TASK, layer="boundary", actor="carol")
    actions.backfill(api.engine, task=TASK, actor="carol")  # nothing new: audited, not announced
    with session_scope(api.engine) as session:
        audit = list(
            session.scalars(select(AuditEntry).where(AuditEntry.action == "evalsets.backfill"))
        )
        events = [
            e.document
            for e in session.scalars(select(OutboxEvent).where(OutboxEvent.kind == "change"))
            if e.document.get("action") == "evalsets.backfill"
        ]
        assert session.scalars(select(EvalItem)).all()
    assert [(a.actor, a.task, a.details["added"]) for a in audit] == [
        ("carol", TASK, 3),
        ("carol", TASK, 0),
    ]
    assert len(events) == 1 and events[0]["details"] == {"layers": {"boundary": 3}}
    with pytest.raises(ActionError) as missing:
        actions.backfill(api.engine, task="nope", actor="carol")
    assert missing.value.status == 404 and "nope" in str(missing.value.detail)
    with pytest.raises(ActionError) as bad:
        actions.backfill(api.engine, layer="golden", actor="carol")
    assert bad.value.status == 422 and "layer" in str(bad.value.detail)

"""The eval sets page: layers with their counts and hashes, preview rows, backfill now,
downloads byte for byte, and two uploaded runs compared per layer and bucket."""

from __future__ import annotations

import json
from typing import Any

import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from controlplane.audit.service import entries
from controlplane.compare.jsonutil import dumps
from controlplane.db import session_scope
from controlplane.evalsets import gate, scoring
from controlplane.evalsets import items as evalitems
from controlplane.evalsets import service as evalsets
from controlplane.review import actions
from tests.dashboard.conftest import Seeded, open_page, page_text, shown
from tests.review.blind_leaks import BLIND_KEYS, csv_leaks, text_leaks

pytestmark = pytest.mark.integration

PAGE = "app_pages/evalsets.py"


def evalsets_page(seeded: Seeded, key: str = "review") -> AppTest:
    at = open_page(seeded, key, PAGE)
    assert not at.exception, at.exception
    return at


def service_sets(seeded: Seeded) -> dict[str, Any]:
    with session_scope(seeded.engine) as session:
        return evalsets.sets(session)


def lines_of(seeded: Seeded, task: str, layer: str) -> list[dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return evalsets.layer_lines(session, evalsets.task_named(session, task), layer)


def test_each_layer_shows_its_count_and_hash_as_the_service_does(seeded: Seeded) -> None:
    found = service_sets(seeded)
    assert found["sets"]
    at = evalsets_page(seeded)
    text = page_text(at)
    for row in found["sets"]:
        assert f"{row['task']}/{row['layer']}: {row['count']} items, sha256 {row['sha256']}" in text
    assert f"Manifest sha256 (a JSONL export of every layer): {found['manifest_sha256']}" in text
    table = at.dataframe[0].value
    assert list(table["items"]) == [row["count"] for row in found["sets"]]


def test_preview_rows_page_through_a_layer_without_naming_sides_or_models(seeded: Seeded) -> None:
    found = service_sets(seeded)
    row = max(found["sets"], key=lambda r: r["count"])
    chosen = f"{row['task']}/{row['layer']}"
    lines = lines_of(seeded, row["task"], row["layer"])
    assert len(lines) > 20, "the largest seeded layer fits on one page of rows"
    at = evalsets_page(seeded)
    at.selectbox(key="evalsets_set").select(chosen).run()
    preview = at.dataframe[1].value
    assert list(preview["id"]) == [x["id"][:12] for x in lines[:20]]
    assert f"Rows 1–20 of {chosen}." in page_text(at)
    at.button(key="evalsets_next").click().run()
    assert not at.exception
    preview = at.dataframe[1].value
    assert list(preview["id"]) == [x["id"][:12] for x in lines[20:40]]
    assert f"Rows 21–{min(40, len(lines))} of {chosen}." in page_text(at)
    shown = preview.to_string()
    models = {x["provenance"][k] for x in lines for k in ("edge_model", "cloud_model")} - {None}
    assert models and not [m for m in models if m in shown]
    assert "edge" not in shown.lower() and "cloud" not in shown.lower()
    at.button(key="evalsets_first").click().run()
    assert list(at.dataframe[1].value["id"]) == [x["id"][:12] for x in lines[:20]]


def _kept_downloads(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The files the page offers for download, by file name, as the page renders them."""
    stored: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def keep(self: Any, path_or_data: Any, mimetype: str, kind: Any, filename: Any = None) -> str:
        if isinstance(path_or_data, bytes) and filename:
            stored[filename] = path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", keep)
    return stored


def test_downloads_are_the_layer_exports_byte_for_byte(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = _kept_downloads(monkeypatch)
    row = service_sets(seeded)["sets"][-1]
    at = evalsets_page(seeded, "admin")
    at.selectbox(key="evalsets_set").select(f"{row['task']}/{row['layer']}").run()
    assert not at.exception
    with session_scope(seeded.engine) as session:
        task = evalsets.task_named(session, row["task"])
        jsonl = evalsets.layer_bytes(session, task, row["layer"])
        csv = evalitems.csv_bytes(evalsets.layer_lines(session, task, row["layer"]))
    assert stored[f"{row['task']}-{row['layer']}.jsonl"] == jsonl
    assert evalitems.sha256(jsonl) == row["sha256"]
    assert stored[f"{row['task']}-{row['layer']}.csv"] == csv
    assert {b.label for b in at.get("download_button")} == {"Download JSONL", "Download CSV"}


def blind_progress(seeded: Seeded) -> list[dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return gate.blind_progress(session, None)


def test_a_read_key_sees_what_unblocking_still_needs(seeded: Seeded) -> None:
    with session_scope(seeded.engine) as session:
        [view] = gate.blocked_progress(session, None)
    [block] = view["blocks"]
    at = evalsets_page(seeded, "admin")
    [bar] = at.get("progress")
    assert shown(bar.proto.text).startswith(
        f"Regression set for {block['model']} on {view['task']}: {block['labelled']} of "
        f"{block['needed']} labelled"
    )


def test_a_review_key_downloads_only_the_blind_form(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found on main: the JSONL and CSV open to a review key carried edge_model
    "small-int4@3", cloud_model "large@7", edge_output, cloud_output and served."""
    stored = _kept_downloads(monkeypatch)
    at = evalsets_page(seeded, "review")
    every_model: set[str] = set()
    for row in service_sets(seeded)["sets"]:
        at.selectbox(key="evalsets_set").select(f"{row['task']}/{row['layer']}").run()
        assert not at.exception
        with session_scope(seeded.engine) as session:
            task = evalsets.task_named(session, row["task"])
            full = evalsets.layer_lines(session, task, row["layer"])
            blind = evalsets.layer_bytes(session, task, row["layer"], blind=True)
            blind_csv = evalsets.layer_csv(session, task, row["layer"], blind=True)
        jsonl = stored[f"{row['task']}-{row['layer']}.jsonl"]
        csv = stored[f"{row['task']}-{row['layer']}.csv"]
        assert (jsonl, csv) == (blind, blind_csv)
        models = {x["provenance"][k] for x in full for k in ("edge_model", "cloud_model")}
        assert {"small-int4@3", "large@7"} <= models
        models -= {None}
        every_model |= models
        assert text_leaks(jsonl.decode(), models) == csv_leaks(csv, models) == [], row
        lines = [json.loads(x) for x in jsonl.decode().splitlines()]
        assert len(lines) == row["count"]
        assert {k for x in lines for k in x} == BLIND_KEYS
    text = page_text(at)
    assert "Downloads are the blind form" in text
    # The regression set's progress, as counts: no model named.
    assert [shown(b.proto.text) for b in at.get("progress")] == [
        f"Regression set of ticket_classify: {r['labelled']} of {r['needed']} labelled"
        for r in blind_progress(seeded)
    ]
    # Nor does anything the page shows a review key (its rows, its sentences).
    assert [line for line in text.splitlines() if text_leaks(line, every_model)] == []


def test_backfill_now_adds_what_reviewers_labelled_and_says_so(seeded: Seeded) -> None:
    before = {(r["task"], r["layer"]): r["count"] for r in service_sets(seeded)["sets"]}
    # A pair outside the regression sample (a label puts a regression item in its set at
    # once, leaving nothing for a backfill): the invoice task has none.
    item = actions.claim(seeded.engine, "invoice_extract", "reviewer2")
    while item is not None and item["kind"] != "pair":
        actions.release(seeded.engine, item["id"], "reviewer2", skip=True)
        item = actions.claim(seeded.engine, "invoice_extract", "reviewer2")
    assert item is not None
    # A verdict that names a right answer and does not contradict the comparator: two
    # different answers cannot both be right.
    verdict = "a_correct" if item["diff"] else "both_correct"
    actions.label(seeded.engine, item["id"], "reviewer2", verdict=verdict)
    at = evalsets_page(seeded)
    at.button(key="evalsets_backfill").click().run()
    assert not at.exception
    with session_scope(seeded.engine) as session:
        [entry] = [e for e in entries(session, actor="review") if e.action == "evalsets.backfill"]
    done = entry.details
    assert done["added"] == 1
    after = {(r["task"], r["layer"]): r["count"] for r in service_sets(seeded)["sets"]}
    [(task, layers)] = done["tasks"].items()
    [(layer, n)] = layers.items()
    assert after[(task, layer)] == before.get((task, layer), 0) + n
    text = page_text(at)
    assert f"Backfill added 1 eval items ({task}: 1 {layer})." in text
    waiting = done["needs_correction"] + done["invalid_expected"]
    assert f"{waiting} wait for a reviewer's corrected answer" in text
    # The table shows the new count at once.
    assert f"{task}/{layer}: {after[(task, layer)]} items" in text


def run_file(lines: list[dict[str, Any]], model: str, right: int) -> bytes:
    """A run answering every line: the expected answer for the first `right`, another
    label for the rest."""
    out = []
    for k, x in enumerate(lines):
        output = x["expected"] if k < right else f"not-{x['expected']}"
        out.append(dumps({"id": x["id"], "output": output, "model": model}).decode())
    return ("\n".join(out) + "\n").encode()


def test_two_uploaded_runs_are_compared_per_layer_and_bucket(seeded: Seeded) -> None:
    lines = lines_of(seeded, "ticket_classify", "regression")
    a = run_file(lines, "small-int4@3", len(lines) // 2)
    b = run_file(lines, "small-int4@4", len(lines))
    with session_scope(seeded.engine) as session:
        task, items = evalsets.compare_items(session, [x["id"] for x in lines])
        expected = scoring.compare_runs(
            evalsets.comparator_spec(session, task),
            evalsets.scoring_items(items),
            scoring.read_run(a.splitlines()),
            scoring.read_run(b.splitlines()),
        )
    at = evalsets_page(seeded)
    assert "Upload run A and run B" in at.info[0].value
    at.file_uploader(key="evalsets_run_a").upload("a.jsonl", a).run()
    at.file_uploader(key="evalsets_run_b").upload("b.jsonl", b).run()
    assert not at.exception
    assert not at.error
    table = at.dataframe[-1].value
    assert list(zip(table["layer"], table["bucket"], table["items"], strict=True)) == [
        (r["layer"], r["bucket"], r["n"]) for r in expected
    ]
    assert list(table["A"]) == [f"{r['a']:.1%}" for r in expected]
    assert list(table["B"]) == [f"{r['b']:.1%}" for r in expected]
    overall = expected[-1]
    text = page_text(at)
    assert "A = small-int4@3, B = small-int4@4" in text
    assert (
        f"Overall A {overall['a']:.1%}, B {overall['b']:.1%}, B − A {overall['diff']:+.1%} "
        f"(95% interval {overall['low']:+.1%} to {overall['high']:+.1%})." in text
    )


def test_a_bad_run_file_names_the_file_and_the_line(seeded: Seeded) -> None:
    lines = lines_of(seeded, "ticket_classify", "regression")
    good = run_file(lines, "m", len(lines))
    bad = good.replace(b"\n", b"\nnot json\n", 1)
    at = evalsets_page(seeded)
    at.file_uploader(key="evalsets_run_a").upload("a.jsonl", good).run()
    at.file_uploader(key="evalsets_run_b").upload("b.jsonl", bad).run()
    assert not at.exception
    assert "b.jsonl:2: not a JSON object" in shown(at.error[0].value)
    # Runs on different items are refused naming what is missing.
    at.file_uploader(key="evalsets_run_b").upload("b.jsonl", run_file(lines[1:], "m", 0)).run()
    assert "cannot be compared" in shown(at.error[0].value)
    assert lines[0]["id"] in shown(at.error[0].value)


def test_the_page_renders_on_sqlite_too(seeded_sqlite: Seeded) -> None:
    found = service_sets(seeded_sqlite)
    text = page_text(evalsets_page(seeded_sqlite))
    assert f"every layer): {found['manifest_sha256']}" in text

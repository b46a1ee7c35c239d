"""Eval sets: what reviewers' labels became, per task and layer.

Above all, per blocked edge model, how far its regression set is: labelled of needed and
what unblocking still needs (a review key reads the counts alone, no model named). The
table lists each layer's items and the sha256 of its JSONL export (and of the
manifest an export would write). Pick a layer to preview its rows (input, expected answer,
bucket, failure class; not the two answers the item came from, its tags or provenance)
and download it as JSONL or CSV: with a key that holds `read`, byte for byte what
`shadowplane evalset export` writes; with a review key without `read`, the blind form
(the answers as A and B, nothing naming a model or a side). "Backfill now" turns labelled
review items into eval items and says what it added and what still waits. Upload two run
files (JSONL, one `{"id", "output", "model"}` a line) to compare them per layer and length
bucket, as `shadowplane evalset compare` does."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from controlplane.db import get_engine, session_scope
from controlplane.evalsets import actions, scoring, service
from controlplane.evalsets import items as evalitems
from shadowplane_dashboard import common, formats, regression

ROWS = 20
BACKFILLED = "evalsets_backfilled"


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_sets(url: str) -> dict[str, Any]:
    """Every non-empty layer: task, layer, count, sha256; and the manifest's sha256."""
    with session_scope(get_engine(url)) as session:
        return service.sets(session)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_rows(
    url: str, task: str, layer: str, after: int, blind: bool
) -> tuple[list[dict[str, Any]], int | None]:
    """ROWS lines of the layer after the cursor (full, or `blind`), and the next cursor."""
    with session_scope(get_engine(url)) as session:
        return service.page(
            session, service.task_named(session, task), layer, after=after, limit=ROWS, blind=blind
        )


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_export(url: str, task: str, layer: str, fmt: str, blind: bool) -> bytes:
    """The layer's export file, JSONL (the full one's sha256 is the table's) or CSV: the
    full form, or (`blind`) the form a review key without `read` may read."""
    with session_scope(get_engine(url)) as session:
        found = service.task_named(session, task)
        if fmt == "jsonl":
            return service.layer_bytes(session, found, layer, blind=blind)
        return service.layer_csv(session, found, layer, blind=blind)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def compare(
    url: str, files: tuple[tuple[str, bytes], tuple[str, bytes]], blind: bool
) -> dict[str, Any]:
    """Two runs scored side by side with the task's comparator (as the CLI's compare):
    rows per layer and bucket, or the sentence saying why they cannot be compared.
    `blind`: against the blind form's expected answers, the ones a review key reads."""
    try:
        runs = [scoring.read_run(data.splitlines(), source=name) for name, data in files]
        scoring.same_items(runs[0].outputs, runs[1].outputs, what=files[1][0], against=files[0][0])
        with session_scope(get_engine(url)) as session:
            found, items = service.compare_items(session, list(runs[0].outputs))
            spec = service.comparator_spec(session, found)
            scored = (
                service.blind_scoring_items(session, found, items)
                if blind
                else service.scoring_items(items)
            )
            rows = scoring.compare_runs(spec, scored, *runs)
    except (scoring.RunError, service.NotFound, service.Refused) as exc:
        return {"error": str(exc)}
    return {
        "task": found.name,
        "names": [run.model or name for run, (name, _) in zip(runs, files, strict=True)],
        "items": len({x.item_id for x in items}),
        "rows": rows,
    }


def backfilled_text(done: dict[str, Any]) -> str:
    added = "; ".join(
        f"{task}: " + ", ".join(f"{n} {layer}" for layer, n in layers.items())
        for task, layers in done["tasks"].items()
    )
    waiting = done["needs_correction"] + done["invalid_expected"]
    return (
        f"Backfill added {done['added']} eval items" + (f" ({added})" if added else "") + ". "
        f"{done['duplicates']} were duplicates of inputs already in their layer. "
        f"{waiting} wait for a reviewer's corrected answer "
        f"({done['needs_correction']} labelled without one, {done['invalid_expected']} with "
        "one the task's comparator calls invalid)."
    )


def comparison_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "layer": r["layer"],
                "bucket": r["bucket"],
                "items": r["n"],
                "A": formats.percent(r["a"]),
                "B": formats.percent(r["b"]),
                "B − A": formats.change(r["diff"]),
                "95% interval": formats.NONE
                if r["low"] is None
                else f"[{formats.change(r['low'])}, {formats.change(r['high'])}]",
                "only A right": r["only_a"],
                "only B right": r["only_b"],
            }
            for r in rows
        ]
    )


principal = common.require("review")
url = common.database_url()
# A reviewer never learns which answer was the edge's: without `read`, the blind form.
blind = not common.can(principal, "read")

st.title("Eval sets")
st.caption(
    "Labelled review items become eval items: the test each next model of a task must pass. "
    "Layers: regression (from rollbacks), anomaly (single answers), boundary (the rest)."
)

# Per blocked edge model, how far its regression set is (a review key: counts only).
regression.render(principal)

if BACKFILLED in st.session_state:
    st.success(formats.text(backfilled_text(st.session_state.pop(BACKFILLED))))
if st.button(
    "Backfill now", key="evalsets_backfill", help="Idempotent: run it as often as you like."
):
    done = common.act(actions.backfill, actor=common.actor(principal))
    if done is not None:
        st.session_state[BACKFILLED] = done
        st.cache_data.clear()
        st.rerun()

found = load_sets(url)
if not found["sets"]:
    st.info(
        "No eval items yet. Label review items on the Review page, then press Backfill now; "
        "items labelled wrong or unclear enter once a reviewer gives the corrected answer."
    )
    st.stop()

st.subheader("Layers")
st.dataframe(
    pd.DataFrame(found["sets"]).rename(columns={"count": "items", "sha256": "JSONL sha256"}),
    hide_index=True,
)
for row in found["sets"]:
    st.markdown(
        f"{formats.line(row['task'] + '/' + row['layer'])}: {row['count']} items, sha256 "
        f"{formats.line(row['sha256'])}"
    )
st.markdown(
    f"Manifest sha256 (a JSONL export of every layer): {formats.line(found['manifest_sha256'])}"
)

st.subheader("Preview and download")
names = [f"{row['task']}/{row['layer']}" for row in found["sets"]]
chosen = st.selectbox("Eval set", names, key="evalsets_set")
task, _, layer = chosen.partition("/")
cursors: list[int] = st.session_state.setdefault(f"evalsets_cursors_{chosen}", [0])
lines, next_cursor = load_rows(url, task, layer, cursors[-1], blind)
st.dataframe(
    pd.DataFrame(
        [
            {
                "id": x["id"][:12],
                "bucket": x["bucket"],
                "input": evalitems.input_text(x["input"])[:300],
                "expected": evalitems.canonical(x["expected"]).decode()[:200],
                "failure class": x["failure_class"] or "",
            }
            for x in lines
        ]
    ),
    hide_index=True,
)
first_row = (len(cursors) - 1) * ROWS + 1
st.caption(
    f"Rows {first_row}–{first_row + len(lines) - 1} of {formats.line(chosen)}."
    + (
        " Downloads are the blind form: the two answers as A and B in the order reviewers "
        "saw them, nothing naming a model or a side (the full form needs a key with read)."
        if blind
        else ""
    )
)
back, more, jsonl, csv = st.columns(4)
if back.button("First rows", key="evalsets_first", disabled=len(cursors) == 1):
    del cursors[1:]
    st.rerun()
if more.button("Next rows", key="evalsets_next", disabled=next_cursor is None) and (
    next_cursor is not None
):
    cursors.append(next_cursor)
    st.rerun()
jsonl.download_button(
    "Download JSONL",
    load_export(url, task, layer, "jsonl", blind),
    file_name=f"{task}-{layer}.jsonl",
    mime="application/x-ndjson",
    key="evalsets_jsonl",
)
csv.download_button(
    "Download CSV",
    load_export(url, task, layer, "csv", blind),
    file_name=f"{task}-{layer}.csv",
    mime="text/csv",
    key="evalsets_csv",
)

st.subheader("Compare two runs")
st.caption(
    'A run is JSONL, one line per item: {"id": ..., "output": ..., "model": ...}. '
    "Both runs must answer the same items of one task; B − A has a paired 95% interval."
    + (
        " Runs are scored against the expected answers as the preview shows them "
        "(placeholders numbered as shown)."
        if blind
        else ""
    )
)
left, right = st.columns(2)
run_a = left.file_uploader("Run A", type=["jsonl", "json", "txt"], key="evalsets_run_a")
run_b = right.file_uploader("Run B", type=["jsonl", "json", "txt"], key="evalsets_run_b")
if run_a is None or run_b is None:
    st.info("Upload run A and run B to see the comparison.")
    st.stop()
result = compare(url, ((run_a.name, run_a.getvalue()), (run_b.name, run_b.getvalue())), blind)
if "error" in result:
    st.error(formats.text(f"These runs cannot be compared: {result['error']}"))
    st.stop()
a_name, b_name = result["names"]
overall = result["rows"][-1]
st.markdown(
    f"**{formats.line(result['task'])}**: A = {formats.line(a_name)}, "
    f"B = {formats.line(b_name)}, {result['items']} items. "
    f"Overall A {formats.percent(overall['a'])}, B {formats.percent(overall['b'])}, B − A "
    + formats.change(overall["diff"])
    + (
        ""
        if overall["low"] is None
        else f" (95% interval {formats.change(overall['low'])} to {formats.change(overall['high'])})"
    )
    + "."
)
st.dataframe(comparison_table(result["rows"]), hide_index=True)

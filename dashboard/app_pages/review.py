"""Review: blind comparisons, one item at a time, with the keyboard alone.

Pick a task (or any). The page claims the next item for you and shows its input and the
two answers side by side as A and B (a single answer asks "is this answer right?"), the
words where they differ highlighted. A verdict key (1–5 for a pair, 1–3 for a single)
labels it and the next item comes at once; S skips it (with the reason typed, if any),
L gives it back. Optional: a failure class, the corrected answer and a note.

Blind: everything shown comes from the blind view the claim answers (A and B in an order
drawn per item, the diff in A/B terms); no model, side, sampling reason or routing
decision is read here. Labels are stored with the signed-in key's name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.review import actions
from controlplane.review.progress import reviewer_progress
from dashboard import common, reviewing

ANY = "any task"
PAIR_VERDICTS = [
    ("a_correct", "A is right"),
    ("b_correct", "B is right"),
    ("both_correct", "Both right"),
    ("both_wrong", "Both wrong"),
    ("unclear", "Unclear"),
]
SINGLE_VERDICTS = [("correct", "Right"), ("wrong", "Wrong"), ("unclear", "Unclear")]
HELD, FLASH, PAUSED = "review_item", "review_flash", "review_paused"


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_queue(url: str) -> list[dict[str, Any]]:
    """Per task: queued, claimed, labelled today (everyone), done; has_queue and why not."""
    return actions.queue_overview(get_engine(url))


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_progress(url: str, reviewer: str) -> dict[str, dict[str, Any]]:
    """Per task: this reviewer's labels today and the task's reviewer agreement."""
    with session_scope(get_engine(url)) as session:
        rows = reviewer_progress(session, reviewer, datetime.now(UTC))
    return {row["task"]: row for row in rows}


def agreement_text(name: str, found: dict[str, Any]) -> str:
    if found["items"] == 0:
        return f"{name}: none yet (no item has two reviewers' labels)"
    parts = [f"{found['items']} items shared by {len(found['reviewers'])} reviewers"]
    if found["alpha"] is not None:
        parts.append(f"α {found['alpha']:.2f}")
    if found["kappa"] is not None:
        parts.append(f"κ {found['kappa']:.2f}")
    if found["unanimous"] is not None:
        parts.append(f"{found['unanimous']:.0%} unanimous")
    return f"{name}: " + ", ".join(parts)


def progress_line(queue: list[dict[str, Any]], progress: dict[str, dict[str, Any]]) -> None:
    mine = sum(progress.get(row["task"], {}).get("mine_today", 0) for row in queue)
    everyone = sum(row["labelled_today"] for row in queue)
    left = sum(row["queued"] for row in queue if row["has_queue"])
    held = sum(row["claimed"] for row in queue if row["has_queue"])
    agreement = "; ".join(
        agreement_text(row["task"], progress[row["task"]]["agreement"])
        for row in queue
        if row["task"] in progress
    )
    st.markdown(
        f"Labelled today (UTC): **{mine}** by you, **{everyone}** by everyone · "
        f"left in queue: **{left}** ({held} held by reviewers now) · "
        f"reviewer agreement: {reviewing.escape(agreement)}"
    )


def show_progress(where: Any, task: str | None) -> None:
    """The progress line in its place at the top, with the counts as they are after this
    run's claim."""
    with where.container():
        progress_line(
            [row for row in load_queue(url) if task is None or row["task"] == task],
            load_progress(url, reviewer),
        )


def show_flash() -> None:
    if FLASH in st.session_state:
        kind, text = st.session_state.pop(FLASH)
        getattr(st, kind)(text)


def done_with_item(kind: str, text: str) -> None:
    """Forget the held item, say what happened, and show the next item at once."""
    st.session_state.pop(HELD, None)
    st.session_state[FLASH] = (kind, text)
    st.cache_data.clear()
    st.rerun()


def claim_next(task: str | None, queue: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The item this page holds, or the next one claimed for this reviewer."""
    held = st.session_state.get(HELD)
    keeps_no_text = {row["task"] for row in queue if not row["has_queue"]}
    if held is not None and (task not in (None, held["task"]) or held["task"] in keeps_no_text):
        # Another task was picked (a reviewer holds one item), or the held item's task
        # stopped keeping text: give it back first.
        common.act(actions.release, held["id"], reviewer)
        st.session_state.pop(HELD, None)
        held = None
    if held is None:
        try:
            held = actions.claim(common.engine(), task, reviewer)
        except ActionError as exc:
            if exc.status == 409:
                st.info(
                    f"{task} keeps no text (payload_policy none), so it has no review queue. "
                    "Set payload_policy to full or redacted in its config to review it."
                )
            else:
                st.error(common.detail_text(exc.detail))
            st.stop()
        if held is not None:
            st.session_state[HELD] = held
            load_queue.clear()  # the claim moved an item from queued to claimed
    return held


def answer(title: str, value: Any, marks: list[str]) -> None:
    st.markdown(f"**{title}**")
    with st.container(border=True):
        st.markdown(reviewing.highlighted(reviewing.as_text(value), marks))


def submit_label(item: dict[str, Any], verdict: str) -> None:
    fields = {k: st.session_state.get(f"{k}-{item['id']}") or "" for k in ("fc", "corr", "note")}
    try:
        corrected = reviewing.corrected_value(fields["corr"])
    except ValueError as exc:
        st.error(str(exc))
        return
    try:
        actions.label(
            common.engine(),
            item["id"],
            reviewer,
            verdict=verdict,
            failure_class=fields["fc"].strip() or None,
            corrected=corrected,
            note=fields["note"].strip() or None,
        )
    except ActionError as exc:
        if exc.status == 409:
            done_with_item(
                "warning",
                f"Your lease on item {item['id']} expired (or another reviewer holds it now), "
                "so that label was not stored. Here is the next item.",
            )
        st.error(common.detail_text(exc.detail))
        return
    done_with_item("success", f"Item {item['id']} labelled {verdict}.")


principal = common.require("review")
reviewer = common.actor(principal)
url = common.database_url()

st.title("Review")
st.caption(
    "Blind comparisons: the answers are shown as A and B in an order drawn per item. "
    "Keys: 1–5 verdicts for a pair (1–3 for a single answer), S skip, L give back."
)

queue = load_queue(url)
if not queue:
    st.info("No tasks yet: register a task and send results; sampled results come here.")
    st.stop()

names = [row["task"] for row in queue]
picked = st.selectbox("Task", [ANY, *names], key="review_task")
task = None if picked == ANY else picked
shown_queue = [row for row in queue if task is None or row["task"] == task]
progress = st.empty()
show_flash()

if st.session_state.get(PAUSED):
    show_progress(progress, task)
    st.info("You gave the item back. Take the next one when you are ready.")
    if st.button("Next item", key="review_next", shortcut="N", type="primary"):
        st.session_state.pop(PAUSED)
        st.rerun()
    st.stop()

if task is not None and not shown_queue[0]["has_queue"]:
    show_progress(progress, task)
    st.info(
        f"{task} keeps no text (payload_policy none), so it has no review queue. "
        "Set payload_policy to full or redacted in its config to review it."
    )
    st.stop()

item = claim_next(task, queue)
show_progress(progress, task)
if item is None:
    where = "any task" if task is None else task
    st.info(
        f"Nothing left for you to review in {where}: every queued item is labelled, skipped "
        "by you or held by another reviewer. Come back later; new items are sampled as "
        "windows close."
    )
    st.stop()

st.subheader(f"Item {item['id']} · {item['task']}")
diff = item["diff"]
st.markdown("**Input**")
with st.container(border=True):
    st.markdown(
        reviewing.highlighted(reviewing.as_text(item["input"]), reviewing.input_marks(diff))
    )

if item["kind"] == "single":
    answer("Is this answer right?", item["a"], [])
    verdicts = SINGLE_VERDICTS
else:
    left, right = st.columns(2)
    with left:
        answer("A", item["a"], reviewing.marks(diff, "a"))
    with right:
        answer("B", item["b"], reviewing.marks(diff, "b"))
    lines = reviewing.differences(diff)
    if lines:
        st.markdown(
            "**Where they differ**\n\n" + "\n".join(f"- {reviewing.escape(x)}" for x in lines)
        )
    verdicts = PAIR_VERDICTS

fc, corr, note = st.columns(3)
fc.text_input("Failure class (optional)", key=f"fc-{item['id']}", placeholder="e.g. wrong_label")
corr.text_input(
    "Corrected answer (optional)",
    key=f"corr-{item['id']}",
    placeholder="a label or text as it is; JSON for an object",
    help="Only with a verdict that names no right answer (both wrong, wrong, unclear).",
)
note.text_input("Note (optional)", key=f"note-{item['id']}")

for column, (n, (verdict, title)) in zip(
    st.columns(len(verdicts)), enumerate(verdicts, start=1), strict=True
):
    if column.button(title, key=f"verdict-{verdict}", shortcut=str(n), width="stretch"):
        submit_label(item, verdict)

reason_column, skip_column, release_column = st.columns([3, 1, 1], vertical_alignment="bottom")
reason = reason_column.text_input("Skip reason (optional)", key=f"skip-reason-{item['id']}")
if skip_column.button("Skip", key="review_skip", shortcut="S", width="stretch"):
    if common.act(actions.release, item["id"], reviewer, skip=True, reason=reason.strip() or None):
        done_with_item("info", f"Item {item['id']} skipped: it will not be offered to you again.")
if release_column.button("Give back", key="review_release", shortcut="L", width="stretch"):
    if common.act(actions.release, item["id"], reviewer):
        st.session_state[PAUSED] = True
        done_with_item("info", f"Item {item['id']} given back to the queue.")

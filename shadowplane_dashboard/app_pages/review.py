"""Review: blind comparisons, one item at a time, with the keyboard alone.

Pick a task (or any). A review-only key's page claims the next item at once; a key that
can do more (read, admin) claims nothing until "Start reviewing", so looking claims no
item. The item shows the task's guidelines, its input and the two answers side by side as
A and B (a single answer asks "is this answer right?"), the words where they differ
highlighted. A verdict key (1–5 for a pair, 1–3 for a single) labels it and the next item
comes at once; S skips it (with the reason typed, if any), L gives it back. Optional: a
failure class, the corrected answer and a note. Above it: what you labelled today and in
this session, how far each blocked task's regression set is labelled, and the last item
you labelled, one click (U) from being shown again to change your verdict.

Every button that acts on an item is keyed by the item's id: a key pressed twice, or
pressed while the next item is drawn, acts on the item it was pressed for (labelled
already: nothing more is stored), never on the next one, which the reviewer has not seen.

Blind: everything shown comes from the blind view the claim answers (A and B in an order
drawn per item, the diff in A/B terms); no model, side, sampling reason or routing
decision is read here. Labels are stored with the signed-in key's name."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import streamlit as st

from controlplane.db import StorageError, get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.review import actions
from controlplane.review.progress import reviewer_progress
from shadowplane_dashboard import common, formats, regression, reviewing

ANY = "any task"
PAIR_VERDICTS = [
    ("a_correct", "A is right"),
    ("b_correct", "B is right"),
    ("both_correct", "Both right"),
    ("both_wrong", "Both wrong"),
    ("unclear", "Unclear"),
]
SINGLE_VERDICTS = [("correct", "Right"), ("wrong", "Wrong"), ("unclear", "Unclear")]
# FLASH: the messages an action left for the top of the next run, in the order said.
HELD, FLASH, PAUSED = "review_item", "review_flash", "review_paused"
# The last item this page labelled (as it was shown, with the verdict given), and whether
# it is shown again to change that verdict.
LAST, FIXING = "review_last", "review_fixing"
# Pressed "Start reviewing" (a key that can do more than review); the review session per
# task picked (its start, and the items queued then).
STARTED, SESSIONS = "review_started", "review_sessions"
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]*)\)")
# The buttons that act on the item shown (their keys end with the item's id), and what
# each would have stored.
PRESSES = {
    **{f"verdict-{v}": "label" for v, _ in PAIR_VERDICTS + SINGLE_VERDICTS},
    "review_skip": "skip",
    "review_release": "give back",
}
TITLES = dict(PAIR_VERDICTS + SINGLE_VERDICTS)


def key_of(name: str, item: dict[str, Any]) -> str:
    """A button's key on this item's page: a press sent from another item's page (a key
    pressed twice, or while the next item is drawn) finds no such button here."""
    return f"{name}-{item['id']}"


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_queue(url: str) -> list[dict[str, Any]]:
    """Per task: queued, claimed, labelled today (everyone), done; has_queue and why not."""
    return actions.queue_overview(get_engine(url))


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_progress(
    url: str, reviewer: str, since: datetime | None = None
) -> dict[str, dict[str, Any]]:
    """Per task: this reviewer's labels today (and since `since`) and the task's reviewer
    agreement."""
    with session_scope(get_engine(url)) as session:
        rows = reviewer_progress(session, reviewer, datetime.now(UTC), since=since)
    return {row["task"]: row for row in rows}


def claims_at_once(principal: Any) -> bool:
    """A review-only key opens the page to label: it claims at once. A key that can do
    more (read, admin) may be only looking, so it claims nothing until Start reviewing."""
    return not common.can(principal, "read")


def scope_name(task: str | None) -> str:
    return "all tasks" if task is None else task


def review_session(task: str | None, queue: list[dict[str, Any]]) -> dict[str, Any]:
    """This page's review session of the task picked (or of all tasks): when it started and
    how many items were queued then, recorded the first time it is asked for."""
    sessions = st.session_state.setdefault(SESSIONS, {})
    name = scope_name(task)
    if name not in sessions:
        queued = sum(row["queued"] for row in queue if row["has_queue"])
        sessions[name] = {"since": datetime.now(UTC).replace(microsecond=0), "queued": queued}
    return dict(sessions[name])


def guidelines_markdown(text: str) -> str:
    """The guidelines as Markdown, an image written out rather than fetched."""
    return IMAGE.sub(lambda m: f"{m.group(1)} (image not shown: {m.group(2)})", text)


def agreement_text(name: str, found: dict[str, Any]) -> str:
    if found["items"] == 0:
        return f"{name}: none yet (no item has two reviewers' labels)"
    parts = [f"{found['items']} items shared by {len(found['reviewers'])} reviewers"]
    if found["alpha"] is not None:
        parts.append(f"α {formats.coefficient(found['alpha'])}")
    if found["kappa"] is not None:
        parts.append(f"κ {formats.coefficient(found['kappa'])}")
    if found["unanimous"] is not None:
        parts.append(f"{formats.percent(found['unanimous'])} unanimous")
    return f"{name}: " + ", ".join(parts)


def progress_line(
    queue: list[dict[str, Any]], progress: dict[str, dict[str, Any]], task: str | None
) -> None:
    """Today's labels, queue and agreement of the task picked (or of all tasks), said so."""
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
        f"Today (UTC), in {reviewing.escape(scope_name(task))}: you labelled **{mine}** "
        f"{items(mine)}, everyone **{everyone}** · left in queue: **{left}** ({held} held by "
        f"reviewers now) · reviewer agreement: {reviewing.escape(agreement)}"
    )


def items(n: int) -> str:
    return "item" if n == 1 else "items"


def session_bar(
    session: dict[str, Any], progress: dict[str, dict[str, Any]], task: str | None
) -> None:
    """This session's labels against the items queued when it started."""
    done = sum(row.get("mine_since", 0) for row in progress.values())
    queued = session["queued"]
    since = f"{formats.clock(session['since'])} UTC"
    where = reviewing.escape(scope_name(task))
    st.progress(
        min(1.0, done / queued) if queued else 0.0,
        text=f"This session (since {since}): {done} labelled of the {queued} {items(queued)} "
        f"queued in {where} when it started",
    )


def show_progress(where: Any, task: str | None, session: dict[str, Any] | None = None) -> None:
    """The progress line and bars in their place at the top, with the counts as they are
    after this run's claim; the session's bar once it has begun."""
    shown = [row for row in load_queue(url) if task is None or row["task"] == task]
    progress = load_progress(url, reviewer, session["since"] if session else None)
    shown_progress = {k: v for k, v in progress.items() if task is None or k == task}
    with where.container():
        progress_line(shown, shown_progress, task)
        if session is not None:
            session_bar(session, shown_progress, task)
        regression.render(principal, task)


def show_guidelines(item: dict[str, Any], progress: dict[str, dict[str, Any]]) -> None:
    """The item's task's guidelines, open until the reviewer has labelled one of its items
    today (then one click away)."""
    text = item.get("guidelines")
    if not text:
        return
    first = progress.get(item["task"], {}).get("mine_today", 0) == 0
    with st.expander(f"Guidelines for {item['task']}", expanded=first):
        st.markdown(guidelines_markdown(text))


def say(kind: str, text: str) -> None:
    """Leave a message (an st function's name and its text) for the top of the next run,
    after any said before it."""
    st.session_state.setdefault(FLASH, []).append((kind, text))


def show_flash() -> list[tuple[str, str]]:
    """Show the messages left for this run, in the order said; returned, so that a run
    drawn again at once (claim_next: the held item's lease lost) says them again."""
    said = st.session_state.pop(FLASH, [])
    for kind, text in said:
        getattr(st, kind)(text)
    return said


def done_with_item(kind: str, text: str) -> None:
    """Forget the held item, say what happened, and show the next item at once."""
    st.session_state.pop(HELD, None)
    say(kind, text)
    st.cache_data.clear()
    st.rerun()


def no_text(task: str | None) -> str:
    return formats.text(
        f"{task} keeps no text (payload_policy none), so it has no review queue. "
        "Set payload_policy to full or redacted in its config to review it."
    )


def claim(task: str | None) -> dict[str, Any] | None:
    """The item this reviewer holds, its lease renewed, else the next one claimed for them;
    the claim's refusal as a sentence (and the page stops there)."""
    try:
        return actions.claim(common.engine(), task, reviewer)
    except ActionError as exc:
        if exc.status == 409:
            st.info(no_text(task))
        else:
            st.error(formats.text(common.detail_text(exc.detail)))
        st.stop()
    raise AssertionError("unreachable")  # st.stop raises


def give_back_quietly(item_id: int) -> None:
    """Give back an item the page no longer shows, if the reviewer still holds it; a lease
    already lost (409) or a refusal changes nothing, so nothing is said."""
    try:
        actions.release(common.engine(), item_id, reviewer)
    except ActionError:
        pass


def claim_next(task: str | None, queue: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The item this page holds, checked on each run to be still this reviewer's (the claim
    renews their lease on it while they are on it), or the next one claimed for them."""
    held = st.session_state.get(HELD)
    keeps_no_text = {row["task"] for row in queue if not row["has_queue"]}
    if held is not None and (task not in (None, held["task"]) or held["task"] in keeps_no_text):
        # Another task was picked (a reviewer holds one item), or the held item's task
        # stopped keeping text: give it back first.
        give_back_quietly(held["id"])
        st.session_state.pop(HELD, None)
        held = None
    if held is None:
        held = claim(task)
        if held is not None:
            st.session_state[HELD] = held
            load_queue.clear()  # the claim moved an item from queued to claimed
        return held
    # The reviewer holds the item still (the claim answers it, its lease renewed), unless
    # the lease expired and another reviewer took it, it was labelled, skipped or given
    # back in another window, or its task stopped keeping text: then the next item.
    fresh = claim(task)
    if fresh is not None and fresh["id"] == held["id"]:
        st.session_state[HELD] = fresh
        return fresh
    give_back_quietly(held["id"])
    pressed = [what for key, what in PRESSES.items() if st.session_state.get(key_of(key, held))]
    if pressed and actions.has_labelled(common.engine(), held["id"], reviewer):
        # A key pressed twice: the first press labelled the item, this one came after.
        said = (
            f"You labelled item {held['id']} already (a key pressed twice?), so that second "
            f"{pressed[0]} was not stored"
        )
    else:
        said = (
            f"Your lease on item {held['id']} ended (it expired and another reviewer may hold "
            "it now, it was labelled, skipped or given back in another window, or its task "
            "stopped keeping text)" + (f", so that {pressed[0]} was not stored" if pressed else "")
        )
    # What this run said above (a correction stored and confirmed, say) is said again
    # with the warning, not replaced by it: the page is drawn again before it is seen.
    for message in said_above:
        say(*message)
    say("warning", said + (". Here is the next item." if fresh is not None else "."))
    if fresh is None:
        st.session_state.pop(HELD, None)
    else:
        st.session_state[HELD] = fresh
    load_queue.clear()
    # Drawn again from the top: a key pressed for the lost item must not act on the next.
    st.rerun()
    return None


def answer(title: str, value: Any, marks: list[reviewing.Span]) -> None:
    st.markdown(f"**{title}**")
    with st.container(border=True):
        st.markdown(reviewing.highlighted(reviewing.as_text(value), marks))


def submit_label(item: dict[str, Any], verdict: str, *, fixing: bool = False) -> None:
    """Store the verdict (with the fields typed) and show the next item; `fixing`: the
    reviewer's change of their verdict on the last item labelled (a correction, which the
    server takes without a lease), then back to the item held."""
    prefix = "fix-" if fixing else ""
    fields = {
        k: st.session_state.get(f"{prefix}{k}-{item['id']}") or "" for k in ("fc", "corr", "note")
    }
    try:
        corrected = reviewing.corrected_value(fields["corr"])
    except ValueError as exc:
        st.error(formats.text(exc))
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
        if exc.status == 409 and not fixing:
            done_with_item(
                "warning",
                f"Your lease on item {item['id']} expired (or another reviewer holds it now), "
                "so that label was not stored. Here is the next item.",
            )
        refusal = common.detail_text(exc.detail)
        if refusal.startswith("verdict: "):
            # A verdict the task's comparator contradicts: said with the buttons' names,
            # and the item stays for another verdict.
            refusal = "Not stored: " + refusal.removeprefix("verdict: ")
            for name, title in PAIR_VERDICTS:
                refusal = refusal.replace(name, f"“{title}”")
        st.error(formats.text(refusal))
        return
    before = st.session_state.get(LAST)
    st.session_state[LAST] = {"item": item, "verdict": verdict, "fields": fields}
    if fixing:
        st.session_state.pop(FIXING, None)
        was = TITLES[before["verdict"]] if before else "?"
        say(
            "success",
            f"Item {item['id']}: your verdict is now “{TITLES[verdict]}” (it was “{was}”).",
        )
        st.cache_data.clear()
        st.rerun()
    done_with_item("success", f"Item {item['id']} labelled {verdict}.")


def release_item(item: dict[str, Any], *, skip: bool, reason: str | None) -> bool | None:
    """Give back or skip the item: True when done, False when the reviewer's lease had
    ended (409), None when refused or failed (the page says why)."""
    try:
        actions.release(common.engine(), item["id"], reviewer, skip=skip, reason=reason)
        return True
    except ActionError as exc:
        if exc.status == 409:
            return False
        st.error(formats.text(common.detail_text(exc.detail)))
    except StorageError as exc:
        st.error(f"The database did not answer ({type(exc).__name__}); nothing was changed.")
    return None


def skip_item(item: dict[str, Any], task: str | None, reason: str | None) -> None:
    done = release_item(item, skip=True, reason=reason)
    if done:
        done_with_item("info", f"Item {item['id']} skipped: it will not be offered to you again.")
    if done is None:
        return
    # The lease ended. Free again, the item comes back to this reviewer first (the oldest
    # claimable): take it back and skip it, so it is not offered to them again.
    again = claim(task)
    if again is not None and again["id"] == item["id"]:
        if release_item(again, skip=True, reason=reason):
            done_with_item(
                "info", f"Item {item['id']} skipped: it will not be offered to you again."
            )
    done_with_item(
        "warning",
        f"Your lease on item {item['id']} had expired (another reviewer may hold it now), "
        "so the skip was not stored: it may be offered to you again later. Here is the next "
        "item.",
    )


def give_back(item: dict[str, Any]) -> None:
    done = release_item(item, skip=False, reason=None)
    if done is None:
        return
    st.session_state[PAUSED] = True
    if done:
        done_with_item("info", f"Item {item['id']} given back to the queue.")
    done_with_item(
        "warning",
        f"Your lease on item {item['id']} had expired already (another reviewer may hold it "
        "now), so there was nothing to give back.",
    )


def show_item(item: dict[str, Any], *, fixing: bool = False) -> None:
    """The item as the claim answered it (blind), its optional fields and its verdict
    buttons, keyed by its id; `fixing`: shown again to change the verdict given."""
    st.subheader(f"Item {item['id']} · {formats.line(item['task'])}")
    show_guidelines(item, load_progress(url, reviewer))
    diff = item["diff"]
    st.markdown("**Input**")
    with st.container(border=True):
        st.markdown(
            reviewing.highlighted(reviewing.as_text(item["input"]), reviewing.input_marks(item))
        )
    if item["kind"] == "single":
        answer("Is this answer right?", item["a"], [])
        verdicts = SINGLE_VERDICTS
    else:
        left, right = st.columns(2)
        with left:
            answer("A", item["a"], reviewing.marks(item, "a"))
        with right:
            answer("B", item["b"], reviewing.marks(item, "b"))
        lines = reviewing.differences(diff)
        if lines:
            st.markdown(
                "**Where they differ**\n\n" + "\n".join(f"- {formats.line(x)}" for x in lines)
            )
        if item.get("note"):
            # Every difference shown is on a field the reference itself changes between runs.
            st.info(formats.line(item["note"]))
        verdicts = PAIR_VERDICTS
    prefix = "fix-" if fixing else ""
    fc, corr, note = st.columns(3)
    fc.text_input(
        "Failure class (optional)", key=f"{prefix}fc-{item['id']}", placeholder="e.g. wrong_label"
    )
    corr.text_input(
        "Corrected answer (optional)",
        key=f"{prefix}corr-{item['id']}",
        placeholder="a label or text as it is; JSON for an object",
        help="Only with a verdict that names no right answer (both wrong, wrong, unclear).",
    )
    note.text_input("Note (optional)", key=f"{prefix}note-{item['id']}")
    for column, (n, (verdict, title)) in zip(
        st.columns(len(verdicts)), enumerate(verdicts, start=1), strict=True
    ):
        key = key_of(f"{prefix}verdict-{verdict}", item)
        if column.button(title, key=key, shortcut=str(n), width="stretch"):
            submit_label(item, verdict, fixing=fixing)


def offer_change() -> None:
    """The last item this page labelled, one click from being shown again to change the
    verdict (a key pressed by mistake takes the item away at once)."""
    last = st.session_state.get(LAST)
    if last is None or st.session_state.get(FIXING):
        return
    item = last["item"]
    title = f"Change item {item['id']}'s verdict (“{TITLES[last['verdict']]}”)"
    if st.button(title, key="review_change_last", shortcut="U", help="Shown again as it was"):
        # As it was seen: the fields hold what was typed with the verdict, kept with the
        # correction unless changed.
        for name, typed in last.get("fields", {}).items():
            st.session_state[f"fix-{name}-{item['id']}"] = typed
        st.session_state[FIXING] = True
        st.rerun()


def fix_last() -> None:
    """The last item labelled, shown again as it was, to change the verdict; the item held
    waits (`keep_held` renews its lease on each run of this view)."""
    last = st.session_state[LAST]
    item = last["item"]
    st.info(
        f"Changing your verdict on item {item['id']} (“{TITLES[last['verdict']]}”): press the "
        "verdict it should have. Your newer label replaces your earlier one."
    )
    show_item(item, fixing=True)
    if st.button("Keep it as it is", key="review_keep_last", shortcut="K"):
        st.session_state.pop(FIXING, None)
        st.rerun()


def keep_held(task: str | None, queue: list[dict[str, Any]]) -> None:
    """While the last verdict is changed, the item held waits under a lease renewed on each
    run, as its own view renews it (claim_next: a lease lost is said, the next item held
    instead). Run after the change view's keys, so a lost lease never drops a correction
    pressed; nothing is claimed when the page holds no item (given back, none left)."""
    if HELD in st.session_state:
        claim_next(task, queue)


principal = common.require("review")
reviewer = common.actor(principal)
url = common.database_url()

st.title("Review")
st.caption(
    "Blind comparisons: the answers are shown as A and B in an order drawn per item. "
    "Keys: 1–5 verdicts for a pair (1–3 for a single answer), S skip, L give back, U change "
    "the verdict you gave last."
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
said_above = show_flash()
offer_change()
if st.session_state.get(FIXING) and LAST in st.session_state:
    fix_last()
    keep_held(task, queue)
    show_progress(progress, task)
    st.stop()

if st.session_state.get(PAUSED):
    show_progress(progress, task, review_session(task, shown_queue))
    st.info("You gave the item back. Take the next one when you are ready.")
    if st.button("Next item", key="review_next", shortcut="N", type="primary"):
        st.session_state.pop(PAUSED)
        st.rerun()
    st.stop()

if task is not None and not shown_queue[0]["has_queue"]:
    show_progress(progress, task)
    st.info(no_text(task))
    st.stop()

started = st.session_state.get(STARTED) or HELD in st.session_state
if not (started or claims_at_once(principal)):
    show_progress(progress, task)
    st.info(
        "Opening this page claims nothing. Start reviewing to be handed the next item of "
        f"{reviewing.escape(scope_name(task))}: you then hold one item at a time, under a "
        "lease renewed while you are on it."
    )
    if st.button("Start reviewing", key="review_start", shortcut="N", type="primary"):
        st.session_state[STARTED] = True
        st.rerun()
    st.stop()

session = review_session(task, shown_queue)
item = claim_next(task, queue)
show_progress(progress, task, session)
if item is None:
    where = "any task" if task is None else task
    st.info(
        formats.text(
            f"Nothing left for you to review in {where}: every queued item is labelled, skipped "
            "by you or held by another reviewer. Come back later; new items are sampled as "
            "windows close."
        )
    )
    st.stop()

show_item(item)
reason_column, skip_column, release_column = st.columns([3, 1, 1], vertical_alignment="bottom")
reason = reason_column.text_input("Skip reason (optional)", key=f"skip-reason-{item['id']}")
if skip_column.button("Skip", key=key_of("review_skip", item), shortcut="S", width="stretch"):
    skip_item(item, task, reason.strip() or None)
if release_column.button(
    "Give back", key=key_of("review_release", item), shortcut="L", width="stretch"
):
    give_back(item)

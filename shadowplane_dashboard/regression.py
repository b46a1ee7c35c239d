"""The regression set of each blocked edge model, for the Review and Eval sets pages.

With `read` (or `admin`), per blocked model a bar and "Regression set for small-int4@3 on
ticket_classify: 37 of 100 labelled — unblocking still needs: a run of small-int4@4 on
this set ≥ 95%"
(`GET /v1/tasks/{task}/regression`). With `review` alone, per task only the count
("Regression set of ticket_classify: 37 of 100 labelled"): a reviewer never reads which
model is blocked or which one runs next."""

from __future__ import annotations

from typing import Any

import streamlit as st

from controlplane.auth.service import Principal
from controlplane.db import get_engine, session_scope
from controlplane.evalsets import gate
from shadowplane_dashboard import common, formats


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_blocks(url: str, task: str | None) -> list[dict[str, Any]]:
    """Per task with a blocked model (or the named one): each block's progress (names models)."""
    with session_scope(get_engine(url)) as session:
        return gate.blocked_progress(session, task)


@st.cache_data(ttl=common.TTL_SECONDS, show_spinner=False)
def load_counts(url: str, task: str | None) -> list[dict[str, Any]]:
    """Per task with a blocked model (or the named one): labelled of needed, no model named."""
    with session_scope(get_engine(url)) as session:
        return gate.blind_progress(session, task)


def share(labelled: int, needed: int) -> float:
    """The bar's fill: labelled of needed (full when nothing is needed)."""
    return min(1.0, labelled / needed) if needed else 1.0


def block_sentence(task: str, block: dict[str, Any]) -> str:
    """One blocked model's line, in Markdown (names models: `read` keys only)."""
    counted = (
        f"Regression set for {formats.text(block['model'])} on {formats.text(task)}: "
        f"{formats.count(block['labelled'])} of {formats.count(block['needed'])} labelled"
    )
    if block["unblock"] is None:
        return f"{counted} — a run on this set passes: it can be unblocked without force"
    return f"{counted} — unblocking still needs: {formats.text(block['unblock'])}"


def count_sentence(task: str, counts: dict[str, Any]) -> str:
    """One task's blind line, in Markdown: no model, no side."""
    return (
        f"Regression set of {formats.text(task)}: {formats.count(counts['labelled'])} of "
        f"{formats.count(counts['needed'])} labelled"
    )


def render(principal: Principal, task: str | None = None) -> None:
    """The regression sets of the tasks with a blocked model (or of the named task), as
    much as the key may read; nothing when no model is blocked."""
    url = common.database_url()
    if common.can(principal, "read"):
        for view in load_blocks(url, task):
            for block in view["blocks"]:
                st.progress(
                    share(block["labelled"], block["needed"]),
                    text=block_sentence(view["task"], block),
                )
        return
    for row in load_counts(url, task):
        st.progress(share(row["labelled"], row["needed"]), text=count_sentence(row["task"], row))

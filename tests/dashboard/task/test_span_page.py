"""The Task page's span evidence rendered (AppTest, PostgreSQL): in a copy of the seeded
database invoice_extract is canaried with an input_shift rule over its four windows and a
kept baseline of much shorter inputs. The page is rendered then (the Cost and Input
lengths sections, the rule's verdict in words, the charts' data), and again once the
policy's pass has rolled the task back and marked it for a re-grade (the banner, the
rollback's sentence and span evidence, the re-grade decision in words). Figures are read
from the windows API's rows, the stored results and the decisions, not from the read the
page makes."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
import streamlit as st
from sqlalchemy import select, update
from streamlit.testing.v1 import AppTest

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.metrics import lengths
from controlplane.metrics.service import window_rows
from controlplane.models import Result, Task
from controlplane.rollout import actions
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.service import list_decisions
from controlplane.scheduler import run_pass
from controlplane.sim.evalset_example import CONFIGS, END, START
from shadowplane_dashboard.formats import money
from tests.dashboard.conftest import Seeded, _seeded_copy, open_page, page_text, shown

pytestmark = pytest.mark.integration

TASK = "invoice_extract"
# The baseline it was "graded" on: 500 inputs of 100-159 tokens.
BASELINE = lengths.histogram(100 + i % 60 for i in range(500))
SOURCE = "the offload grade of 2026-11-29"
SHIFT_RULE = {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": "20m"}
COST_TITLE = "Cost per window: paid, the cloud baseline, the fixed share and net savings"


@dataclass
class Render:
    """What one run of the page wrote: its text, its Markdown as shown, its error boxes,
    its tables and its charts (by title: spec and datasets)."""

    text: str
    markdown: list[str]
    errors: list[str]
    tables: list[pd.DataFrame]
    charts: dict[str, tuple[dict[str, Any], list[pd.DataFrame]]]


def rendered(at: AppTest) -> Render:
    assert not at.exception, at.exception
    charts = {}
    for element in at.get("vega_lite_chart"):
        proto: Any = element.proto
        spec = json.loads(proto.spec)
        data = [pa.ipc.open_stream(d.data.data).read_pandas() for d in proto.datasets]
        charts[spec.get("title")] = (spec, data)
    return Render(
        page_text(at),
        [shown(m.value) for m in at.markdown],
        [shown(e.value) for e in at.error],
        [df.value for df in at.dataframe],
        charts,
    )


@pytest.fixture(scope="module")
def pages(pg_seed: dict[str, str]) -> Iterator[tuple[Seeded, Render, Render]]:
    """The seeded copy, TASK's page in canary, and its page once rolled back."""
    with _seeded_copy(pg_seed) as seeded, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHADOWPLANE_DATABASE_URL", seeded.url)
        document = copy.deepcopy(next(c for c in CONFIGS if c["task"] == TASK))
        document["rollback"] = {"rules": [{**SHIFT_RULE, "min_samples": 50}]}
        apply_tasks(seeded.engine, [document], actor="test")
        actions.promote(seeded.engine, TASK, actor="test", reason="canary", veto=0.7, force=True)
        with session_scope(seeded.engine) as session:
            session.execute(
                update(Task)
                .where(Task.name == TASK)
                .values(
                    stage_changed_at=START - timedelta(hours=1),
                    input_baseline={"counts": BASELINE, "over_cap": None, "source": SOURCE},
                )
            )
        at = open_page(seeded, "read", "app_pages/task.py", task=TASK)
        canary = rendered(at)
        run_pass(seeded.engine, END + timedelta(seconds=150), veto=0.7)
        st.cache_data.clear()
        at.run()
        yield seeded, canary, rendered(at)


def decisions(seeded: Seeded) -> dict[str, dict[str, Any]]:
    with session_scope(seeded.engine) as session:
        return {d["action"]: d for d in list_decisions(session, TASK)}


def test_in_canary_the_page_says_the_shift_rule_would_roll_back(
    pages: tuple[Seeded, Render, Render],
) -> None:
    """The input lengths of the rule's 20m (the four windows) against the kept baseline:
    the index the rule fired with at the next pass, the histograms of the stored results'
    lengths and of the baseline, and the rule's verdict in words before it acted."""
    seeded, canary, _ = pages
    rollback = decisions(seeded)["rollback"]
    psi = rollback["evidence"]["statistic"]
    with session_scope(seeded.engine) as session:
        task_id = session.scalars(select(Task.id).where(Task.name == TASK)).one()
        tokens = session.scalars(
            select(Result.input_tokens).where(
                Result.task_id == task_id, Result.ts >= START, Result.ts < END
            )
        ).all()
    text = canary.text
    assert not any("Re-grade needed" in e for e in canary.errors)
    assert (
        f"Over the last 20m (to {END:%Y-%m-%d %H:%M} UTC, {len(tokens):,} results) inputs are "
    ) in text
    assert f"baseline, {SOURCE} (500 results): population stability index **{psi:.2f}**" in text
    assert "The input-shift alert opens at an index of 0.10: the index is at or above it." in text
    quarters = ", ".join(f"{q['psi']:.2f}" for q in rollback["evidence"]["span"]["quarters"])
    assert (
        "The input_shift rule (input_shift <= 0.25 over 20m) fires when the whole span's index "
        "and each of its four quarters' are above 0.25 (a burst shorter than half the span "
        f"never fires). It is breached: the span's index is {psi:.2f}, its quarters' "
        f"{quarters}. In canary and full it rolls the task back and marks it for a re-grade; "
        "in shadow it leaves a notice."
    ) in text

    _, [base] = canary.charts["Baseline input lengths"]
    _, [now] = canary.charts["Input lengths now"]
    assert list(base["bin"]) == list(now["bin"])
    counts, bins = lengths.histogram(tokens), lengths.bin_labels()
    assert list(now["count"]) == [counts[bins.index(b)] for b in now["bin"]]
    assert list(base["count"]) == [BASELINE[bins.index(b)] for b in base["bin"]]
    assert sum(now["count"]) == len(tokens) and sum(base["count"]) == 500
    assert list(now["share"]) == pytest.approx([n / len(tokens) for n in now["count"]])


def test_the_cost_sentence_and_chart_hold_the_windows_figures(
    pages: tuple[Seeded, Render, Render],
) -> None:
    seeded, canary, _ = pages
    with session_scope(seeded.engine) as session:
        runtime = task_runtimes(session, {TASK})[TASK]
        rows = [r for r in window_rows(session, runtime, bucket="all") if r["closed"]]
    assert len(rows) == 4
    paid = sum(r["total_cost"] for r in rows)
    baseline = sum(r["baseline_cost"] for r in rows)
    net = sum(r["net_savings"] for r in rows)
    [sentence] = [line for line in canary.text.splitlines() if line.startswith("Over the 20m")]
    # Every edge answer was also paid to the cloud (shadow rate 1.0): a loss.
    assert baseline < paid
    assert f"offloading cost {money(paid - baseline)} more than the cloud baseline" in sentence
    assert f"net savings **{money(net)}**" in sentence and "at 40.00 a day" in sentence
    assert "No net_savings rule is set: cost never rolls this task back." in canary.text

    _, [data] = canary.charts[COST_TITLE]
    drawn = data.pivot(index="window_start", columns="component", values="amount")
    assert list(drawn.index) == [r["window_start"] for r in rows]
    assert list(drawn["paid edge"]) == pytest.approx([r["edge_cost"] for r in rows])
    assert list(drawn["paid cloud"]) == pytest.approx([r["cloud_cost"] for r in rows])
    assert list(drawn["cloud baseline"]) == pytest.approx([r["baseline_cost"] for r in rows])
    assert list(drawn["net savings"]) == pytest.approx([r["net_savings"] for r in rows])
    assert list(drawn["fixed share"]) == pytest.approx([40 * 300 / 86400] * 4)


def test_once_rolled_back_the_rollback_and_the_regrade_mark_read_in_words(
    pages: tuple[Seeded, Render, Render],
) -> None:
    seeded, _, rolled = pages
    found = decisions(seeded)
    rollback, mark = found["rollback"], found["needs_regrade"]
    assert rollback["evidence"]["how"] == "input_shift"
    with session_scope(seeded.engine) as session:
        task = session.scalars(select(Task).where(Task.name == TASK)).one()
        assert task.needs_regrade and task.shifted_at is not None
        shifted = f"{task.shifted_at:%Y-%m-%d %H:%M} UTC"
    [banner] = [e for e in rolled.errors if "Re-grade needed" in e]
    assert banner.startswith(f"**Re-grade needed.** The inputs of {TASK} shifted")
    assert f"until a grade over traffic since {shifted} says offload" in banner
    # The policy's sentence, as it wrote it, and its span evidence under it.
    assert rollback["reason"] == rollback["evidence"]["explanation"]
    assert rollback["reason"] in rolled.markdown
    span = rollback["evidence"]["span"]
    assert (
        f"- population stability index **{span['psi']:.2f}** over 20m ({span['results']:,} "
        f"results) against {SOURCE} (500 results)"
    ) in rolled.text
    for k, quarter in enumerate(span["quarters"], start=1):
        assert (
            f"- quarter {k}: index {quarter['psi']:.2f} over {quarter['results']} results"
        ) in rolled.text
    [bins] = [t for t in rolled.tables if list(t.columns) == ["tokens", "baseline", "now"]]
    assert bins["now"].sum() == pytest.approx(1.0) and bins["baseline"].sum() == pytest.approx(1.0)
    # The re-grade mark is a decision of its own, in words.
    assert "re-grade needed by **policy** (stays rolled_back)" in rolled.text
    assert mark["reason"] in rolled.markdown
    assert "The input_shift rule judges in shadow, canary and full only; the task is " in (
        rolled.text
    )

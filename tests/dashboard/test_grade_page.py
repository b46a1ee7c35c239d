"""The grade on the dashboard (AppTest, PostgreSQL): the Overview gives each task's tier and
score with why (its help), or "not graded yet"; the Task page's Grade section draws the four
dimensions (and the weighted score) as bars against the tiers' thresholds with the veto
marked on the error cost's bar, and writes each dimension's sentence, what would change
the tier, the noisy fields and, for an insufficient grade, what is missing. The
difference chart draws edge agreement less its threshold and the cloud's agreement with
itself less the same per bucket; a bucket without repeat pairs has no floor drawn (not a
zero).

The grade is the grading service's, from window rows stored for the test; every figure
asserted is read from the kept grade, or computed here from the stored counts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import select
from streamlit.testing.v1 import AppTest

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.grading.service import grade_task, latest_grades
from controlplane.metrics.stats import wilson
from controlplane.models import Task, WindowMetrics
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.overview import overview
from controlplane.settings import Settings
from shadowplane_dashboard.task import evidence, grading
from tests.dashboard.conftest import Seeded, _seeded_copy, open_page, page_text, shown
from tests.dashboard.graded import (
    HOURS,
    INPUT_P50,
    INPUT_P95,
    PER_BUCKET,
    VETO,
    Graded,
    diffs,
    seed_graded,
)
from tests.dashboard.vega import charts_on, layer_data, problems

pytestmark = pytest.mark.integration

TASK = "invoice_extract"
# A task registered for the test and never graded, and one graded without any traffic.
NEVER = "never_graded"
THIN = "thin_traffic"


def _config(name: str) -> dict[str, Any]:
    return {"task": name, "comparator": {"kind": "label", "labels": ["yes", "no"]}}


@pytest.fixture(scope="module")
def graded(pg_seed: dict[str, str]) -> Iterator[tuple[Seeded, Graded, dict[str, Any]]]:
    """A copy of the seeded database with TASK graded from a day and a half of windows,
    THIN graded from none (insufficient), NEVER not graded; the dashboard pointed at it."""
    with _seeded_copy(pg_seed) as copy, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHADOWPLANE_DATABASE_URL", copy.url)
        apply_tasks(copy.engine, [_config(NEVER), _config(THIN)], actor="test")
        found = seed_graded(copy.engine, TASK)
        with session_scope(copy.engine) as session:
            thin = grade_task(session, THIN, veto=VETO, now=found.last)
        yield copy, found, thin


@pytest.fixture(scope="module")
def overview_page(graded: tuple[Seeded, Graded, dict[str, Any]]) -> AppTest:
    at = open_page(graded[0], "read", "app_pages/overview.py")
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def task_page(graded: tuple[Seeded, Graded, dict[str, Any]]) -> AppTest:
    at = open_page(graded[0], "read", "app_pages/task.py", task=TASK)
    assert not at.exception, at.exception
    return at


# --- the Overview -------------------------------------------------------------------------


def test_the_overview_gives_each_tasks_tier_or_not_graded_yet(
    graded: tuple[Seeded, Graded, dict[str, Any]], overview_page: AppTest
) -> None:
    seeded, found, thin = graded
    with session_scope(seeded.engine) as session:
        kept = latest_grades(session)
        rows = {row.task: row for row in overview(session).rows}
    assert kept[TASK] == found.grade and kept[THIN] == thin and NEVER not in kept
    assert {task: row.grade for task, row in rows.items()} == {t: kept.get(t) for t in rows}
    tier, score = found.grade["tier"], found.grade["score"]
    assert tier in ("offload", "shadow", "keep_cloud") and score is not None

    # Each row's grade cell, in the rows' order: the tier and score, and why as its help.
    cells = [m for m in overview_page.markdown if m.proto.help.startswith("grade: ")]
    shown_grades = {
        row: (shown(cell.value), shown(cell.proto.help))
        for row, cell in zip(rows, cells, strict=True)
    }
    reasons = "; ".join(found.grade["reasons"])
    assert reasons and shown_grades[TASK] == (
        f"{tier} ({score:.2f})",
        f"grade: {tier} ({score:.2f}) — {reasons}",
    )
    # The long tail the windows hold is named.
    ratio = INPUT_P95 / INPUT_P50
    assert any(
        r.startswith(f"input length: P95 is {ratio:.1f}x P50") for r in found.grade["reasons"]
    )
    assert shown_grades[THIN] == (
        "insufficient",
        f"grade: insufficient — missing {'; '.join(thin['missing'])}",
    )
    assert shown_grades[NEVER] == ("not graded yet", "grade: not graded yet")


# --- the Task page's Grade section --------------------------------------------------------


def test_the_task_page_draws_the_four_dimensions_against_the_thresholds(
    graded: tuple[Seeded, Graded, dict[str, Any]], task_page: AppTest
) -> None:
    _, found, _ = graded
    document = found.grade
    dims = document["dimensions"]
    chart = charts_on(task_page)[grading.BARS.title]
    [bars] = layer_data(chart, "bar")
    assert list(bars["dimension"]) == [
        "input length",
        "determinism",
        "error cost (1 − cost)",
        "frequency",
        "weighted score",
    ]
    assert list(bars["score"]) == pytest.approx(
        [
            dims["input_length"]["score"],
            dims["determinism"]["score"],
            1 - dims["error_cost"]["value"],
            dims["frequency"]["score"],
            document["score"],
        ]
    )
    # The danger signals are coloured as such: the long tail and the cloud's own noise.
    states = dict(zip(bars["dimension"], bars["state"], strict=True))
    assert states["input length"] == "danger signal" and dims["input_length"]["signal"]
    assert states["determinism"] == "danger signal" and dims["determinism"]["signal"]
    assert states["error cost (1 − cost)"] == "no signal" and not dims["error_cost"]["veto"]
    # The tiers' thresholds from the task's config, and the veto on the error cost's bar.
    [rules, labels] = layer_data(chart, "rule") + layer_data(chart, "text")
    assert list(rules["at"]) == [0.5, 0.75] and list(rules["rule"]) == list(labels["rule"])
    assert list(rules["rule"]) == ["shadow ≥ 0.5", "offload ≥ 0.75"]
    [tick] = layer_data(chart, "tick")
    veto = Settings().error_cost_veto
    assert list(tick["dimension"]) == ["error cost (1 − cost)"]
    assert list(tick["at"]) == pytest.approx([1 - veto])

    text = page_text(task_page)
    assert f"grade: {document['tier']} ({document['score']:.2f})" in text
    for name in ("input_length", "determinism", "error_cost", "frequency"):
        assert dims[name]["reason"] in text
    assert (
        f"Veto: not applied (error cost {dims['error_cost']['value']:g} is below {veto:g})" in text
    )


def test_the_task_page_says_what_would_change_the_tier_and_which_fields_are_noisy(
    graded: tuple[Seeded, Graded, dict[str, Any]], task_page: AppTest
) -> None:
    _, found, _ = graded
    document = found.grade
    text = page_text(task_page)
    assert "What would change the tier" in text
    assert document["to_change"]
    for sentence in document["to_change"]:
        assert f"- {sentence}" in text
    # The noisy fields, from the stored differences: amount on 2 of every 10 repeat pairs
    # is over the 5% rate; currency on 1 of every 40 is not.
    pairs = HOURS * sum(n[2] for n in PER_BUCKET)
    counted = {
        name: sum(diffs(k).get(name, 0) for k in range(HOURS)) for name in ("amount", "currency")
    }
    assert counted["amount"] / pairs > 0.05 > counted["currency"] / pairs
    assert [n["name"] for n in document["noisy"]] == ["amount"]
    assert (
        f"- **amount** — {counted['amount'] / pairs:.1%} ({counted['amount']} of {pairs} "
        "repeat pairs)"
    ) in text
    assert "**currency** —" not in text
    assert "What is missing" not in text


def test_an_insufficient_grade_says_what_is_missing(
    graded: tuple[Seeded, Graded, dict[str, Any]],
) -> None:
    seeded, _, thin = graded
    at = open_page(seeded, "read", "app_pages/task.py", task=THIN)
    assert not at.exception, at.exception
    text = page_text(at)
    assert thin["tier"] == "insufficient" and thin["missing"]
    assert "grade: insufficient — missing" in text and "What is missing" in text
    for missing in thin["missing"]:
        assert f"- {missing}" in text
    for sentence in thin["to_change"]:
        assert f"- {sentence}" in text


def test_a_task_never_graded_says_so_on_its_page(
    graded: tuple[Seeded, Graded, dict[str, Any]],
) -> None:
    at = open_page(graded[0], "read", "app_pages/task.py", task=NEVER)
    assert not at.exception, at.exception
    assert "Not graded yet." in page_text(at)
    assert grading.BARS.title not in charts_on(at)


# --- the difference chart and its noise floor ----------------------------------------------


def stored_counts(seeded: Seeded, task: str, since: datetime) -> pd.DataFrame:
    """The stored counts of the task's windows from `since`, per window and bucket."""
    with session_scope(seeded.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == task))
        rows = session.execute(
            select(
                WindowMetrics.window_start,
                WindowMetrics.bucket,
                WindowMetrics.n_pairs,
                WindowMetrics.n_agree,
                WindowMetrics.n_repeat_pairs,
                WindowMetrics.n_repeat_agree,
            ).where(WindowMetrics.task_id == task_id, WindowMetrics.window_start >= since)
        ).all()
    frame = pd.DataFrame(rows, columns=["window_start", "bucket", "n", "agree", "rn", "ragree"])
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return frame


def test_the_difference_chart_is_what_the_stored_windows_give(
    graded: tuple[Seeded, Graded, dict[str, Any]], task_page: AppTest
) -> None:
    """Per window and bucket, edge agreement less the agreement rule's threshold, its
    Wilson interval less the same, and the cloud's agreement with itself less it where the
    bucket had repeat pairs (the noise floor, none elsewhere: not a zero), as computed
    here from the stored counts; a 0 rule labelled with the threshold; a sentence per
    bucket names the floor or its absence."""
    seeded, found, _ = graded
    threshold = agreement_rule_threshold(seeded)
    chart = charts_on(task_page)[evidence.DIFFERENCE.title]
    assert problems(*chart) == []
    # The default period: the last 24 hours up to the newest window.
    stored = stored_counts(seeded, TASK, found.last - timedelta(hours=23))
    assert len(stored["window_start"].unique()) == 24
    [area] = layer_data(chart, "area")
    [lines] = layer_data(chart, "line")
    key = ["window_start", "bucket"]

    edge = lines[lines["series"] == evidence.EDGE].set_index(key).sort_index()
    expected = stored.set_index(key).sort_index()
    assert list(edge.index) == list(expected.index)
    assert list(edge["difference"]) == pytest.approx(
        list(expected["agree"] / expected["n"] - threshold)
    )
    # The band layer draws the rows with an interval (its filter): the edge's.
    band = area.dropna(subset=["difference_low", "difference_high"]).set_index(key).sort_index()
    intervals = [wilson(a, n) for a, n in zip(expected["agree"], expected["n"], strict=True)]
    assert list(band["difference_low"]) == pytest.approx([lo - threshold for lo, _ in intervals])
    assert list(band["difference_high"]) == pytest.approx([hi - threshold for _, hi in intervals])

    floor = lines[lines["series"] == evidence.FLOOR].set_index(key).sort_index()
    repeats = expected[expected["rn"] > 0]
    assert list(floor.index) == list(repeats.index)
    assert list(floor["difference"]) == pytest.approx(
        list(repeats["ragree"] / repeats["rn"] - threshold)
    )
    # The buckets without repeat pairs have edge agreement and no floor.
    bare = set(expected[expected["rn"] == 0].index.get_level_values("bucket"))
    assert bare and bare <= set(edge.index.get_level_values("bucket"))
    assert bare.isdisjoint(floor.index.get_level_values("bucket"))
    # Its 0 is the threshold, said on the rule.
    [label] = layer_data(chart, "text")
    assert list(label["label"]) == [evidence.zero_label(threshold, "the agreement rule's")]

    text = page_text(task_page)
    no_pairs = next(b for b, n in zip(found.buckets, PER_BUCKET, strict=True) if not n[2])
    assert any(
        f"{no_pairs}: agreement" in shown(m.value) and "cloud vs itself: no repeat pairs" in m.value
        for m in task_page.markdown
    )
    assert evidence.difference_words(threshold, "the agreement rule's") in text


def agreement_rule_threshold(seeded: Seeded) -> float:
    """The threshold of the task's first agreement rule not off, from its stored config."""
    with session_scope(seeded.engine) as session:
        runtime = task_runtimes(session, {TASK})[TASK]
    rules = runtime.config.rollback.rules
    return next(r.threshold for r in rules if r.metric == "agreement" and r.mode != "off")


def test_every_chart_of_a_graded_task_draws_without_a_warning(task_page: AppTest) -> None:
    """Vega warns of nothing on any chart (no field without a value, no legends at odds),
    every chart has a legend and reads time in UTC, every area is a light band."""
    drawn = charts_on(task_page)
    assert grading.BARS.title in drawn and evidence.DIFFERENCE.title in drawn
    assert {title: problems(*chart) for title, chart in drawn.items()} == {
        title: [] for title in drawn
    }

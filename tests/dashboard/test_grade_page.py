"""The grade on the dashboard (AppTest, PostgreSQL): the Overview gives each task's tier and
score with why (its help), or "not graded yet"; the Task page's Grade section draws the four
dimensions (and the weighted score) as bars against the tiers' thresholds with the veto
marked on the error cost's bar, and writes each dimension's sentence, what would change
the tier, the noisy fields and, for an insufficient grade, what is missing. The agreement
chart draws the cloud's agreement with itself beside edge agreement per bucket, and a
bucket without repeat pairs has no floor drawn (not a zero).

The grade is the grading service's, from window rows stored for the test; every figure
asserted is read from the kept grade, or computed here from the stored counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from controlplane.db import session_scope
from controlplane.grading.service import grade_task, latest_grades
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.overview import overview
from controlplane.settings import Settings
from dashboard.task import evidence, grading
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


def charts_on(at: AppTest) -> dict[str, tuple[dict[str, Any], dict[str, pd.DataFrame]]]:
    """Every Vega-Lite chart the page drew, by title: its spec and its datasets by name."""
    out = {}
    for element in at.get("vega_lite_chart"):
        proto: Any = element.proto
        spec = json.loads(proto.spec)
        data = {d.name: pa.ipc.open_stream(d.data.data).read_pandas() for d in proto.datasets}
        out[spec.get("title")] = (spec, data)
    return out


def layer_data(
    chart: tuple[dict[str, Any], dict[str, pd.DataFrame]], mark: str
) -> list[pd.DataFrame]:
    """The data of the chart's layers drawn with `mark`."""
    spec, data = chart
    marks = [layer for layer in spec["layer"] if layer["mark"]["type"] == mark]
    return [data[layer["data"]["name"]] for layer in marks]


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


# --- the noise floor beside edge agreement ------------------------------------------------


def test_the_agreement_chart_draws_the_cloud_against_itself_per_bucket(
    graded: tuple[Seeded, Graded, dict[str, Any]], task_page: AppTest
) -> None:
    _, found, _ = graded
    chart = charts_on(task_page)[evidence.AGREEMENT.title]
    [lines] = layer_data(chart, "line")
    floor = lines[lines["series"] == "cloud vs itself"]
    edge = lines[lines["series"] == "edge vs cloud"]
    # The default period: the last 24 hours up to the newest window.
    windows = 24
    # Per bucket, the stored counts' self-agreement; buckets without repeat pairs: none.
    expected = {
        bucket: n[3] / n[2] for bucket, n in zip(found.buckets, PER_BUCKET, strict=True) if n[2]
    }
    expected["all"] = sum(n[3] for n in PER_BUCKET) / sum(n[2] for n in PER_BUCKET)
    drawn = floor.groupby("bucket")["agreement"]
    assert drawn.size().to_dict() == {bucket: windows for bucket in expected}
    assert drawn.min().to_dict() == pytest.approx(expected)
    assert drawn.max().to_dict() == pytest.approx(expected)
    assert set(edge["bucket"]) == {*found.buckets, "all"}
    assert set(floor["bucket"]).isdisjoint(
        b for b, n in zip(found.buckets, PER_BUCKET, strict=True) if not n[2]
    )
    # The legend names both series.
    [layer] = [layer for layer in chart[0]["layer"] if layer["mark"]["type"] == "line"]
    assert layer["encoding"]["strokeDash"]["sort"] == ["edge vs cloud", "cloud vs itself"]

    text = page_text(task_page)
    no_pairs = next(b for b, n in zip(found.buckets, PER_BUCKET, strict=True) if not n[2])
    assert f"{no_pairs}: agreement" in text
    assert any(
        f"{no_pairs}: agreement" in shown(m.value) and "cloud vs itself: no repeat pairs" in m.value
        for m in task_page.markdown
    )

"""The grade and the cloud's noise floor in a real browser: `shadowplane dashboard` against
a seeded copy holding a graded task's windows (tests/dashboard/graded.py), driven in
headless Chromium (the fixtures of test_browser). The Task page shows the tier, and its
agreement chart, as Vega draws it, has the "cloud vs itself" series in its legend and
points of it at the self-agreement the stored counts give, in the buckets with repeat
pairs only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from dashboard.task import evidence
from tests.dashboard.conftest import Seeded
from tests.dashboard.graded import PER_BUCKET, seed_graded
from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    PAGE_SECONDS,
    browser,
    choose,
    dashboard,
    open_page,
    screenshot,
    screenshots,
    sign_in,
    wait_for_text,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

TASK = "invoice_extract"
FLOOR, EDGE = evidence.NOISE_FLOOR.label, evidence.NOISE_FLOOR.main


def chart_labels(driver: WebDriver, title: str) -> list[str]:
    """The ARIA descriptions Vega gives the SVG of the chart titled `title` (its legends'
    and its marks' points), once it is drawn."""

    def labels(d: WebDriver) -> list[str] | Literal[False]:
        for svg in d.find_elements(By.CSS_SELECTOR, "svg.marks"):
            texts = [
                t.get_attribute("textContent") or "" for t in svg.find_elements(By.TAG_NAME, "text")
            ]
            if title in texts:
                found = [
                    e.get_attribute("aria-label") or ""
                    for e in svg.find_elements(By.CSS_SELECTOR, "[aria-label]")
                ]
                return [*texts, *found]
        return False

    try:
        return WebDriverWait(
            driver,
            PAGE_SECONDS,
            poll_frequency=0.5,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(labels)
    except TimeoutException:
        raise AssertionError(f"no chart titled {title!r} was drawn as SVG") from None


def test_the_noise_floor_is_drawn_beside_edge_agreement(
    seeded: Seeded,
    dashboard: str,  # noqa: F811 (test_browser's fixtures)
    browser: WebDriver,  # noqa: F811
    screenshots: Path,  # noqa: F811
) -> None:
    found = seed_graded(seeded.engine, TASK)
    document = found.grade
    sign_in(browser, dashboard, seeded.keys["read"])
    open_page(browser, "Task")
    wait_for_text(browser, "Decisions", what="the Task page")
    choose(browser, "Task", TASK)
    tier = f"grade: {document['tier']} ({document['score']:.2f})"
    wait_for_text(browser, f"{TASK} is in", "Grade", tier, what="the Task page's grade")

    shown = chart_labels(browser, evidence.AGREEMENT.title)
    screenshot(browser, screenshots, "task_grade_noise")
    # The legend of the dashed lines names both series.
    assert (
        f"Symbol legend titled 'series' for strokeDash with 2 values: {EDGE}, {FLOOR}" in shown
    ), shown
    # Vega describes each point: its window, value (as the axis writes it), bucket, series.
    points: dict[str, dict[str, set[float]]] = {EDGE: {}, FLOOR: {}}
    for label in shown:
        point = POINT.search(label)
        if point:
            by_bucket = points[point["series"]].setdefault(point["bucket"], set())
            by_bucket.add(float(point["value"]) / 100)
    assert set(points[EDGE]) == {*found.buckets, "all"}, points
    drawn = points[FLOOR]
    # The stored counts' self-agreement per bucket with repeat pairs; none elsewhere.
    expected = {b: n[3] / n[2] for b, n in zip(found.buckets, PER_BUCKET, strict=True) if n[2]}
    expected["all"] = sum(n[3] for n in PER_BUCKET) / sum(n[2] for n in PER_BUCKET)
    assert set(drawn) == set(expected), drawn
    for bucket, values in drawn.items():
        # One value per bucket (every window holds the same counts), to the axis's 0.1%.
        assert len(values) == 1 and abs(values.pop() - expected[bucket]) <= 0.0005, bucket


POINT = re.compile(
    r"agreement: (?P<value>[\d.]+)%; bucket: (?P<bucket>[^;]+); series: (?P<series>[^;]+);"
)

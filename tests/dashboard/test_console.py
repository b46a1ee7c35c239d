"""The browser console of every page: `shadowplane dashboard` against the seeded database
with a graded task added, in headless Chromium, signed in with the admin key. Each page,
once drawn, has written no warning or error to the console (Vega's "Infinite extent" and
"Conflicting legend property" among them); every chart of the Task page has a legend; the
difference chart marks the rollback and draws the cloud's noise floor where, and at the
level, the stored counts give."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from shadowplane_dashboard.task import evidence
from tests.dashboard.browser import (
    PAGE_SECONDS,
    chart_labels,
    choose,
    console_problems,
    idle,
    open_page,
    sign_in,
    wait_for_text,
)
from tests.dashboard.conftest import Seeded
from tests.dashboard.graded import PER_BUCKET, seed_graded

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

# The seed's rolled-back task, and the task graded from windows stored for the test.
ROLLED_BACK, GRADED = "ticket_classify", "invoice_extract"
CHARTS = "[data-testid='stVegaLiteChart']"


def test_no_page_writes_to_the_console(seeded: Seeded, dashboard: str, browser: WebDriver) -> None:
    found = seed_graded(seeded.engine, GRADED)
    sign_in(browser, dashboard, seeded.keys["admin"])
    assert console_problems(browser) == [], "the sign-in page"

    open_page(browser, "Overview")
    wait_for_text(browser, "Overview", ROLLED_BACK, GRADED, what="the Overview")
    assert drawn(browser) == [], "the Overview"

    open_page(browser, "Task")
    wait_for_text(browser, "Decisions", what="the Task page")
    choose(browser, "Task", ROLLED_BACK)
    wait_for_text(browser, f"{ROLLED_BACK} is in", "Config versions", what="the Task page")
    assert drawn(browser) == [], f"the Task page of {ROLLED_BACK}"
    assert charts_without_a_legend(browser) == []
    # The rollback is marked on the difference chart, in its legend of events.
    marked = chart_labels(browser, evidence.DIFFERENCE.title)
    assert any(label.startswith("Symbol legend titled 'event'") for label in marked), marked

    choose(browser, "Task", GRADED)
    tier = f"grade: {found.grade['tier']} ({found.grade['score']:.2f})"
    wait_for_text(browser, f"{GRADED} is in", tier, "Config versions", what="the graded task")
    assert drawn(browser) == [], f"the Task page of {GRADED}"
    assert charts_without_a_legend(browser) == []
    the_noise_floor_is_drawn_against_the_threshold(seeded, browser, found.buckets)

    open_page(browser, "Review")
    wait_for_text(browser, "Review", what="the Review page")
    assert drawn(browser) == [], "the Review page"
    open_page(browser, "Eval sets")
    wait_for_text(browser, "Eval sets", what="the Eval sets page")
    assert drawn(browser) == [], "the Eval sets page"
    open_page(browser, "Audit")
    wait_for_text(browser, "events shown", what="the Audit page")
    assert drawn(browser) == [], "the Audit page"


def drawn(driver: WebDriver) -> list[dict[str, Any]]:
    """Once the page's run has finished and Vega has drawn each of its charts: the
    console's warnings and errors since the last look."""
    assert idle(driver, PAGE_SECONDS), "the page is still running"
    try:
        WebDriverWait(
            driver,
            PAGE_SECONDS,
            poll_frequency=0.5,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(
            lambda d: d.execute_script(
                "return [...document.querySelectorAll(arguments[0])]"
                ".every(c => c.querySelector('svg.marks'))",
                CHARTS,
            )
        )
    except TimeoutException:
        raise AssertionError("a chart was never drawn") from None
    return console_problems(driver)


def charts_without_a_legend(driver: WebDriver) -> list[str]:
    """The titles (first texts) of the page's charts whose SVG holds no legend."""
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll(arguments[0] + ' svg.marks')]"
            ".filter(svg => !svg.querySelector(\"[aria-label*=' legend titled ']\"))"
            ".map(svg => (svg.querySelector('text') || {}).textContent || '(untitled)')",
            CHARTS,
        )
    )


def the_noise_floor_is_drawn_against_the_threshold(
    seeded: Seeded, driver: WebDriver, buckets: list[str]
) -> None:
    """The graded task's difference chart, as Vega draws it: a dashed `cloud vs itself`
    line, in the legend, for each bucket with repeat pairs (and `all`), at the cloud's
    agreement with itself less the agreement rule's threshold, from the stored counts
    (graded.PER_BUCKET, every window alike); none for a bucket without; the edge's points
    at its agreement less the same threshold."""
    with session_scope(seeded.engine) as session:
        rules = task_runtimes(session, {GRADED})[GRADED].config.rollback.rules
    threshold = next(r.threshold for r in rules if r.metric == "agreement" and r.mode != "off")
    shown = chart_labels(driver, evidence.DIFFERENCE.title)
    legend = f"Symbol legend titled 'series' for strokeDash with 2 values: {evidence.EDGE}, "
    assert any(label.startswith(legend + evidence.FLOOR) for label in shown), shown
    # Vega describes each mark (a point, a line by its first point): its fields as written.
    drawn: dict[str, dict[str, set[float]]] = {evidence.EDGE: {}, evidence.FLOOR: {}}
    for label in shown:
        fields = dict(part.split(": ", 1) for part in label.split("; ") if ": " in part)
        if "difference" in fields and fields.get("series") in drawn:
            value = float(fields["difference"].replace("−", "-").rstrip("%")) / 100
            drawn[fields["series"]].setdefault(fields["bucket"], set()).add(value)
    every = {k: sum(n[k] for n in PER_BUCKET) for k in range(4)}
    edge = {b: n[1] / n[0] for b, n in zip(buckets, PER_BUCKET, strict=True)}
    edge["all"] = every[1] / every[0]
    floor = {b: n[3] / n[2] for b, n in zip(buckets, PER_BUCKET, strict=True) if n[2]}
    floor["all"] = every[3] / every[2]
    for series, expected in ((evidence.EDGE, edge), (evidence.FLOOR, floor)):
        assert set(drawn[series]) == set(expected), (series, drawn[series])
        for bucket, values in drawn[series].items():
            # One level per bucket (every window holds the same counts), to the 0.1% shown.
            [value] = values
            assert abs(value - (expected[bucket] - threshold)) <= 0.0005, (series, bucket)

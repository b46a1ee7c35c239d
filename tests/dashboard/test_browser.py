"""The dashboard in a real browser: `shadowplane dashboard` on a free port against the
seeded PostgreSQL database with a graded task added, driven in headless Chromium through
chromedriver — sign in through the password field, every page, one review label given with
the keyboard — with a screenshot of each page in a folder whose path the test prints.

Each page, once drawn, has written no warning or error to the browser console (Vega's
"Infinite extent" and "Conflicting legend property" among them); every chart of the Task
page has a legend; the difference chart marks the rollback and draws the cloud's noise
floor where, and at the level, the stored counts give. One browser session visits each
page once for all of it: each session and dashboard costs seconds to start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from controlplane.audit.service import entries
from controlplane.catalog.service import task_runtimes
from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.evalsets.service import sets
from controlplane.review.repository import has_label
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.service import list_decisions
from controlplane.rollout.taskview import span_evidence
from controlplane.rollout.timeline import Filters, timeline
from controlplane.sim.evalset_example import CONFIGS
from shadowplane_dashboard.formats import money
from shadowplane_dashboard.task import evidence
from tests.dashboard.browser import (
    PAGE_SECONDS,
    as_shown,
    body_text,
    chart_labels,
    choose,
    console_problems,
    idle,
    nav_links,
    open_page,
    press_until,
    screenshot,
    sign_in,
    wait_for_text,
)
from tests.dashboard.conftest import Seeded
from tests.dashboard.graded import PER_BUCKET, seed_graded
from tests.review.queuedata import add_items

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

# The seed's tasks: one rolled back by the policy, one still in shadow (graded from windows
# stored for the test).
ROLLED_BACK, GRADED = "ticket_classify", "invoice_extract"
CHARTS = "[data-testid='stVegaLiteChart']"


def test_every_page_in_chromium(
    seeded: Seeded, dashboard: str, browser: WebDriver, screenshots: Path
) -> None:
    # Before anything is read: their tasks are on the pages and in the audit log.
    seed_rewrite(seeded)
    found = seed_graded(seeded.engine, GRADED)
    # What the pages must show, read from the services they are built on.
    with session_scope(seeded.engine) as session:
        rollback = next(
            as_shown(d["reason"])
            for d in list_decisions(session, ROLLED_BACK)
            if d["actor"] == "policy" and d["action"] == "rollback"
        )
        events = timeline(session, Filters())
        manifest = sets(session)["manifest_sha256"]
        spans = span_evidence(session, ROLLED_BACK)
        assert spans is not None and spans["cost"] is not None
        net = money(spans["cost"]["terms"]["net_savings"])

    # A link shared at night, opened signed out: sign in, land on it.
    a_link_opened_signed_out_lands_on_its_page_after_sign_in(
        dashboard, browser, seeded.keys["read"], ROLLED_BACK
    )
    # An SRE (the admin key): Overview, then the rolled-back task's page, then Audit.
    assert console_problems(browser) == [], "the sign-in page and the linked task page"
    sign_in(browser, dashboard, seeded.keys["admin"])
    assert list(nav_links(browser)) == ["Overview", "Task", "Review", "Eval sets", "Audit"]
    assert console_problems(browser) == [], "the sign-in page"
    open_page(browser, "Overview")
    # Its row names the rollback; the decision's sentence is on the Task page.
    wait_for_text(browser, "Overview", GRADED, ROLLED_BACK, "rollback by policy", what="Overview")
    assert drawn(browser) == [], "the Overview"
    screenshot(browser, screenshots, "overview")

    open_page(browser, "Task")
    wait_for_text(browser, "Decisions", what="the Task page")
    choose(browser, "Task", ROLLED_BACK)
    wait_for_text(
        browser,
        f"{ROLLED_BACK} is in",
        f"Last decision: {rollback}",
        # The Cost and Input lengths sections, in sentences.
        f"net savings {net} (95% interval",
        "The input-shift alert opens at an index of 0.10",
        what="the Task page",
    )
    assert drawn(browser) == [], f"the Task page of {ROLLED_BACK}"
    assert charts_without_a_legend(browser) == []
    # The rollback is marked on the difference chart, in its legend of events.
    marked = chart_labels(browser, evidence.DIFFERENCE.title)
    assert any(label.startswith("Symbol legend titled 'event'") for label in marked), marked
    screenshot(browser, screenshots, "task")

    choose(browser, "Task", GRADED)
    tier = f"grade: {found.grade['tier']} ({found.grade['score']:.2f})"
    wait_for_text(browser, f"{GRADED} is in", tier, "Config versions", what="the graded task")
    assert drawn(browser) == [], f"the Task page of {GRADED}"
    assert charts_without_a_legend(browser) == []
    the_noise_floor_is_drawn_against_the_threshold(seeded, browser, found.buckets)

    open_page(browser, "Audit")
    wait_for_text(
        browser,
        f"{len(events)} events shown, newest first.",
        as_shown(events[0].what),
        what="the Audit page",
    )
    assert drawn(browser) == [], "the Audit page"
    screenshot(browser, screenshots, "audit")

    # A reviewer (a review key, in a new session): Review and Eval sets only.
    sign_in(browser, dashboard, seeded.keys["review"])
    assert list(nav_links(browser)) == ["Review", "Eval sets"]
    open_page(browser, "Eval sets")
    wait_for_text(browser, "Eval sets", manifest, what="the Eval sets page")
    assert drawn(browser) == [], "the Eval sets page"
    screenshot(browser, screenshots, "eval_sets")

    open_page(browser, "Review")
    shown = wait_for_text(browser, "Item ", what="the Review page's claimed item")
    found = re.search(r"Item (\d+) · (\w+)", shown)
    assert found, shown
    item = int(found.group(1))
    # Blind: nothing on the reviewer's screen names a side.
    assert not re.search(r"\b(edge|cloud)\b", shown, re.IGNORECASE), shown
    assert drawn(browser) == [], "the Review page"
    screenshot(browser, screenshots, "review")
    assert not _has_label(seeded, item, "review")
    # The first verdict's key ("A is right" for a pair, "Right" for a single answer), sent
    # to the page itself: no button is clicked.
    press_until(browser, "1", lambda: _has_label(seeded, item, "review"))
    wait_for_text(browser, f"Item {item} labelled", what="the label's confirmation")
    screenshot(browser, screenshots, "review_labelled")
    assert _has_label(seeded, item, "review")
    labels = _labels_by(seeded, "review")
    assert [(e["item"], e["verdict"]) for e in labels] in (
        [(item, "a_correct")],
        [(item, "correct")],
    ), labels
    a_rewrite_is_shown_with_its_differences_marked_in_both_answers(browser, screenshots)


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


def _labels_by(seeded: Seeded, reviewer: str) -> list[dict[str, Any]]:
    """The audit log's label entries recorded with `reviewer` as the actor."""
    with session_scope(seeded.engine) as session:
        return [
            dict(e.details)
            for e in entries(session, actor=reviewer, limit=1000)
            if e.action == "review.label"
        ]


def _has_label(seeded: Seeded, item: int, reviewer: str) -> bool:
    with session_scope(seeded.engine) as session:
        return has_label(session, item, reviewer)


# --- checks inside the one browser session (each session costs seconds to start) ---


def a_link_opened_signed_out_lands_on_its_page_after_sign_in(
    dashboard: str, browser: WebDriver, key: str, task: str
) -> None:
    """A link to a page (the Overview's `/task?task=NAME`, one shared in a chat at night)
    opened in a browser that is not signed in: the sign-in form, then that page with its
    query."""
    browser.get(f"{dashboard}/task?task={task}")
    field = WebDriverWait(browser, PAGE_SECONDS).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "input[type='password']")
    )
    field.send_keys(key + Keys.ENTER)
    wait_for_text(browser, "Signed in as", f"{task} is in", what="the linked task page")
    assert "/task" in browser.current_url and f"task={task}" in browser.current_url


REWRITE = "reply_rewrite"
# The rewrite's answers differ by numbers (7 and 30 in numerals, 90 and 126 next to 元)
# and a negation (不); A is the edge's.
EDGE_REPLY, CLOUD_REPLY = "七天内可以退货，退款90元。", "三十天内不可以退货，退款126元。"


def seed_rewrite(seeded: Seeded) -> None:
    """A text_conservation task with one queued pair, its diff the comparator's."""
    comparator = {"kind": "text_conservation"}
    config = {**CONFIGS[1], "task": REWRITE, "comparator": comparator}
    apply_tasks(seeded.engine, [config], actor="test")
    add_items(
        seeded.engine,
        REWRITE,
        1,
        comparator="text_conservation",
        input={"text": "我付了126元，可以退货吗？"},
        edge_output=EDGE_REPLY,
        cloud_output=CLOUD_REPLY,
        diff=compare(comparator, EDGE_REPLY, CLOUD_REPLY).diff,
        a_is_edge=True,
    )


def a_rewrite_is_shown_with_its_differences_marked_in_both_answers(
    browser: WebDriver, screenshots: Path
) -> None:
    """The reviewer picks the rewrite task: A and B are drawn with the numbers and the
    negation highlighted in each (in the other, the verb the negation negates), as the
    browser paints Streamlit's highlight next to Chinese characters."""
    choose(browser, "Task", REWRITE)
    wait_for_text(browser, f"· {REWRITE}", what="the rewrite item")

    def marks(d: WebDriver) -> dict[str, list[str]] | Literal[False]:
        found = {}
        for column in d.find_elements(By.CSS_SELECTOR, "[data-testid='stColumn']"):
            title = column.text.splitlines()[:1]
            if title in (["A"], ["B"]):
                spans = column.find_elements(By.CSS_SELECTOR, ".stMarkdownColoredBackground")
                found[title[0]] = [span.text for span in spans]
        return found if found.get("A") and found.get("B") else False

    try:
        shown = WebDriverWait(
            browser,
            PAGE_SECONDS,
            poll_frequency=0.5,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(marks)
    except TimeoutException:
        raise AssertionError(
            f"no marks in A and B; the page shows:\n{body_text(browser)}"
        ) from None
    screenshot(browser, screenshots, "review_rewrite_marks")
    # In A the numbers and 可 (of 可以, "can", which B negates); in B 不 and the numbers.
    assert shown == {"A": ["七", "可", "90"], "B": ["三十", "不", "126"]}, shown

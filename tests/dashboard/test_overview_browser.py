"""The Overview in Chromium at 1440×900 on the seeded rollout, whose traffic stopped long
ago: every task on one row without sideways scrolling, two sparklines drawn per task, and
each task's figures kept beside "no traffic since"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from controlplane.db import session_scope
from controlplane.rollout.overview import overview
from shadowplane_dashboard.formats import money, percent
from shadowplane_dashboard.overview import standing
from tests.dashboard.browser import screenshot, sign_in, wait_for_text
from tests.dashboard.conftest import Seeded

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

# What each box gives: its full width and the width it shows (a scrollbar when more).
WIDTHS = """
const box = (e) => e ? [e.scrollWidth, e.clientWidth] : null;
const table = document.querySelector('.st-key-overview_table');
return {
  page: box(document.documentElement),
  main: box(document.querySelector('[data-testid="stMain"]')),
  table: box(table),
  cells: Array.from(table.querySelectorAll('[data-testid="stColumn"]')).map(box),
};
"""
SPARKLINES = """
return Array.from(document.querySelectorAll('.st-key-overview_table svg.sparkline')).map(
  (s) => ({
    name: s.classList[1],
    label: s.getAttribute('aria-label'),
    width: s.getBoundingClientRect().width,
    marks: s.querySelectorAll('path, circle').length,
  }));
"""

# The words of the table set on more than one line (a word: text between white space).
SPLIT_WORDS = """
const table = document.querySelector('.st-key-overview_table');
const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
const split = [];
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const words = /\\S+/g;
  for (let m = words.exec(n.data); m; m = words.exec(n.data)) {
    const range = document.createRange();
    range.setStart(n, m.index);
    range.setEnd(n, m.index + m[0].length);
    const lines = new Set(Array.from(range.getClientRects())
      .filter((r) => r.width > 0).map((r) => Math.round(r.top)));
    if (lines.size > 1) split.push(m[0]);
  }
}
return split;
"""


def test_the_overview_fits_1440_pixels_with_two_sparklines_a_task_and_keeps_quiet_figures(
    seeded_once: Seeded, dashboard_once: str, browser_once: WebDriver, screenshots: Path
) -> None:
    with session_scope(seeded_once.engine) as session:
        rows = overview(session).rows
    now = datetime.now(UTC)
    # The seed's traffic ended days ago: every task is quiet, with the figures of its last
    # window with results.
    assert rows and all(row.quiet_since is not None and row.agreement for row in rows)
    driver = browser_once
    driver.set_window_size(1440, 900)
    sign_in(driver, dashboard_once, seeded_once.keys["admin"])
    wait_for_text(
        driver,
        *(
            text
            for row in rows
            for text in (
                row.task,
                str(standing(row, now)),
                percent(row.agreement),
                money(row.net_savings_per_day),
            )
        ),
        what="the Overview's rows",
    )
    screenshot(driver, screenshots, "overview-1440")

    widths = driver.execute_script(WIDTHS)
    for box in ("page", "main", "table"):
        full, shown = widths[box]
        assert full <= shown, f"the {box} scrolls sideways: {full} px wide in {shown} px"
    assert len(widths["cells"]) >= 8 * (len(rows) + 1)
    assert all(full <= shown for full, shown in widths["cells"]), widths["cells"]
    # Every word on one line: names, headers, grades, the dates under a task's name.
    assert driver.execute_script(SPLIT_WORDS) == []

    drawn = driver.execute_script(SPARKLINES)
    assert len(drawn) == 2 * len(rows)
    assert all(s["width"] > 0 and s["marks"] > 0 for s in drawn), drawn
    # Each ends on the figure its row shows: the last window with results.
    said = {(s["name"], s["label"].rsplit("last ", 1)[1]) for s in drawn}
    assert said == {
        (name, percent(getattr(row, name))) for row in rows for name in ("agreement", "edge_share")
    }

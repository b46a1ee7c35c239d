"""The dashboard in a real browser, shared by the browser tests: `shadowplane dashboard` on a
free port against a seeded database, headless Chromium driven through chromedriver (its
console kept), and helpers that wait for what a person would see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from controlplane.client.tls import default_tls
from tests.liveapi import free_port, wait_until

if TYPE_CHECKING:
    from tests.dashboard.conftest import Seeded

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Bounds for the dashboard to start, for each page to show its text (generous: a loaded
# two-core machine draws the task page's charts in 20 s), and for a run to finish.
STARTUP_SECONDS = 60
PAGE_SECONDS = 120
SETTLE_SECONDS = 15
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,2000",
)


@contextmanager
def serve_dashboard(url: str, folder: Path) -> Iterator[str]:
    """`shadowplane dashboard` (the venv's command, its own process) on a free port against
    the database at `url`, its log in `folder`; its base URL once it answers. Always killed
    afterwards."""
    port = free_port()
    command = Path(sys.executable).with_name("shadowplane")
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": url}
    log_path = folder / "dashboard.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [str(command), "dashboard", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"shadowplane dashboard exited with {proc.returncode}:\n"
                + log_path.read_text(errors="replace")
            )
        try:
            return httpx.get(f"{base}/_stcore/health", timeout=2, verify=default_tls()).text == "ok"
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, "the dashboard to answer /_stcore/health", STARTUP_SECONDS, 0.2)
        yield base
    finally:
        # Its own process group: the command execs Streamlit, which may start helpers.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        log.close()


@contextmanager
def chromium(folder: Path) -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile in `folder`, driven through chromedriver; the
    page's console is kept for `console_problems`."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: run scripts/test, which installs Debian's "
            "chromium and chromium-driver, to run the dashboard's browser test."
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={folder / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
        service=Service(CHROMEDRIVER, log_output=str(folder / "chromedriver.log")),
        options=options,
    )
    driver.set_page_load_timeout(PAGE_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def dashboard(seeded: Seeded, tmp_path: Path) -> Iterator[str]:
    """The dashboard on this test's copy of the seeded database."""
    with serve_dashboard(seeded.url, tmp_path) as base:
        yield base


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium for this test alone."""
    with chromium(tmp_path) as driver:
        yield driver


@pytest.fixture(scope="module")
def dashboard_once(seeded_once: Seeded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One dashboard for a module's read-only browser tests, on the module's shared copy."""
    with serve_dashboard(seeded_once.url, tmp_path_factory.mktemp("dashboard")) as base:
        yield base


@pytest.fixture(scope="module")
def browser_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One Chromium for a module's browser tests (each test signs in as it needs)."""
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


@pytest.fixture
def screenshots(capsys: pytest.CaptureFixture[str]) -> Path:
    """A folder that outlives the test, for one screenshot per page; its path is printed."""
    folder = Path(tempfile.mkdtemp(prefix="shadowplane-dashboard-screenshots."))
    with capsys.disabled():
        print(f"\ndashboard screenshots: {folder}")
    return folder


# Streamlit's markdown draws these pairs as one typographic symbol.
SYMBOLS = (("<->", "↔"), ("->", "→"), ("<-", "←"), (">=", "≥"), ("<=", "≤"), ("~=", "≈"))


def as_shown(text: str) -> str:
    """`text` as the page shows it when written through markdown."""
    for pair, symbol in SYMBOLS:
        text = text.replace(pair, symbol)
    return text


# What Chromium answers when the body is replaced while its text is read (a page moving on):
# read again, as for a stale element.
REPLACED_WHILE_READ = "does not belong to the document"


def body_text(driver: WebDriver, attempts: int = 3) -> str:
    while True:
        try:
            return str(driver.find_element(By.TAG_NAME, "body").text)
        except WebDriverException as exc:
            attempts -= 1
            if REPLACED_WHILE_READ not in str(exc.msg) or attempts == 0:
                raise


def wait_for_text(driver: WebDriver, *texts: str, what: str) -> str:
    """Wait until the page's visible text holds every one of `texts`; the text. A body
    replaced while it is read (a sign-in moving on to the app) is read again."""
    try:
        WebDriverWait(
            driver,
            PAGE_SECONDS,
            poll_frequency=0.2,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(lambda d: all(t in body_text(d) for t in texts))
    except TimeoutException:
        shown = body_text(driver)
        missing = [t for t in texts if t not in shown]
        raise AssertionError(f"{what}: {missing} not shown; the page shows:\n{shown}") from None
    return body_text(driver)


def sign_in(driver: WebDriver, base: str, key: str) -> None:
    """Sign in afresh, this browser's earlier sign-in forgotten: the app's address leads to
    the sign-in page; type the key in its password field, Enter."""
    driver.get(f"{base}/_stcore/health")  # the dashboard's site, without starting the app
    driver.delete_all_cookies()
    driver.get(base)
    # Pages are replaced on the way (the onward page, the sign-in page, the app): an element
    # read while its page goes is stale, and is read again.
    stale = (StaleElementReferenceException,)
    field = WebDriverWait(driver, PAGE_SECONDS, ignored_exceptions=stale).until(
        lambda d: (
            "/signin" in d.current_url and d.find_element(By.CSS_SELECTOR, "input[type='password']")
        )
    )
    field.send_keys(key + Keys.ENTER)
    WebDriverWait(driver, PAGE_SECONDS, ignored_exceptions=stale).until(
        lambda d: "Signed in as" in body_text(d)
    )


def open_page(driver: WebDriver, title: str) -> None:
    """Click the page's link in the sidebar (the session, and so the sign-in, is kept)."""
    links = nav_links(driver)
    assert title in links, f"no sidebar link {title!r}; links: {list(links)}"
    href = links[title].get_attribute("href") or ""
    links[title].click()
    WebDriverWait(driver, PAGE_SECONDS).until(
        lambda d: d.current_url.split("?")[0].rstrip("/") == href.split("?")[0].rstrip("/")
    )


def nav_links(driver: WebDriver) -> dict[str, WebElement]:
    return {
        link.text.strip(): link
        for link in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSidebarNavLink']")
    }


def choose(driver: WebDriver, label: str, option: str) -> None:
    """Pick `option` in the select box labelled `label` (once the page has drawn it): type
    it, Enter."""

    def boxes(d: WebDriver) -> list[WebElement]:
        return [
            box
            for box in d.find_elements(By.CSS_SELECTOR, "[data-testid='stSelectbox']")
            if box.text.splitlines()[:1] == [label]
        ]

    try:
        found = WebDriverWait(
            driver,
            PAGE_SECONDS,
            poll_frequency=0.2,
            ignored_exceptions=(StaleElementReferenceException,),  # redrawn while read
        ).until(boxes)
    except TimeoutException:
        raise AssertionError(
            f"no select box {label!r}; the page shows:\n{body_text(driver)}"
        ) from None
    field = found[0].find_element(By.CSS_SELECTOR, "input")
    field.click()
    field.send_keys(option + Keys.ENTER)


def screenshot(driver: WebDriver, folder: Path, name: str) -> None:
    """The page once its script run has finished (Streamlit's running indicator gone; a
    page still running after SETTLE_SECONDS is taken as it is)."""
    idle(driver, SETTLE_SECONDS)
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
    assert path.stat().st_size > 0


def idle(driver: WebDriver, seconds: float) -> bool:
    """Wait up to `seconds` for the page's script run to finish; whether it did."""
    try:
        WebDriverWait(driver, seconds, poll_frequency=0.2).until(
            lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid^='stStatusWidgetRunning']")
        )
    except TimeoutException:
        return False
    return True


def press_until(driver: WebDriver, key: str, done: Callable[[], bool], attempts: int = 3) -> None:
    """Press `key` on the page itself (nothing focused) once its run has finished, until
    `done()` holds. On a loaded machine a key pressed while the page is still being drawn
    can reach it before its shortcuts are listening; it is pressed again only when the page
    has gone idle with nothing stored, so a press that did land is never repeated."""
    for _ in range(attempts):
        idle(driver, PAGE_SECONDS)
        driver.execute_script("document.activeElement && document.activeElement.blur()")
        ActionChains(driver).send_keys(key).perform()
        try:
            WebDriverWait(driver, SETTLE_SECONDS, poll_frequency=0.5).until(lambda d: done())
            return
        except TimeoutException:
            if not idle(driver, PAGE_SECONDS) or done():
                return
    raise AssertionError(f"pressing {key!r} {attempts} times stored nothing")


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


def console_problems(driver: WebDriver) -> list[dict[str, Any]]:
    """The console's warnings and errors since the last call (reading empties the log)."""
    return [e for e in driver.get_log("browser") if e.get("level") in ("WARNING", "SEVERE")]

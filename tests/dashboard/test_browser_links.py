"""A link to a page (the Overview's `/task?task=NAME`, one shared in a chat at night) opened
in a browser that is not signed in: the sign-in form, then that page with its query."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.conftest import Seeded
from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    PAGE_SECONDS,
    browser,
    dashboard,
    wait_for_text,
)

pytestmark = pytest.mark.integration


def test_a_link_opened_signed_out_lands_on_its_page_after_sign_in(
    seeded: Seeded,
    dashboard: str,  # noqa: F811
    browser: WebDriver,  # noqa: F811
) -> None:
    browser.get(f"{dashboard}/task?task=invoice_extract")
    field = WebDriverWait(browser, PAGE_SECONDS).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "input[type='password']")
    )
    field.send_keys(seeded.keys["read"] + Keys.ENTER)
    wait_for_text(browser, "Signed in as", "invoice_extract is in", what="the linked task page")
    assert "/task" in browser.current_url and "task=invoice_extract" in browser.current_url

"""The page a dashboard page's address loads (shadowplane_dashboard/shell.py): Streamlit's own, with
the app's base address set before its scripts run, so a page opened by its address asks
only for what the server has (in Chromium: tests/hostile/test_step17_hostile, a page
opened by its address writes nothing to the console); /overview sends the browser to the
root, where Streamlit serves the default page."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.testclient import TestClient
from streamlit import file_util

from shadowplane_dashboard import common, shell

CLIENT = TestClient(Starlette(routes=shell.ROUTES), follow_redirects=False)


def test_every_page_loads_streamlits_page_with_the_base_address_set_first() -> None:
    index = Path(file_util.get_static_dir(), "index.html").read_text(encoding="utf-8")
    for path in ["/", *(f"/{p}" for p in common.PATHS if p != "overview")]:
        answer = CLIENT.get(path, params={"task": "ticket_classify"})
        assert answer.status_code == 200, path
        assert answer.headers["cache-control"] == "no-cache"
        page = answer.text
        assert page.count(shell.BASE) == 1
        # Before every script of Streamlit's, and nothing else of its page changed.
        assert "<script" not in page[: page.index(shell.BASE)]
        assert page.replace(f"{shell.BASE}\n    ", "") == index


def test_the_overviews_old_address_sends_the_browser_to_the_root_with_its_query() -> None:
    moved = CLIENT.get("/overview", params={"task": "ticket_classify"})
    assert moved.status_code == 307 and moved.headers["location"] == "/?task=ticket_classify"
    assert CLIENT.get("/overview").headers["location"] == "/"

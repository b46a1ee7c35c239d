"""Signed in through a real session (the sign-in page's own, shadowplane_dashboard/signin.py, is in
test_sessions): pages by scope, a link to sign in when signed out, sign-out ending the
session for every tab, a revoked key signed out at its next run."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from controlplane.keys.actions import revoke_key
from shadowplane_dashboard.common import SESSION_TOKEN
from tests.dashboard.conftest import APP, Seeded, open_page, page_text, session_of

pytestmark = pytest.mark.integration


def sign_in_target(at: AppTest) -> str:
    """Where the signed-out page's sign-in link returns the browser to."""
    [link] = [m.value for m in at.markdown if "/signin?" in m.value]
    href = link.split('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    assert urlsplit(href).path == "/signin"
    [target] = parse_qs(urlsplit(href).query)["next"]
    return target


def test_signed_out_the_page_links_to_sign_in_and_back_with_its_query(seeded: Seeded) -> None:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["task"] = "ticket_classify"
    at.run()
    assert not at.exception
    assert "Signed in as" not in page_text(at)
    assert "You are signed out." in page_text(at)
    # The default page's address is the app's root; its query comes back with it.
    assert sign_in_target(at) == "/?task=ticket_classify"


def test_an_admin_session_shows_its_key_name(seeded: Seeded) -> None:
    at = open_page(seeded, "admin")
    assert not at.exception
    assert "Signed in as **admin**" in page_text(at)


def test_sign_out_ends_the_session_for_every_tab(seeded: Seeded) -> None:
    """Two tabs of one browser hold the same session; signing out in one signs the other
    out at its next run."""
    token = session_of(seeded, "read")
    tabs = []
    for _ in range(2):
        tab = AppTest.from_file(APP, default_timeout=60)
        tab.session_state[SESSION_TOKEN] = token
        tab.run()
        assert "Signed in as **read**" in page_text(tab)
        tabs.append(tab)
    first, second = tabs
    first.sidebar.button[0].click().run()
    assert not first.exception
    assert "You are signed out." in page_text(first)
    second.run()
    assert "Signed in as" not in page_text(second)
    assert "You are signed out." in page_text(second)


def test_a_revoked_key_is_signed_out_at_its_next_run(seeded: Seeded) -> None:
    at = open_page(seeded, "read")
    assert "Signed in as **read**" in page_text(at)
    revoke_key(seeded.engine, name="read", actor="test")
    at.run()
    assert not at.exception
    assert "Signed in as" not in page_text(at)
    assert "You are signed out." in page_text(at)


def offered(at: AppTest) -> set[str]:
    """The page scripts the navigation offers to this session."""
    return {Path(str(info["script_path"])).stem for info in at._registered_pages.values()}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("read", {"overview", "task", "audit"}),
        ("review", {"review", "evalsets"}),
        ("admin", {"overview", "task", "audit", "review", "evalsets"}),
    ],
)
def test_each_scope_is_offered_its_pages_only(
    seeded: Seeded, name: str, expected: set[str]
) -> None:
    at = open_page(seeded, name)
    assert not at.exception
    assert offered(at) == expected


@pytest.mark.parametrize("page", ["overview", "task", "audit"])
def test_a_read_page_run_with_a_review_key_refuses(seeded: Seeded, page: str) -> None:
    """Navigation never offers it; the page script checks the scope itself too."""
    at = AppTest.from_file(str(Path(APP).with_name("app_pages") / f"{page}.py"))
    at.session_state[SESSION_TOKEN] = session_of(seeded, "review")
    at.run(timeout=60)
    assert not at.exception
    assert any("needs a key of scope read" in e.value for e in at.error)

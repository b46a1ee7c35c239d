"""Sign-in with an API key: the password field (a form, so Enter signs in), pages by scope,
people's keys only, a revoked key signed out at its next run."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from controlplane.keys.actions import revoke_key
from dashboard import common
from tests.dashboard.conftest import APP, Seeded, open_page, page_text, shown

pytestmark = pytest.mark.integration


def sign_in(key: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    field = at.text_input(key="sign_in_key")
    assert field.proto.type == field.proto.PASSWORD  # the key is never shown
    field.input(key)
    at.button[0].click()  # the form's submit button: what Enter does in a form
    at.run()
    return at


def test_signed_out_shows_only_the_password_field(seeded: Seeded) -> None:
    at = open_page(seeded, None)
    assert not at.exception
    assert len(at.text_input) == 1
    assert "Sign in with a Shadowplane API key" in page_text(at)


def test_an_admin_key_signs_in_and_its_name_is_shown(seeded: Seeded) -> None:
    at = sign_in(seeded.keys["admin"])
    assert not at.exception
    assert at.session_state["api_key"] == seeded.keys["admin"]
    assert "Signed in as **admin**" in page_text(at)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("ingest", "a routing service's key for posting results"),
        ("flags", "a routing service's key for reading flags"),
    ],
)
def test_routing_service_keys_are_refused_with_the_reason(
    seeded: Seeded, name: str, why: str
) -> None:
    at = sign_in(seeded.keys[name])
    assert not at.exception
    assert "api_key" not in at.session_state
    [error] = at.error
    said = shown(error.value)
    assert why in said and repr(name) in said
    assert "read, review or admin" in said


def test_an_unknown_key_is_refused(seeded: Seeded) -> None:
    at = sign_in("sp_" + "x" * 43)
    assert "api_key" not in at.session_state
    assert "not known" in at.error[0].value


def test_a_revoked_key_is_signed_out_at_its_next_run(seeded: Seeded) -> None:
    """The key is checked again on every run, through the API's hashed-key cache: once that
    cache has read the keys again (within seconds, as for the API), the session is out."""
    at = open_page(seeded, "read")
    assert "Signed in as **read**" in page_text(at)
    revoke_key(seeded.engine, name="read", actor="test")
    common._keys.clear()  # the key cache's time to live has passed
    at.run()
    assert not at.exception
    assert "Signed in as" not in page_text(at)
    assert len(at.text_input) == 1  # the sign-in form again


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
    at.session_state["api_key"] = seeded.keys["review"]
    at.run(timeout=60)
    assert not at.exception
    assert any("needs a key of scope read" in shown(e.value) for e in at.error)

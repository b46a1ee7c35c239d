"""The dashboard's sessions: controlplane.keys.sessions on PostgreSQL (start, expiry by the
clock given, sign-out, a revoked key, keys that cannot sign in; only the token's hash
stored), the sign-in page and the gate of shadowplane_dashboard/signin.py through Starlette's test
client, and in Chromium against `shadowplane dashboard`: a sign-in that survives a reload
and a link opened from another site in a new tab, with the key nowhere to be seen, ended
in every tab by signing out, and by revoking the key."""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import event, text
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from controlplane.db import get_engine
from controlplane.keys import sessions
from controlplane.keys.actions import create_key, revoke_key
from shadowplane_dashboard import signin
from shadowplane_dashboard.common import COOKIE
from tests.dashboard.browser import PAGE_SECONDS, body_text, sign_in, wait_for_text
from tests.dashboard.conftest import Seeded

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _key(url: str, name: str, *scopes: str) -> str:
    return create_key(get_engine(url), name=name, scopes=list(scopes), actor="test")[1]


def _rows(url: str) -> list[dict[str, object]]:
    with get_engine(url).connect() as conn:
        found = conn.execute(text("SELECT * FROM dashboard_sessions ORDER BY id"))
        return [dict(row) for row in found.mappings()]


# --- controlplane.keys.sessions ---


def test_a_session_lives_until_it_expires_and_the_database_holds_only_its_hash(
    pg_url: str,
) -> None:
    key = _key(pg_url, "alice", "read")
    token, principal = sessions.start(get_engine(pg_url), key, now=T0, lasts=8 * HOUR)
    assert principal.name == "alice" and principal.scopes == {"read"}
    assert token != key and key not in token and len(token) >= 43  # 32 random bytes
    [row] = _rows(pg_url)
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    stored = " ".join(str(v) for v in row.values())
    assert token not in stored and key not in stored

    engine = get_engine(pg_url)
    live = sessions.principal(engine, token, now=T0 + 8 * HOUR - timedelta(seconds=1))
    assert live is not None and live.name == "alice"
    assert sessions.principal(engine, token, now=T0 + 8 * HOUR) is None  # expired
    assert sessions.principal(engine, key, now=T0) is None  # the key is no session's token


def test_signing_out_ends_the_session_and_a_sign_in_deletes_ended_and_expired_ones(
    pg_url: str,
) -> None:
    engine = get_engine(pg_url)
    key = _key(pg_url, "alice", "admin")
    ended, _ = sessions.start(engine, key, now=T0, lasts=HOUR)
    other, _ = sessions.start(engine, key, now=T0, lasts=HOUR)
    assert sessions.end(engine, ended, now=T0 + timedelta(minutes=1))
    assert not sessions.end(engine, ended, now=T0 + timedelta(minutes=2))  # already ended
    assert sessions.principal(engine, ended, now=T0 + timedelta(minutes=2)) is None
    # Another browser's session of the same key goes on.
    assert sessions.principal(engine, other, now=T0 + timedelta(minutes=2)) is not None

    # Two hours on: `other` has expired and `ended` ended; a new sign-in clears both away.
    latest, _ = sessions.start(engine, key, now=T0 + 2 * HOUR, lasts=HOUR)
    assert [r["token_hash"] for r in _rows(pg_url)] == [hashlib.sha256(latest.encode()).hexdigest()]


def test_a_revoked_key_ends_its_sessions_at_their_next_check(pg_url: str) -> None:
    engine = get_engine(pg_url)
    token, _ = sessions.start(engine, _key(pg_url, "alice", "read"), now=T0, lasts=HOUR)
    revoke_key(engine, name="alice", actor="test")
    assert sessions.principal(engine, token, now=T0) is None


def test_keys_of_routing_services_unknown_and_revoked_keys_cannot_sign_in(pg_url: str) -> None:
    engine = get_engine(pg_url)
    refused = {
        "router": ("ingest", "a routing service's key for posting results"),
        "flags": ("flags:read", "a routing service's key for reading flags"),
    }
    for name, (scope, why) in refused.items():
        with pytest.raises(sessions.SignInRefused) as caught:
            sessions.start(engine, _key(pg_url, name, scope), now=T0, lasts=HOUR)
        said = str(caught.value)
        assert f"{name!r}" in said and why in said and "read, review or admin" in said
    revoked = _key(pg_url, "gone", "admin")
    revoke_key(engine, name="gone", actor="test")
    for key in (revoked, "sp_" + "x" * 43):
        with pytest.raises(sessions.SignInRefused, match="not known, or it was revoked"):
            sessions.start(engine, key, now=T0, lasts=HOUR)
    assert _rows(pg_url) == []


# --- shadowplane_dashboard/signin.py: the sign-in page and the gate ---


@pytest.mark.parametrize(
    "asked",
    [
        "https://evil.example/task",
        "//evil.example/task",
        "/\\evil.example",
        "javascript:alert(1)",
        "/signin",
        "/_stcore/health",
        "/task\r\nSet-Cookie: x=1",
        "",
    ],
)
def test_a_sign_in_never_sends_the_browser_off_the_dashboards_pages(asked: str) -> None:
    assert signin.safe_next(asked) == "/"


def test_a_sign_in_returns_to_the_page_asked_for_with_its_query() -> None:
    assert signin.safe_next("/task?task=ticket_classify") == "/task?task=ticket_classify"
    assert signin.safe_next("/audit") == "/audit"


def _the_app(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the app")


@pytest.fixture
def client(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The sign-in routes and the gate in front of a stand-in for Streamlit's app."""
    monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", pg_url)
    app = Starlette(
        routes=[*signin.ROUTES, Route("/{path:path}", _the_app)],
        middleware=[Middleware(signin.SessionGate)],
    )
    with TestClient(app, follow_redirects=False) as client:
        yield client


def _refresh_target(page: str) -> str:
    found = re.search(r'http-equiv="refresh" content="0; url=([^"]+)"', page)
    assert found, page
    return found.group(1).replace("&amp;", "&")


def test_the_sign_in_page_sets_a_strict_http_only_cookie_and_returns_to_the_link(
    client: TestClient, pg_url: str
) -> None:
    key = _key(pg_url, "alice", "read")
    link = "/task?task=ticket_classify"

    # Signed out, the link's page is a step on to the sign-in page, the link kept.
    onward = client.get(link)
    assert onward.status_code == 200 and "the app" not in onward.text
    target = _refresh_target(onward.text)
    assert target == "/signin?next=%2Ftask%3Ftask%3Dticket_classify"
    form = client.get(target)
    assert 'type="password"' in form.text
    assert 'name="next" value="/task?task=ticket_classify"' in form.text

    # A wrong key: the form again, saying which field and why; no cookie.
    wrong = client.post("/signin", data={"key": "sp_" + "y" * 43, "next": link})
    assert wrong.status_code == 401
    assert "API key: That key is not known, or it was revoked." in wrong.text
    assert "set-cookie" not in wrong.headers

    signed = client.post("/signin", data={"key": key, "next": link})
    assert signed.status_code == 303 and signed.headers["location"] == link
    cookie = signed.headers["set-cookie"]
    flags = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "path", "max-age", "samesite"} <= flags and "secure" not in flags
    assert "SameSite=strict" in cookie and f"Max-Age={8 * 3600}" in cookie
    token = cookie.split(";")[0].removeprefix(f"{COOKIE}=")
    assert sessions.principal(get_engine(pg_url), token, now=datetime.now(UTC)) is not None
    for response in (onward, form, wrong, signed):
        assert key not in str(response.headers) and key not in response.text

    # Signed in: the link opens the app, and the sign-in page sends the browser on.
    assert client.get(link).text == "the app"
    again = client.get("/signin?next=%2Faudit")
    assert again.status_code == 303 and again.headers["location"] == "/audit"


def test_the_cookie_is_secure_over_https_and_other_sites_cannot_post_a_sign_in(
    client: TestClient, pg_url: str
) -> None:
    key = _key(pg_url, "alice", "read")
    client.base_url = client.base_url.copy_with(scheme="https")
    signed = client.post("/signin", data={"key": key, "next": "https://evil.example/"})
    assert signed.headers["location"] == "/"  # not another site
    assert "; secure" in signed.headers["set-cookie"].lower()

    forged = client.post(
        "/signin", data={"key": key, "next": "/"}, headers={"Origin": "https://evil.example"}
    )
    assert forged.status_code == 403 and "set-cookie" not in forged.headers
    assert "API key: sign in from this dashboard's own page." in html.unescape(forged.text)


def test_made_up_keys_cost_no_query_and_past_the_budget_the_page_says_when_to_retry(
    client: TestClient, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWPLANE_AUTH_FAILURES_PER_MINUTE", "4")
    key = _key(pg_url, "alice", "read")
    statements: list[str] = []
    engine, counted = get_engine(pg_url), _count(statements)
    event.listen(engine, "before_cursor_execute", counted)
    try:
        answers = [
            client.post("/signin", data={"key": f"sp_{n:043d}", "next": "/audit"}) for n in range(6)
        ]
    finally:
        event.remove(engine, "before_cursor_execute", counted)
    # The first reads the key table once for the whole snapshot; the other made-up keys
    # are refused from it (it is read again at most once a second for an unknown key).
    assert len(statements) < len(answers)
    assert [a.status_code for a in answers[:4]] == [401] * 4
    past = answers[-1]
    assert past.status_code == 429
    assert 1 <= int(past.headers["retry-after"]) <= 60 // 4  # a token back every 15 s
    said = html.unescape(past.text)
    assert "API key: not checked, too many failed authentications from testclient" in said
    assert "(4 a minute; SHADOWPLANE_AUTH_FAILURES_PER_MINUTE)" in said
    assert 'name="next" value="/audit"' in past.text
    # A valid key is never refused for made-up ones from its address.
    signed = client.post("/signin", data={"key": key, "next": "/audit"})
    assert signed.status_code == 303 and signed.headers["location"] == "/audit"


def _count(statements: list[str]) -> Callable[..., None]:
    def counted(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    return counted


def test_every_fragment_of_the_dashboard_reads_the_session_on_each_of_its_runs() -> None:
    """A fragment's own runs skip the app's check of the session (in Chromium: the hostile
    test of the Overview signed out in another tab): every fragment is common.fragment."""
    dashboard = Path(signin.__file__).parent
    raw = [
        str(path.relative_to(dashboard))
        for path in sorted(dashboard.rglob("*.py"))
        if re.search(r"\b(st\.fragment|st\.dialog)\b", path.read_text(encoding="utf-8"))
    ]
    assert raw == ["common.py"]
    overview = (dashboard / "app_pages" / "overview.py").read_text(encoding="utf-8")
    assert "@common.fragment(" in overview


# --- in Chromium, against `shadowplane dashboard` ---


def _seen_urls(driver: WebDriver) -> list[str]:
    """The address shown and every address the current page loaded."""
    loaded = driver.execute_script("return performance.getEntries().map(e => e.name)")
    return [driver.current_url, *loaded]


def _signed_out(driver: WebDriver) -> None:
    """The sign-in page is shown, nothing signed in."""
    WebDriverWait(driver, PAGE_SECONDS).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "input[type='password']")
    )
    assert "Signed in as" not in body_text(driver)
    assert urlsplit(driver.current_url).path == "/signin"


@pytest.mark.e2e
def test_a_session_in_chromium_survives_reloads_and_links_and_ends_everywhere(
    seeded: Seeded, dashboard: str, browser: WebDriver, tmp_path: Path
) -> None:
    key = seeded.keys["read"]
    seen: list[str] = []

    sign_in(browser, dashboard, key)
    seen += _seen_urls(browser)
    [cookie] = [c for c in browser.get_cookies() if c["name"] == COOKIE]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    browser.refresh()
    wait_for_text(browser, "Signed in as read", what="the app reloaded")
    seen += _seen_urls(browser)
    first = browser.current_window_handle

    # A link to a task shared in a chat: clicked on another site (localhost is not
    # 127.0.0.1 to the browser), in a new tab. SameSite=Strict keeps the cookie off that
    # request; the gate's step on from this site brings it back.
    port = urlsplit(dashboard).port
    link = f"{dashboard}/task?task=ticket_classify"
    browser.switch_to.new_window("tab")
    browser.get(f"http://localhost:{port}/_stcore/health")
    browser.execute_script(
        "const a = document.createElement('a'); a.href = arguments[0]; a.textContent = 'x';"
        "document.body.appendChild(a); a.click();",
        link,
    )
    wait_for_text(browser, "Signed in as read", "ticket_classify is in", what="the shared link")
    assert browser.current_url == link
    seen += _seen_urls(browser)
    second = browser.current_window_handle

    # The key is in no address, no cookie, no log line (which names the key's name only).
    for url in seen:
        assert key not in url, url
    for each in browser.get_cookies():
        assert key not in each["value"], each["name"]
    assert key not in browser.page_source
    log = (tmp_path / "dashboard.log").read_text(errors="replace")
    assert '"event":"dashboard.sign_in","key":"read"' in log
    assert key not in log

    # Signing out in this tab signs the first tab out at its reload. The sidebar may still
    # be rendering when the page's text is in: its button is waited for.
    def sign_out_button(driver: WebDriver) -> WebElement | bool:
        found = [
            b
            for b in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSidebar'] button")
            if b.text.strip() == "Sign out"
        ]
        return found[0] if len(found) == 1 else False

    button = WebDriverWait(browser, PAGE_SECONDS).until(sign_out_button, "no Sign out button")
    assert isinstance(button, WebElement)
    button.click()
    wait_for_text(browser, "You are signed out.", what="the tab signed out")
    browser.switch_to.window(first)
    browser.refresh()
    _signed_out(browser)
    browser.switch_to.window(second)
    browser.close()
    browser.switch_to.window(first)

    # Signed in again, then the key revoked: the next load is signed out.
    field = browser.find_element(By.CSS_SELECTOR, "input[type='password']")
    field.send_keys(key + Keys.ENTER)
    wait_for_text(browser, "Signed in as read", what="signed in again")
    revoke_key(seeded.engine, name="read", actor="test")
    browser.refresh()
    _signed_out(browser)
    log = (tmp_path / "dashboard.log").read_text(errors="replace")
    assert '"event":"dashboard.sign_out","key":"read"' in log
    assert key not in log
    # Streamlit's and uvicorn's lines included, the dashboard prints JSON lines only.
    assert all(isinstance(json.loads(line), dict) for line in log.splitlines()), log


def test_a_sign_in_lasts_the_hours_the_setting_says(
    client: TestClient, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SHADOWPLANE_DASHBOARD_SESSION_HOURS, read at each sign-in: the cookie's Max-Age and
    the stored session's expiry both follow it."""
    monkeypatch.setenv("SHADOWPLANE_DASHBOARD_SESSION_HOURS", "2")
    key = _key(pg_url, "bea", "read")
    before = datetime.now(UTC)
    signed = client.post("/signin", data={"key": key, "next": "/audit"})
    assert signed.status_code == 303
    cookie = signed.headers["set-cookie"]
    assert f"Max-Age={2 * 3600}" in cookie
    token = cookie.split(";")[0].removeprefix(f"{COOKIE}=")
    engine = get_engine(pg_url)
    assert sessions.principal(engine, token, now=before + timedelta(hours=1, minutes=59))
    assert sessions.principal(engine, token, now=datetime.now(UTC) + timedelta(hours=2)) is None

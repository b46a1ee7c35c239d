"""What every page shares: the database, the signed-in key, cached loaders, and errors
shown as sentences.

Signing in happens on the server's own sign-in page (shadowplane_dashboard/signin.py), which keeps a
session on the server and gives the browser its token in an HttpOnly cookie; the key is
never kept here. Every run reads the session again with its key, so signing out (in any
tab) or revoking the key signs this session out at its next run."""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

import orjson
import streamlit as st

from controlplane.auth.scopes import grants
from controlplane.auth.service import Principal
from controlplane.db import StorageError, get_engine
from controlplane.errors import ActionError
from controlplane.keys import sessions
from controlplane.settings import Settings
from shadowplane_dashboard import formats

T = TypeVar("T")
log = logging.getLogger("shadowplane.dashboard")

# Cached loaders live this long: pages refresh within it, and 50 SREs looking at once cost
# one query per loader and interval.
TTL_SECONDS = 10

# Every page's address, so a link to one (e.g. /task?task=NAME) opened before signing in
# comes back to that page, with its query, once the key is accepted.
PATHS = ("overview", "task", "review", "evalsets", "audit")
# The cookie holding a signed-in browser's session token (HttpOnly: no script reads it).
COOKIE = "shadowplane_session"
# Where a session's token is kept when no cookie can carry it: AppTest runs the app with no
# browser. Only the server writes session state, so a browser cannot put one there.
SESSION_TOKEN = "session_token"
NO_DATABASE = "The database cannot be reached, so the session cannot be checked. Try again soon."


def database_url() -> str:
    """Read on every run (not cached): the process's settings, from the environment."""
    return Settings().database_url


def engine() -> Any:
    return get_engine(database_url())


def now() -> datetime:
    return datetime.now(UTC)


def session_token() -> str | None:
    """This browser's session token: its cookie, as sent when the page was loaded."""
    # Copied whole: AppTest's stand-in for the browser answers any single lookup.
    cookies = dict(st.context.cookies)
    return cookies.get(COOKIE) or st.session_state.get(SESSION_TOKEN)


def signed_in() -> Principal | None:
    """The principal of this browser's live session, or None (signed out, expired, the key
    revoked)."""
    token = session_token()
    if not token:
        return None
    try:
        return sessions.principal(engine(), token, now=now())
    except StorageError:
        st.error(NO_DATABASE)
        st.stop()


def sign_out(principal: Principal) -> None:
    """End this browser's session: every tab holding it is signed out at its next run."""
    token = session_token()
    st.session_state.pop(SESSION_TOKEN, None)
    if not token:
        return
    try:
        sessions.end(engine(), token, now=now())
    except StorageError:
        st.error("The database cannot be reached, so the session was not ended. Try again soon.")
        st.stop()
    log_session("dashboard.sign_out", principal)


def log_session(event: str, principal: Principal) -> None:
    """One log line per sign-in and sign-out, naming the key (never the key itself)."""
    line = {"ts": now(), "event": event, "key": principal.name}
    log.info(orjson.dumps(line).decode())


def sign_in_link(path: str) -> str:
    """The sign-in page's address, bringing the browser back to this page and its query."""
    here = f"/{path}"
    query = st.query_params.to_dict()
    if query:
        here += "?" + urlencode(query)
    return "/signin?" + urlencode({"next": here})


def signed_out(path: str) -> None:
    """What a browser without a live session sees on the page at `path`: a link to sign in
    that brings it back here."""
    st.title("Shadowplane")
    st.info("You are signed out.")
    # In this tab (a Markdown link opens a new one): the page comes back once signed in.
    link = html.escape(sign_in_link(path), quote=True)
    st.markdown(f'<a href="{link}" target="_self">Sign in</a>', unsafe_allow_html=True)
    st.caption("Sign in with a Shadowplane API key of scope read, review or admin.")


def can(principal: Principal, scope: str) -> bool:
    return grants(principal.scopes, scope)


def require(scope: str) -> Principal:
    """The signed-in principal when it holds `scope`; otherwise the page says so and stops."""
    principal = signed_in()
    if principal is None:
        st.warning("Sign in first.")
        st.stop()
    return holding(principal, scope)


def holding(principal: Principal, scope: str) -> Principal:
    """`principal` when it holds `scope`; otherwise the page says so and stops."""
    if not can(principal, scope):
        st.error(
            formats.text(f"This page needs a key of scope {scope}; {principal.name!r} lacks it.")
        )
        st.stop()
    return principal


def fragment(
    scope: str, *, run_every: float | None = None
) -> Callable[[Callable[[Principal], None]], Callable[[], None]]:
    """`st.fragment` for a part of a page that refreshes or acts on its own. A fragment's
    own runs (its refresh, its buttons and forms) skip the app's script, and with it the
    app's check of the session: each run here reads the session again, so a session signed
    out in another tab, expired, or of a revoked key neither shows nor acts; the app's run
    then shows the signed-out page. The body gets the principal; its errors are sentences."""

    def wrap(body: Callable[[Principal], None]) -> Callable[[], None]:
        @st.fragment(run_every=run_every)
        @functools.wraps(body)
        def run() -> None:
            with readable_errors():
                principal = signed_in()
                if principal is None:
                    st.rerun(scope="app")
                body(holding(principal, scope))

        return run

    return wrap


def actor(principal: Principal) -> str:
    """What labels and actions record as who did them: the key's name (as through the API)."""
    return principal.name


def detail_text(detail: Any) -> str:
    """An action's refusal as text (a sentence; a refused promotion one line per thing in
    its way; any other structured reason compactly)."""
    from controlplane.rollout.actions import refusal_text

    return refusal_text(detail)


def act(action: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """Run an action against the database; a refusal or a failure is shown as a message
    (never a traceback) and None is returned."""
    try:
        return action(engine(), *args, **kwargs)
    except ActionError as exc:
        st.error(formats.text(detail_text(exc.detail)))
    except StorageError as exc:
        st.error(f"The database did not answer ({type(exc).__name__}); nothing was changed.")
    return None


@contextmanager
def readable_errors() -> Iterator[None]:
    """Around a page: any error becomes a sentence on the page. Streamlit's own control
    flow (stop, rerun, page switches) passes through."""
    try:
        yield
    except ActionError as exc:
        st.error(formats.text(detail_text(exc.detail)))
    except StorageError as exc:
        st.error(
            f"The database did not answer ({type(exc).__name__}). The page shows again when "
            "it does; nothing was changed."
        )
    except Exception as exc:
        if type(exc).__module__.startswith("streamlit"):
            raise
        st.error(formats.text(f"This page failed: {type(exc).__name__}: {exc}"))

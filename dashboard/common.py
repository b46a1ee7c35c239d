"""What every page shares: the database, the signed-in key, cached loaders, and errors
shown as sentences.

The key itself is kept in the session and checked again on every run (through the same
hashed-key cache as the API), so a revoked key stops working within seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import streamlit as st

from controlplane.auth.scopes import grants
from controlplane.auth.service import KeyCache, Principal
from controlplane.db import StorageError, get_engine, make_sessionmaker
from controlplane.errors import ActionError
from controlplane.settings import Settings
from dashboard import formats

T = TypeVar("T")

# Cached loaders live this long: pages refresh within it, and 50 SREs looking at once cost
# one query per loader and interval.
TTL_SECONDS = 10

# The scopes people sign in with, and what each shows.
PEOPLE_SCOPES = ("read", "review", "admin")
REFUSED = {
    "ingest": "it is a routing service's key for posting results",
    "flags:read": "it is a routing service's key for reading flags",
}


def database_url() -> str:
    """Read on every run (not cached): the process's settings, from the environment."""
    return Settings().database_url


def engine() -> Any:
    return get_engine(database_url())


@st.cache_resource(show_spinner=False)
def _keys(url: str) -> KeyCache:
    return KeyCache(make_sessionmaker(get_engine(url)))


def authenticate(key: str) -> Principal | None:
    return _keys(database_url()).authenticate(key.strip())


def refusal(principal: Principal) -> str | None:
    """Why this key cannot sign in to the dashboard, or None when it can."""
    if any(s in principal.scopes for s in PEOPLE_SCOPES):
        return None
    held = sorted(principal.scopes)
    why = "; ".join(f"{s}: {REFUSED[s]}" for s in held if s in REFUSED) or "no scope"
    return formats.text(
        f"The key {principal.name!r} cannot sign in to the dashboard ({why}). "
        "Sign in with a key of scope read, review or admin."
    )


def signed_in() -> Principal | None:
    """The principal of the key in this session, or None (signed out, revoked, refused)."""
    key = st.session_state.get("api_key")
    if not key:
        return None
    try:
        principal = authenticate(key)
    except StorageError:
        st.error("The database cannot be reached, so the key cannot be checked. Try again soon.")
        st.stop()
    if principal is None or refusal(principal) is not None:
        return None
    return principal


def sign_in_form() -> None:
    """A password field in a form: Enter signs in."""
    st.title("Shadowplane")
    with st.form("sign-in"):
        key = st.text_input("API key", type="password", key="sign_in_key")
        submitted = st.form_submit_button("Sign in")
    if not submitted:
        st.caption("Sign in with a Shadowplane API key of scope read, review or admin.")
        return
    try:
        principal = authenticate(key or "")
    except StorageError:
        st.error("The database cannot be reached, so the key cannot be checked. Try again soon.")
        return
    if principal is None:
        st.error("That key is not known, or it was revoked.")
        return
    why = refusal(principal)
    if why is not None:
        st.error(why)
        return
    st.session_state["api_key"] = key.strip()
    st.rerun()


def can(principal: Principal, scope: str) -> bool:
    return grants(principal.scopes, scope)


def require(scope: str) -> Principal:
    """The signed-in principal when it holds `scope`; otherwise the page says so and stops."""
    principal = signed_in()
    if principal is None:
        st.warning("Sign in first.")
        st.stop()
    if not can(principal, scope):
        st.error(
            formats.text(f"This page needs a key of scope {scope}; {principal.name!r} lacks it.")
        )
        st.stop()
    return principal


def actor(principal: Principal) -> str:
    """What labels and actions record as who did them: the key's name (as through the API)."""
    return principal.name


def detail_text(detail: Any) -> str:
    """An action's refusal as text (a sentence, or the structured reason compactly)."""
    if isinstance(detail, str):
        return detail
    from controlplane.compare.jsonutil import dumps

    return dumps(detail).decode()


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

"""Shadowplane's dashboard: signed in with an API key (on the server's sign-in page,
shadowplane_dashboard/signin.py), the pages shown follow its scopes.

`read` sees Overview, Task and Audit; `review` sees Review and Eval sets (blind: nothing
there names the edge or the cloud side); `admin` sees everything and may act."""

from __future__ import annotations

import streamlit as st

from shadowplane_dashboard import common, formats

st.set_page_config(page_title="Shadowplane", layout="wide")


def _blank() -> None:
    """A signed-out page's body: nothing (the sign-in link is drawn below, knowing the
    address the page was opened at)."""


principal = common.signed_in()
if principal is None:
    # Every page's address answers, so the sign-in link brings the browser back to it. The
    # page is drawn here, knowing its address (a page's function is not told it).
    signed_out = st.navigation(
        [
            st.Page(_blank, title="Sign in", url_path=path, default=path == "overview")
            for path in common.PATHS
        ],
        position="hidden",
    )
    common.signed_out(signed_out.url_path)
    st.stop()

pages: list[st.Page] = []
if common.can(principal, "read"):
    pages += [
        st.Page("app_pages/overview.py", title="Overview", url_path="overview", default=True),
        st.Page("app_pages/task.py", title="Task", url_path="task"),
    ]
if common.can(principal, "review"):
    pages += [
        st.Page("app_pages/review.py", title="Review", url_path="review", default=not pages),
        st.Page("app_pages/evalsets.py", title="Eval sets", url_path="evalsets"),
    ]
if common.can(principal, "read"):
    pages.append(st.Page("app_pages/audit.py", title="Audit", url_path="audit"))

with st.sidebar:
    scopes = ", ".join(sorted(principal.scopes))
    st.markdown(f"Signed in as **{formats.text(principal.name)}** ({scopes})")
    if st.button("Sign out"):
        common.sign_out(principal)
        st.rerun()

page = st.navigation(pages)
with common.readable_errors():
    page.run()

"""The page a browser loads at a dashboard page's address: Streamlit's own, told that the
app is served at the site's root, so a page opened by its address (a shared link, a
reload) asks the server nothing that is not there.

Streamlit's frontend does not know where an app is served: at /task it asks
/task/_stcore/health and /task/_stcore/host-config first (the app might be served under
/task), gets two 404s the console shows, then asks /_stcore/... (streamlit/streamlit
issue 7074). The frontend reads its base address from `window.__streamlit` when a page
sets it; this page sets it to the root, where the dashboard is served (its sign-in page
too). The Overview is the app's default page, which Streamlit serves at /: its address
/overview (a link someone typed or kept) sends the browser there, where Streamlit writes
no "page ... does not seem to exist"."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from streamlit import file_util

from shadowplane_dashboard import common

# Before Streamlit's bundle (a module script, run after this one): the app's base address.
BASE = '<script>window.__streamlit = {BACKEND_BASE_URL: location.origin + "/"}</script>'
# The default page: Streamlit serves it at the root, whatever its url_path.
DEFAULT_PAGE = "overview"


@cache
def page_html() -> str:
    """Streamlit's index.html with the base address set before any of its scripts."""
    index = Path(file_util.get_static_dir(), "index.html").read_text(encoding="utf-8")
    head, found, rest = index.partition("<script")
    if not found:
        raise RuntimeError("Streamlit's index.html has no script: its layout changed")
    return f"{head}{BASE}\n    <script{rest}"


async def page(request: Request) -> Response:
    """A page's address: Streamlit's page, its base address set (not cached, as Streamlit
    serves it: a new version's bundle is named in it)."""
    return HTMLResponse(page_html(), headers={"Cache-Control": "no-cache"})


async def default_page(request: Request) -> Response:
    """/overview: the Overview is at the root; its query goes with it."""
    query = request.url.query
    return RedirectResponse("/" + (f"?{query}" if query else ""), status_code=307)


ROUTES = [
    Route("/", page, methods=["GET"]),
    Route(f"/{DEFAULT_PAGE}", default_page, methods=["GET"]),
    *(Route(f"/{path}", page, methods=["GET"]) for path in common.PATHS if path != DEFAULT_PAGE),
]

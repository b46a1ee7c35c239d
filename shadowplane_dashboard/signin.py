"""The dashboard's door, served beside Streamlit (shadowplane_dashboard/server.py): the sign-in page,
the session cookie, and the gate that sends a page load without a live session to it.

A key is typed once into a plain HTML form and posted here; it never travels in a URL, a
cookie or a log line, and never reaches the page. The browser gets a random session token
in an HttpOnly, SameSite=Strict cookie instead (controlplane.keys.sessions keeps only its
hash). A link to a page opened from another site (a chat, a webhook) comes without that
cookie, as SameSite=Strict wants: the gate answers with a tiny page that moves on to
/signin from this site, where the cookie is sent, and /signin sends a signed-in browser
straight back to the page it asked for.

A key is checked as the API checks one: against the process's snapshot of keys (a made-up
key costs no query), and a client address past its budget of failed keys
(SHADOWPLANE_AUTH_FAILURES_PER_MINUTE, shared with the API through Redis when it is set) is
answered 429 until the budget refills.
"""

from __future__ import annotations

import html
from datetime import timedelta
from urllib.parse import parse_qs, quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.auth.ratelimit import RateLimiter, Refusal
from controlplane.auth.service import KeyCache, Principal
from controlplane.db import StorageError, make_sessionmaker
from controlplane.keys import sessions
from controlplane.settings import Settings
from shadowplane_dashboard import common

# The addresses the app's pages answer at; a sign-in returns only to one of them.
PAGES = frozenset({"/", *(f"/{path}" for path in common.PATHS)})
# A sign-in form holds a key and a page's address: anything longer is not one.
MAX_FORM_BYTES = 8192
# No script on these pages, no frames around them, forms posted back here only.
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:4rem auto;max-width:26rem;padding:0 1rem}"
    "label{display:block;margin:1rem 0 .3rem}input[type=password]{width:100%;padding:.5rem;"
    "font-size:1rem;box-sizing:border-box}button{margin-top:1rem;padding:.5rem 1.2rem;"
    "font-size:1rem}.error{color:#b00020}.note{color:#555}"
)


def is_page(path: str) -> bool:
    return (path.rstrip("/") or "/") in PAGES


def safe_next(value: str | None) -> str:
    """`value` when it is the address of one of the dashboard's pages (a path, with its
    query), else "/": a sign-in never sends the browser anywhere else."""
    if not value or any(c in value for c in "\\\x7f") or any(ord(c) < 0x20 for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or value.startswith("//") or not is_page(parts.path):
        return "/"
    return parts.path + (f"?{parts.query}" if parts.query else "")


def form_page(
    target: str, error: str | None = None, status: int = 200, retry_after: int | None = None
) -> HTMLResponse:
    """The sign-in form: a password field (Enter submits), the page to return to kept."""
    said = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Sign in · Shadowplane</title><style>{STYLE}</style></head><body><main>"
        "<h1>Shadowplane</h1>"
        '<form method="post" action="/signin">'
        '<label for="key">API key</label>'
        '<input id="key" name="key" type="password" autocomplete="current-password" '
        "required autofocus>"
        f'<input type="hidden" name="next" value="{html.escape(target, quote=True)}">'
        '<button type="submit">Sign in</button></form>'
        f"{said}"
        '<p class="note">Sign in with a Shadowplane API key of scope read, review or admin.</p>'
        "</main></body></html>"
    )
    headers = HEADERS if retry_after is None else {**HEADERS, "Retry-After": str(retry_after)}
    return HTMLResponse(body, status_code=status, headers=headers)


def onward_page(target: str) -> HTMLResponse:
    """A page that moves the browser on to `target` from this site (so its SameSite=Strict
    cookie goes with it), with a link for a browser that does not follow."""
    address = html.escape(target, quote=True)
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0; url={address}">'
        "<title>Shadowplane</title></head>"
        f'<body><p><a href="{address}">Sign in to Shadowplane</a></p></body></html>'
    )
    return HTMLResponse(body, headers=HEADERS)


def unavailable_page() -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><title>Shadowplane</title><p>{html.escape(common.NO_DATABASE)}</p>",
        status_code=503,
        headers=HEADERS,
    )


async def live(request: Request) -> Principal | None:
    """The principal of the session whose token the request's cookie holds, or None."""
    token = request.cookies.get(common.COOKIE)
    if not token:
        return None
    return await run_in_threadpool(sessions.principal, common.engine(), token, now=common.now())


async def show_sign_in(request: Request) -> Response:
    """GET /signin: a signed-in browser goes on to the page it asked for; any other sees the
    form."""
    target = safe_next(request.query_params.get("next"))
    try:
        signed_in = await live(request)
    except StorageError:
        return unavailable_page()
    if signed_in is not None:
        return RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})
    return form_page(target)


async def _form(request: Request) -> dict[str, str] | None:
    """The posted form's fields (first value of each), or None for a body no sign-in form
    sends (too long, too many fields)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
    except ValueError:
        return None
    return {name: values[0] for name, values in fields.items()}


class TooManyFailures(Exception):
    """An address past its budget of failed keys: its key is not checked."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.detail)
        self.refusal = refusal


def guards(request: Request) -> tuple[KeyCache, RateLimiter]:
    """The app's snapshot of keys and its budgets of failed keys, as the API keeps them: made
    once per app (a test's app has its own), the snapshot again when the database moves."""
    state = request.app.state
    url = common.database_url()
    kept = getattr(state, "sign_in_guards", None)
    if kept is None or kept[0] != url:
        settings = Settings()
        cache = KeyCache(make_sessionmaker(common.engine()), settings.key_cache_seconds)
        limiter = kept[2] if kept is not None else RateLimiter(settings)
        kept = state.sign_in_guards = (url, cache, limiter)
    return kept[1], kept[2]


def start_session(
    cache: KeyCache, limiter: RateLimiter, key: str, address: str, *, lasts: timedelta
) -> tuple[str, Principal]:
    """sessions.start, behind the API's checks: a key the snapshot does not hold is refused
    without a query and counted against `address`'s budget; past it, TooManyFailures (a
    valid key is never refused for it)."""
    try:
        known = cache.authenticate(key.strip())
    except StorageError:
        # The database is down and the key is not one the snapshot holds.
        blocked = limiter.blocked(address)
        if blocked is not None:
            raise TooManyFailures(blocked) from None
        raise
    if known is None:
        blocked = limiter.blocked(address)
        if blocked is not None:
            raise TooManyFailures(blocked)
        limiter.failed(address)
        raise sessions.SignInRefused(sessions.UNKNOWN)
    return sessions.start(common.engine(), key, now=common.now(), lasts=lasts)


def _same_site(request: Request) -> bool:
    """A form posted from this dashboard's own page (a browser names the page's origin)."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


async def sign_in(request: Request) -> Response:
    """POST /signin: the key checked, a session started, its token set in the cookie, and the
    browser sent on to the page it asked for (303); a refused key shows the form again,
    saying why."""
    form = await _form(request)
    if form is None:
        return form_page("/", "API key: the form sent is not this page's.", 400)
    target = safe_next(form.get("next"))
    if not _same_site(request):
        return form_page(target, "API key: sign in from this dashboard's own page.", 403)
    lasts = timedelta(hours=Settings().dashboard_session_hours)
    cache, limiter = guards(request)
    # The peer's address. X-Forwarded-For is not trusted: anyone can write it.
    address = request.client.host if request.client else "unknown"
    try:
        token, principal = await run_in_threadpool(
            start_session, cache, limiter, form.get("key", ""), address, lasts=lasts
        )
        previous = request.cookies.get(common.COOKIE)
        if previous:  # this browser's earlier session, replaced
            await run_in_threadpool(sessions.end, common.engine(), previous, now=common.now())
    except sessions.SignInRefused as exc:
        return form_page(target, f"API key: {exc}", 401)
    except TooManyFailures as exc:
        said = f"API key: not checked, {exc.refusal.detail}."
        return form_page(target, said, 429, retry_after=exc.refusal.retry_after)
    except StorageError:
        return unavailable_page()
    common.log_session("dashboard.sign_in", principal)
    response = RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        common.COOKIE,
        token,
        max_age=int(lasts.total_seconds()),
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response


ROUTES = [
    Route("/signin", show_sign_in, methods=["GET"]),
    Route("/signin", sign_in, methods=["POST"]),
]


class SessionGate:
    """Sends a page load (GET of a page's address) without a live session to the sign-in
    page, which returns it there, query and all. The app checks the session again on every
    run; this only spares a signed-out browser the app's start."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in ("GET", "HEAD")
            and is_page(scope["path"])
        ):
            request = Request(scope)
            try:
                signed_in = await live(request)
            except StorageError:
                await unavailable_page()(scope, receive, send)
                return
            if signed_in is None:
                here = scope["path"] + (f"?{request.url.query}" if request.url.query else "")
                response = onward_page("/signin?next=" + quote(here, safe=""))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

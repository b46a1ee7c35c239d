"""The TLS context every HTTP client of this package is made with: one per process.

httpx builds a new `ssl.SSLContext` for every `httpx.Client` it makes, even one that only
ever speaks plain HTTP, and building one reads the whole CA bundle: about 20 ms of CPU a
client. A router that makes a `FlagClient` or a `ResultReporter` per worker, or a job that
makes a client per pass, paid that each time. The context is shared instead. Its settings
are httpx's defaults: its CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR when set. The bundle is
read again when those variables change or the file (or folder) they name does: a
certificate an operator removes stops being trusted by the next client made, as before.

httpcore sets the ALPN protocols on the context at each TLS connection it opens. On a
context shared between threads that would rewrite OpenSSL's copy while another thread's
handshake may be reading it, so the shared context is given HTTP/1.1 (what every client of
ours asks for) when it is made, and a request for the same protocols is not applied again.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Iterable

import httpx

# What every client of this package negotiates (httpcore asks for this without http2).
HTTP11 = ["http/1.1"]


class _Shared(ssl.SSLContext):
    """httpx's default context, made shareable between threads (see the module's text)."""

    _alpn: list[str] | None = None

    @classmethod
    def adopt(cls, context: ssl.SSLContext) -> _Shared:
        """`context` itself, settings untouched, speaking HTTP/1.1 from now on."""
        context.__class__ = cls
        assert isinstance(context, cls)
        ssl.SSLContext.set_alpn_protocols(context, HTTP11)
        context._alpn = list(HTTP11)
        return context

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        wanted = list(alpn_protocols)
        with _lock:
            if wanted != self._alpn:  # only an HTTP/2 client given this context changes it
                super().set_alpn_protocols(wanted)
                self._alpn = wanted


_lock = threading.Lock()
# (what the bundle was read from, as it was then; the context built from it)
_context: list[tuple[tuple[object, ...], ssl.SSLContext]] = []


def _new_lock() -> None:
    # A child forked while another thread held the lock would find it held for good.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def _bundle() -> tuple[object, ...]:
    """Where httpx's default context reads its certificates from, and that file or folder's
    identity now (a stat: a few microseconds, where reading the bundle takes milliseconds)."""
    file, folder = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    path = file or folder
    if not path:
        try:
            import certifi  # httpx's own dependency, its default bundle

            path = certifi.where()
        except ImportError:  # pragma: no cover - httpx requires certifi
            path = None
    seen: tuple[int, int, int] | None = None
    if path:
        try:
            stat = os.stat(path)
            seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except OSError:
            seen = None
    return (file, folder, path, seen)


def default_tls() -> ssl.SSLContext:
    """httpx's default verification as one context for the process (pass it as `verify=`
    to an httpx client): built on first use, and again when the CA bundle changes."""
    key = _bundle()
    held = _context
    if held and held[0][0] == key:
        return held[0][1]
    with _lock:
        if not _context or _context[0][0] != key:
            _context[:] = [(key, _Shared.adopt(httpx.create_ssl_context(trust_env=True)))]
        return _context[0][1]

"""The TLS context every HTTP client of this package is made with: one per process.

httpx builds a new `ssl.SSLContext` for every `httpx.Client` it makes, even one that only
ever speaks plain HTTP, and building one reads the whole CA bundle: about 20 ms of CPU a
client. A router that makes a `FlagClient` or a `ResultReporter` per worker, or a job that
makes a client per pass, paid that each time. The context is shared instead: its settings
are httpx's defaults (its CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR when set, read when the
first client is made), and a context is safe to share between clients and threads.
"""

from __future__ import annotations

import ssl
import threading

import httpx

_lock = threading.Lock()
_context: list[ssl.SSLContext] = []


def default_tls() -> ssl.SSLContext:
    """httpx's default verification as one context for the whole process, built on first
    use (pass it as `verify=` to an httpx client)."""
    if not _context:
        with _lock:
            if not _context:
                _context.append(httpx.create_ssl_context(trust_env=True))
    return _context[0]

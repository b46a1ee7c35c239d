"""A small HTTP server in a thread, for the client's tests against servers the real API never
is: lagging, flooding, trickling, stale or answering nonsense. Each test gives the function
that answers; every connection is closed after its answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FLAG: dict[str, Any] = {
    "task": "t",
    "version": 3,
    "stage": "full",
    "edge_percent": 100,
    "sticky_by": "session",
    "max_input_tokens": None,
    "shadow_rate": 0.0,
    "killed": False,
    "default_route": "cloud",
}


def document(revision: int, stage: str = "full", **fields: Any) -> bytes:
    """A flags document holding task `t` at `stage`, its version the revision."""
    flag = {**FLAG, "version": revision, "stage": stage, **fields}
    return json.dumps({"flags": {"t": flag}, "revision": revision}).encode()


class Exchange:
    """One request, and the means to answer it."""

    def __init__(self, handler: _Handler, stopping: threading.Event) -> None:
        self._handler = handler
        self.stopping = stopping
        self.method = handler.command
        self.path = handler.path
        self.headers = {k.lower(): v for k, v in handler.headers.items()}
        length = int(self.headers.get("content-length", "0") or 0)
        self.body = handler.rfile.read(length) if length else b""

    def reply(
        self,
        code: int,
        body: bytes = b"",
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.start(
            code,
            {"Content-Type": content_type, "Content-Length": str(len(body)), **(headers or {})},
        )
        self.write(body)

    def start(self, code: int, headers: dict[str, str]) -> None:
        """The status line and headers; the body follows with `write` (no length: the end
        of the body is the end of the connection, unless a Content-Length is given)."""
        h = self._handler
        h.send_response(code)
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Connection", "close")
        h.end_headers()

    def write(self, data: bytes) -> bool:
        """False once the client has gone."""
        try:
            self._handler.wfile.write(data)
            self._handler.wfile.flush()
        except OSError:
            return False
        return True

    def wait(self, seconds: float) -> bool:
        """Sleep; False when the server is closing."""
        return not self.stopping.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _serve(self) -> None:
        self.close_connection = True
        exchange = Exchange(self, self.server.stopping)
        with self.server.lock:
            self.server.seen.append(exchange)
        try:
            self.server.app(exchange)
        except OSError:
            pass  # the client went away

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    app: Callable[[Exchange], None]
    stopping: threading.Event
    lock: threading.Lock
    seen: list[Exchange]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer


class FakeServer:
    """``with FakeServer(app) as server: FlagClient(server.base, ...)``"""

    def __init__(self, app: Callable[[Exchange], None]) -> None:
        self.app = app
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.app = lambda exchange: self.app(exchange)
        self._server.stopping = threading.Event()
        self._server.lock = threading.Lock()
        self._server.seen = []
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def requests(self, path: str | None = None) -> list[Exchange]:
        with self._server.lock:
            return [e for e in self._server.seen if path is None or e.path == path]

    def close(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""A real webhook receiver on a thread: records every request, answers as told, dedupes.

`statuses` are the answers to the first requests in order (then 200); `hang` makes it
read a request and never answer (the sender times out or is killed mid-send)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def delivery_id(self) -> str:
        return self.headers["X-Shadowplane-Delivery"]

    @property
    def document(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


class Receiver:
    def __init__(self, statuses: list[int] | None = None, hang: bool = False) -> None:
        self.received: list[Received] = []
        # What a receiver that dedupes acts on: each delivery id once.
        self.processed: dict[str, Received] = {}
        self.statuses = list(statuses or [])
        self.hang = hang
        self._release = threading.Event()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer._lock:
                    status = outer.statuses.pop(0) if outer.statuses else 200
                    item = Received(dict(self.headers.items()), body, status)
                    outer.received.append(item)
                    if status < 300 and not outer.hang:
                        outer.processed.setdefault(item.delivery_id, item)
                if outer.hang:
                    outer._release.wait(60)
                    return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self) -> None:
        """Stop hanging: later requests are answered (200 unless `statuses` says otherwise)."""
        self.hang = False
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def wait(self, n: int, timeout: float = 30) -> list[Received]:
        """The requests received once there are at least `n` (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        while len(self.received) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.received)

"""A webhook receiver for scripts/test-image: checks each delivery's signature with the
client's `verify_signature` and writes every verified body, one JSON line each, to the
file it is given; a delivery whose signature fails is answered 401 and counted on stderr.

    python3 webhook_receiver.py PORT OUT_FILE        (the secret in SHADOWPLANE_WEBHOOK_SECRET)

It runs inside the image under test, so the check is the installed package's own.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from controlplane.client import verify_signature

SECRET = os.environ["SHADOWPLANE_WEBHOOK_SECRET"]


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not verify_signature(SECRET, dict(self.headers.items()), body):
            print(f"refused a delivery with a bad signature: {self.path}", file=sys.stderr)
            self.send_response(401)
            self.end_headers()
            return
        with open(sys.argv[2], "a", encoding="utf-8") as out:
            out.write(json.dumps(json.loads(body)) + "\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per verified delivery is in the file


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver).serve_forever()

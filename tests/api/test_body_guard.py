"""The body guard: every route holds the body limit before authentication (413 without
reading the rest, declared or chunked, on a real uvicorn server), and a body too deep or
unreadable to parse is a 422 naming why, never a 400 or a 500."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson
import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.api import create_app
from controlplane.http import MAX_BODY_DEPTH, BodyGuard, JsonShape
from controlplane.settings import Settings
from tests.conftest import Api, make_api

LIMIT = 256 * 1024
HUGE = 64 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Pulled:
    """Counts the body bytes the app pulled from the server."""

    app: ASGIApp
    bytes: int = 0
    requests: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.requests.append(scope["path"])

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.bytes += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


@dataclass
class Live:
    port: int
    pulled: Pulled
    api: Api


@pytest.fixture
def live(sqlite_url: str) -> Iterator[Live]:
    for api in make_api(sqlite_url):
        app = create_app(
            Settings(
                database_url=sqlite_url, tick_seconds=0, max_body_bytes=LIMIT, log_level="WARNING"
            )
        )
        pulled = Pulled(app)
        listener = socket.socket()
        # Small kernel buffers on both ends, so what the client manages to send is close to
        # what the server actually read.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CHUNK)
        listener.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(pulled, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield Live(listener.getsockname()[1], pulled, api)
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


def push(port: int, head: bytes, body: Iterator[bytes]) -> tuple[int, bytes]:
    """Send `head` then `body` as fast as the server takes it; stop at the first byte of an
    answer or when the server closes. Returns the body bytes sent and the whole answer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
    sock.connect(("127.0.0.1", port))
    sock.sendall(head)
    sock.setblocking(False)
    sent, answer = 0, b""
    try:
        for chunk in body:
            view = memoryview(chunk)
            while view and not answer:
                readable, writable, _ = select.select([sock], [sock], [], 10)
                assert readable or writable, f"server neither read nor answered ({sent} sent)"
                if readable:
                    answer = sock.recv(65536)
                    if not answer:
                        return sent, answer
                    break
                try:
                    n = sock.send(view)
                except (BrokenPipeError, ConnectionResetError):
                    # The server answered and closed while we were sending: its answer may
                    # already wait in our receive buffer (a race seen on a fresh clone).
                    try:
                        sock.setblocking(True)
                        sock.settimeout(2)
                        answer = sock.recv(65536)
                    except OSError:
                        pass
                    return sent, answer
                sent += n
                view = view[n:]
            if answer:
                break
        sock.setblocking(True)
        sock.settimeout(10)
        while True:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return sent, answer


def zeros(total: int) -> Iterator[bytes]:
    block = b"0" * CHUNK
    for _ in range(total // CHUNK):
        yield block


def chunked(total: int) -> Iterator[bytes]:
    for block in zeros(total):
        yield b"%x\r\n" % len(block) + block + b"\r\n"
    yield b"0\r\n\r\n"


def pieces(body: bytes, size: int) -> Iterator[bytes]:
    """`body` in chunks of `size` bytes (no Content-Length: the client sends it chunked)."""
    for i in range(0, len(body), size):
        yield body[i : i + size]


def request_head(path: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\r\n"
    ).encode()


def test_a_declared_64_mib_body_is_refused_unread(live: Live) -> None:
    sent, answer = push(
        live.port, request_head("/v1/kill", f"Content-Length: {HUGE}\r\n"), zeros(HUGE)
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"connection: close" in answer.lower()
    assert f"larger than the {LIMIT}-byte limit (SHADOWPLANE_MAX_BODY_BYTES)".encode() in answer
    assert live.pulled.bytes == 0
    assert sent < 8 * 1024 * 1024, sent


@pytest.mark.parametrize("path", ["/v1/kill", "/v1/tasks", "/v1/results"])
def test_a_chunked_64_mib_body_is_refused_without_reading_the_rest(live: Live, path: str) -> None:
    sent, answer = push(
        live.port, request_head(path, "Transfer-Encoding: chunked\r\n"), chunked(HUGE)
    )
    # /v1/kill parses its body before authentication: the limit stops it (413).
    # /v1/tasks and /v1/results authenticate first: 401, and the rest is not drained either.
    assert answer.startswith(b"HTTP/1.1 413" if path == "/v1/kill" else b"HTTP/1.1 401"), answer[
        :200
    ]
    assert b"connection: close" in answer.lower()
    assert live.pulled.bytes <= LIMIT + CHUNK, live.pulled.bytes
    assert sent < 8 * 1024 * 1024, sent


def test_an_admin_key_does_not_lift_the_limit(live: Live) -> None:
    key = live.api.keys["admin"]
    sent, answer = push(
        live.port,
        request_head("/v1/tasks", f"Authorization: Bearer {key}\r\nTransfer-Encoding: chunked\r\n"),
        chunked(HUGE),
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert live.pulled.bytes <= LIMIT + CHUNK, live.pulled.bytes
    assert sent < 8 * 1024 * 1024, sent


def test_the_limit_is_inclusive_and_holds_for_chunked_bodies(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, max_body_bytes=1000):
        headers = {**api.headers("admin"), "content-type": "application/json"}
        at_limit = b'{"reason": "' + b"x" * (1000 - 14) + b'"}'
        assert len(at_limit) == 1000
        assert api.client.post("/v1/kill", content=at_limit, headers=headers).status_code == 200
        over = at_limit[:-2] + b'x"}'
        response = api.client.post("/v1/kill", content=over, headers=headers)
        assert response.status_code == 413
        assert response.json()["detail"].startswith("body: larger than the 1000-byte limit")
        chunked_over = api.client.post("/v1/kill/lift", content=pieces(over, 600), headers=headers)
        assert chunked_over.status_code == 413
        # A normal answer keeps the connection open.
        assert "connection" not in api.client.get("/healthz").headers


DEEP = [
    b"[" * 100_000,
    b"[" * 1000 + b"]" * 1000,
    b'{"reason": ' + b"[" * 900 + b"]" * 900 + b"}",
    b'{"task": "x", "comparator": ' + b'{"a": ' * 990 + b"1" + b"}" * 991,
]


@pytest.fixture
def loose_client(api: Api) -> TestClient:
    """The app's answers as the server would send them, unhandled errors as 500s."""
    return TestClient(api.client.app, raise_server_exceptions=False)


@pytest.fixture
def guard(sqlite_url: str) -> Iterator[tuple[Api, TestClient]]:
    """An app and its loose client on SQLite alone, for bodies the guard refuses as the app
    pulls them: before a parser or storage sees them, whatever the backend (the key lookup
    a request meets first runs on both in tests/auth)."""
    for api in make_api(sqlite_url):
        yield api, TestClient(api.client.app, raise_server_exceptions=False)


@pytest.mark.parametrize("path", ["/v1/kill", "/v1/tasks", "/v1/tasks/ticket_classify/promote"])
@pytest.mark.parametrize("with_key", [True, False])
def test_a_deeply_nested_body_is_422(
    guard: tuple[Api, TestClient], path: str, with_key: bool
) -> None:
    api, loose_client = guard
    headers = {"content-type": "application/json", **(api.headers("admin") if with_key else {})}
    for body in DEEP:
        response = loose_client.post(path, content=body, headers=headers)
        if not with_key and response.status_code == 401:
            continue
        assert response.status_code == 422, (path, body[:30], response.text[:200])
        assert response.json()["detail"] == [f"body: nested deeper than {MAX_BODY_DEPTH} levels"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"reason": "\xff\xfe"}', "body: not valid UTF-8 (byte 12)"),
        (b'{"reason": "a\\u0000b"}', "body: text holds \\u0000, which storage cannot keep"),
        (b'{"reason": "a\\ud800b"}', "body: text holds an unpaired surrogate (\\ud800)"),
        (b'{"reason": "a\\udc00"}', "body: text holds an unpaired surrogate (\\udc00)"),
        (b'{"reason": "a", }', "not valid JSON"),
    ],
)
def test_an_unreadable_body_is_422_naming_why(
    guard: tuple[Api, TestClient], body: bytes, reason: str
) -> None:
    api, loose_client = guard
    headers = {**api.headers("admin"), "content-type": "application/json"}
    for path in ("/v1/kill", "/v1/tasks"):
        response = loose_client.post(path, content=body, headers=headers)
        assert response.status_code == 422, (path, response.text)
        assert reason in response.json()["detail"][0], response.text
        # One byte at a time: escapes cut by chunk boundaries.
        split = loose_client.post(path, content=pieces(body, 1), headers=headers)
        assert split.status_code == 422, (path, split.text)
        assert reason in split.json()["detail"][0], split.text


def test_readable_bodies_pass_the_guard(api: Api) -> None:
    headers = {**api.headers("admin"), "content-type": "application/json"}
    brackets = "[{" * 200 + '\\"]'
    for reason in ("😀 \\ud83d\\ude00", brackets, "[" * MAX_BODY_DEPTH):
        body = b'{"reason": "' + reason.encode() + b'"}'
        for content in (body, pieces(body, 3)):
            answer = api.client.post("/v1/kill", content=content, headers=headers)
            assert answer.status_code == 200, answer.text
            assert (
                api.client.post("/v1/kill/lift", json={"reason": "ok"}, headers=headers).status_code
                == 200
            )


def test_the_ingest_body_is_not_scanned_by_the_guard(api: Api) -> None:
    # Ingest reads its own body per item (the hot path): the guard only counts its bytes.
    response = api.client.post(
        "/v1/results",
        content=b"[" * 100,
        headers={**api.headers("ingest"), "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert "nested deeper than" not in response.text


def test_json_shape_depth_counts_only_structure() -> None:
    def depth_problem(text: bytes, step: int) -> str | None:
        shape = JsonShape(3)
        for i in range(0, len(text), step):
            problem = shape.feed(text[i : i + step], final=i + step >= len(text))
            if problem:
                return problem
        return None

    for step in (1, 2, 5, 1000):
        assert depth_problem(b'[["[[[[\\"[[[", {"a": "]"}]]', step) is None
        assert depth_problem(b"[[[[]]]]", step) == "body: nested deeper than 3 levels"
        assert depth_problem(b'[[[]], [], {"a": [1]}]', step) is None
        assert depth_problem(b'[[{"a": [1]}]]', step) == "body: nested deeper than 3 levels"
        # An escaped backslash ends before the quote: the string closes there.
        assert depth_problem(b'["\\\\", [[[1]]]]', step) == "body: nested deeper than 3 levels"


def test_two_content_types_are_refused_before_a_byte_reaches_storage(
    api: Api, loose_client: TestClient
) -> None:
    # The guard would judge the body by one header and the framework parse it by the other:
    # a JSON body holding \u0000 under a second, non-JSON type would reach the database.
    body = b'{"reason": "a\\u0000b"}'
    for second in ("text/plain", "application/json"):
        headers = [
            *api.headers("admin").items(),
            ("content-type", "application/json"),
            ("content-type", second),
        ]
        response = loose_client.post("/v1/kill", content=body, headers=headers)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0] == "content-type: sent 2 times; send it once"
    # Nothing was applied; with one content type the same request is read and judged.
    headers = {**api.headers("admin"), "content-type": "application/json"}
    nothing = loose_client.post("/v1/kill/lift", json={"reason": "x"}, headers=headers)
    assert nothing.status_code == 409, nothing.text
    once = loose_client.post("/v1/kill", content=body, headers=headers)
    assert once.status_code == 422 and "\\u0000" in once.json()["detail"][0], once.text


@pytest.mark.integration
def test_a_value_postgresql_cannot_store_is_a_422_not_a_500(pg_url: str) -> None:
    # The last line of defence: whatever slips past the checks and is refused by the
    # database as data (here a NUL in a JSON string, sent as text/plain on purpose, which
    # the framework does not read as JSON) never becomes a 500.
    from sqlalchemy.exc import DataError

    from controlplane.api import create_app
    from controlplane.settings import Settings

    app = create_app(Settings(database_url=pg_url))

    @app.get("/_unstorable")
    def unstorable() -> None:
        raise DataError("INSERT", {}, Exception("NUL"))

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/_unstorable")
    assert response.status_code == 422, response.text
    assert "cannot store" in response.json()["detail"][0]


def test_a_body_that_stops_coming_is_408_and_its_connection_closed() -> None:
    # A key holder sending headers and part of a body, then nothing, held the connection
    # (and its request) for as long as it liked: still open after 75 s by hand.
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read"})

    async def run(parts: list[Message]) -> list[Message]:
        sent: list[Message] = []
        forever = asyncio.Event()

        async def receive() -> Message:
            if parts:
                return parts.pop(0)
            await forever.wait()  # the client sends nothing more
            raise AssertionError("never")

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/results",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"99")],
        }
        guard = BodyGuard(app, max_bytes=LIMIT, idle_seconds=0.2)
        await asyncio.wait_for(guard(scope, receive, send), 10)
        return sent

    sent = asyncio.run(run([{"type": "http.request", "body": b'{"results": [', "more_body": True}]))
    start, body = sent
    assert start["status"] == 408
    assert (b"connection", b"close") in start["headers"]
    assert orjson.loads(body["body"])["detail"] == [
        "body: no bytes of it for 0.2 s; send the body whole (the connection is closed)"
    ]
    # A body that comes whole is read as before; the wait for the client to go away after
    # it (a stream's whole life) is never timed.
    whole = asyncio.run(run([{"type": "http.request", "body": b"{}", "more_body": False}]))
    assert [m.get("status") for m in whole] == [200, None]

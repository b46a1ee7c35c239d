"""One TLS context a process (controlplane/client/tls.py): a FlagClient, a ResultReporter or
a webhook pass no longer reads the CA bundle again (about 20 ms of CPU each), and the shared
context verifies as httpx's default does."""

from __future__ import annotations

import ast
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.client import FlagClient, ResultReporter
from controlplane.client.tls import default_tls

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every CA bundle read while the test runs (each new context reads one)."""
    seen: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kw: object) -> None:
        seen.append(args or kw)
        real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    yield seen


def test_clients_made_one_after_another_read_the_ca_bundle_at_most_once(
    loads: list[object],
) -> None:
    made: list[FlagClient | ResultReporter] = []
    try:
        for _ in range(3):
            made.append(FlagClient("http://127.0.0.1:9", "key", poll_interval=60))
            made.append(ResultReporter("http://127.0.0.1:9", "key"))
        # At most the first of them built the context (none did if one existed already).
        assert len(loads) <= 1, f"{len(loads)} CA bundle reads for {len(made)} clients"
    finally:
        for client in made:
            client.close()


def test_the_shared_context_verifies_as_httpx_s_default() -> None:
    shared = default_tls()
    assert default_tls() is shared
    reference = httpx.create_ssl_context()
    assert shared.verify_mode == reference.verify_mode == ssl.CERT_REQUIRED
    assert shared.check_hostname and reference.check_hostname
    assert shared.minimum_version == reference.minimum_version
    assert shared.cert_store_stats() == reference.cert_store_stats()
    assert shared.cert_store_stats()["x509_ca"] > 0


def _clients_without_the_context(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "httpx"
            and node.func.attr in {"Client", "AsyncClient", "get", "post", "request", "stream"}
            and not any(k.arg in {"verify", "transport"} for k in node.keywords)
        ):
            lines.append(node.lineno)
    return lines


def test_every_http_client_the_product_makes_shares_the_context() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for folder in ("controlplane", "shadowplane_workers", "shadowplane_dashboard")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := _clients_without_the_context(path))
    }
    assert not found, f"httpx clients built without verify=default_tls(): {found}"


def test_a_connection_s_alpn_request_does_not_rewrite_the_shared_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpcore asks for ALPN at every TLS connection: on the shared context the same
    request is not applied again (another thread's handshake may be reading it)."""
    shared = default_tls()
    applied: list[list[str]] = []
    real = ssl.SSLContext.set_alpn_protocols

    def counting(self: ssl.SSLContext, protocols: list[str]) -> None:
        applied.append(list(protocols))
        real(self, protocols)

    monkeypatch.setattr(ssl.SSLContext, "set_alpn_protocols", counting)
    for _ in range(3):
        shared.set_alpn_protocols(["http/1.1"])  # what httpcore asks without http2
    assert applied == []
    shared.set_alpn_protocols(["http/1.1", "h2"])  # an HTTP/2 client given the context
    shared.set_alpn_protocols(["http/1.1"])
    assert applied == [["http/1.1", "h2"], ["http/1.1"]]

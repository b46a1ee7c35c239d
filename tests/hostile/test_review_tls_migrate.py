"""Hostile review of ef0891b (one TLS context a process, controlplane/client/tls.py), 1dda161
(the test harness shares it; the server forker freezes its heap before forking) and 0751a9c
(`shadowplane migrate` waits for a lock at most SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS),
tried as a hostile operator would. The four defects it found were strict xfails until they
were fixed (a bundle re-read when it changes, the lock renewed in a forked child, the docs'
way to end an idle transaction, `attempts` of at least 1); the rest pin what held.

The HTTPS receivers use the two self-signed certificates below, made for this file alone
(EC P-256, valid 2000-2100, subjectAltName IP:127.0.0.1): test keys for a server on the
loopback interface, no secret of anyone's.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

import controlplane.migrate as migrate_module
from controlplane.client import tls
from controlplane.db import get_engine, session_scope
from controlplane.migrate import MigrationLocked, current_revisions, head_revisions, upgrade
from controlplane.models import WebhookDelivery
from controlplane.models.base import utcnow
from controlplane.notify.delivery import deliver_pending
from controlplane.notify.outbox import add_event
from controlplane.settings import Settings
from tests.db.migrating import migrate_to
from tests.liveapi import free_port, run_python

A_KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgiT8iL93lXfkN66s1
vsAkKc8e7tItwik6DZBi+bHV9xihRANCAASlORFymeldJBzo4kZEzpSfDYjbgUz9
ni1csMaB087TjDJywr6e3kb9UQX7jYYcZo1ZlW1Hefup6jYzwoZLwl7y
-----END PRIVATE KEY-----
"""
A_CERT = """-----BEGIN CERTIFICATE-----
MIIBlDCCATqgAwIBAgIBATAKBggqhkjOPQQDAjAfMR0wGwYDVQQDDBRzaGFkb3dw
bGFuZS1yZXZpZXctYTAgFw0wMDAxMDEwMDAwMDBaGA8yMTAwMDEwMTAwMDAwMFow
HzEdMBsGA1UEAwwUc2hhZG93cGxhbmUtcmV2aWV3LWEwWTATBgcqhkjOPQIBBggq
hkjOPQMBBwNCAASlORFymeldJBzo4kZEzpSfDYjbgUz9ni1csMaB087TjDJywr6e
3kb9UQX7jYYcZo1ZlW1Hefup6jYzwoZLwl7yo2UwYzAPBgNVHREECDAGhwR/AAAB
MAwGA1UdEwEB/wQCMAAwDgYDVR0PAQH/BAQDAgeAMBMGA1UdJQQMMAoGCCsGAQUF
BwMBMB0GA1UdDgQWBBRVCdfQE9no7zZrMO+u3p2ZAizfPjAKBggqhkjOPQQDAgNI
ADBFAiBsyUBbf9ZUoOU1W8EzfA6XweMw2JTC+dN242sL0IAv2QIhAMh60qvC/bnn
LVJwV5+nCFxxzDrsUE2+3ZZCgmJYBAfj
-----END CERTIFICATE-----
"""
B_KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgxutvTR4NRIFDkGkz
Yyc7BpFI219doUzkfsPRkEDtkHehRANCAASaZCcxiDqem4UU1YTmbxGT5S3I1IhT
P1kxahL8ajmQ7vfzAnUlArq75hgyMRFySAoLJzFJZ2MbD+xIuf3MwELw
-----END PRIVATE KEY-----
"""
B_CERT = """-----BEGIN CERTIFICATE-----
MIIBlTCCATqgAwIBAgIBAjAKBggqhkjOPQQDAjAfMR0wGwYDVQQDDBRzaGFkb3dw
bGFuZS1yZXZpZXctYjAgFw0wMDAxMDEwMDAwMDBaGA8yMTAwMDEwMTAwMDAwMFow
HzEdMBsGA1UEAwwUc2hhZG93cGxhbmUtcmV2aWV3LWIwWTATBgcqhkjOPQIBBggq
hkjOPQMBBwNCAASaZCcxiDqem4UU1YTmbxGT5S3I1IhTP1kxahL8ajmQ7vfzAnUl
Arq75hgyMRFySAoLJzFJZ2MbD+xIuf3MwELwo2UwYzAPBgNVHREECDAGhwR/AAAB
MAwGA1UdEwEB/wQCMAAwDgYDVR0PAQH/BAQDAgeAMBMGA1UdJQQMMAoGCCsGAQUF
BwMBMB0GA1UdDgQWBBSRG05sSAM3FowF8OMKyV0IGAWFRzAKBggqhkjOPQQDAgNJ
ADBGAiEAtbEtRjeH9xeTsYyT8DiugRxs3SzMksvlxW31x/5NKB4CIQCrxIumPshQ
TqahYdLsLBnRpALifqZoXGkrflkgvk/pmQ==
-----END CERTIFICATE-----
"""
VERIFY_FAILED = "CERTIFICATE_VERIFY_FAILED"
# Bound on a call that takes a few ms (building one context): past it, it hangs for good.
HANG = 3.0


# --- TLS: an HTTPS receiver of our own -------------------------------------------------


class TLSReceiver:
    """A webhook receiver over HTTPS on 127.0.0.1, its certificate `cert` (self-signed):
    records each request body it reads, answers 200. A client that refuses the certificate
    never gets as far as a request."""

    def __init__(self, folder: Path, cert: str, key: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cert.pem").write_text(cert)
        (folder / "key.pem").write_text(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
        self.bodies: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                outer.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request: Any, client_address: Any) -> None:
                # The handshake on the request's own thread, not the accepting one.
                request.settimeout(10)
                try:
                    secured = context.wrap_socket(request, server_side=True)
                except OSError:  # the client refused the certificate
                    return
                try:
                    Handler(secured, client_address, self)
                finally:
                    secured.close()

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"https://127.0.0.1:{self.server.server_port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[tuple[TLSReceiver, TLSReceiver]]:
    """Receiver A (certificate A) and receiver B (certificate B)."""
    a = TLSReceiver(tmp_path / "receiver-a", A_CERT, A_KEY)
    b = TLSReceiver(tmp_path / "receiver-b", B_CERT, B_KEY)
    yield a, b
    a.close()
    b.close()


def _fresh_context(monkeypatch: pytest.MonkeyPatch, cert_file: Path | None = None) -> None:
    """This process as if no client had been made yet: the next default_tls() builds the
    context from the environment as it is now (SSL_CERT_FILE = `cert_file`, if given)."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if cert_file is None:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    monkeypatch.setattr(tls, "_context", [])


def _webhooks_to(url: str, receiver: TLSReceiver) -> Settings:
    return Settings(
        database_url=url,
        webhook_urls=receiver.url,
        webhook_secret="whsec-review-0123456789",
        public_url="https://shadowplane.example",
        webhook_timeout_seconds=5.0,
    )


def _event(url: str, n: int = 0) -> None:
    with session_scope(get_engine(url)) as session:
        add_event(
            session,
            kind="alert",
            task="ticket_classify",
            document={"kind": "alert", "task": "ticket_classify", "n": n},
        )


def _last_errors(url: str) -> list[str | None]:
    with session_scope(get_engine(url)) as session:
        rows = session.scalars(sa.select(WebhookDelivery).order_by(WebhookDelivery.id))
        return [row.last_error for row in rows]


@pytest.fixture
def to_a(
    sqlite_url: str, receivers: tuple[TLSReceiver, TLSReceiver]
) -> tuple[TLSReceiver, Settings, Engine]:
    """Webhooks configured to receiver A, and the engine of their database."""
    receiver, _ = receivers
    return receiver, _webhooks_to(sqlite_url, receiver), get_engine(sqlite_url)


def test_a_webhook_to_a_self_signed_receiver_is_refused_until_ssl_cert_file_trusts_it(
    sqlite_url: str,
    tmp_path: Path,
    to_a: tuple[TLSReceiver, Settings, Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver, settings, engine = to_a
    _event(sqlite_url)
    start = utcnow()
    # The default trust (certifi's bundle): the self-signed receiver is refused, nothing sent.
    _fresh_context(monkeypatch)
    refused = deliver_pending(engine, settings, now=start)
    assert (refused.fanned_out, refused.delivered, refused.retrying) == (1, 0, 1)
    assert receiver.bodies == []
    [error] = _last_errors(sqlite_url)
    assert error is not None and VERIFY_FAILED in error, error
    # SSL_CERT_FILE naming its certificate (read as httpx's default client reads it): sent.
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(A_CERT)
    _fresh_context(monkeypatch, bundle)
    sent = deliver_pending(engine, settings, now=start + timedelta(hours=1))
    assert (sent.delivered, sent.retrying) == (1, 0)
    assert len(receiver.bodies) == 1


def test_a_certificate_removed_from_ssl_cert_file_is_refused_by_the_next_webhook_pass(
    sqlite_url: str,
    tmp_path: Path,
    to_a: tuple[TLSReceiver, Settings, Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver, settings, engine = to_a
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(A_CERT)
    _fresh_context(monkeypatch, bundle)
    _event(sqlite_url, 1)
    start = utcnow()
    assert deliver_pending(engine, settings, now=start).delivered == 1
    # The operator stops trusting the receiver's certificate (B's is all the bundle holds).
    bundle.write_text(B_CERT)
    with pytest.raises(httpx.ConnectError, match=VERIFY_FAILED), httpx.Client() as reference:
        reference.post(receiver.url, content=b"{}")  # httpx's own default refuses it now
    _event(sqlite_url, 2)
    later = deliver_pending(engine, settings, now=start + timedelta(hours=1))
    assert len(receiver.bodies) == 1, "the second event went to a receiver no longer trusted"
    assert (later.delivered, later.retrying) == (0, 1)


def test_threads_racing_the_first_use_build_one_context(monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh_context(monkeypatch)
    real = httpx.create_ssl_context
    built: list[ssl.SSLContext] = []

    def slow(**kw: Any) -> ssl.SSLContext:
        context = real(**kw)
        threading.Event().wait(0.05)  # the others arrive while it is being built
        built.append(context)
        return context

    monkeypatch.setattr(httpx, "create_ssl_context", slow)
    start = threading.Barrier(8)
    got: list[ssl.SSLContext] = []

    def first_use() -> None:
        start.wait(10)
        got.append(tls.default_tls())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(built) == 1, f"{len(built)} contexts built by 8 threads"
    assert len(got) == 8 and all(c is built[0] for c in got)
    assert got[0].verify_mode == ssl.CERT_REQUIRED and got[0].check_hostname


# Run by a process forked from the server forker (run_python): the context is built from
# this process's own environment (SSL_CERT_FILE trusts receiver A only), then it forks.
FORKED_AFTER = """
import os, httpx
from controlplane.client.tls import default_tls

shared = default_tls()
assert httpx.post(os.environ["REVIEW_A"], content=b"parent", verify=shared).status_code == 200
pid = os.fork()
if pid == 0:
    code = 3
    try:
        same = default_tls() is shared
        sent = httpx.post(os.environ["REVIEW_A"], content=b"child", verify=default_tls())
        try:
            httpx.post(os.environ["REVIEW_B"], content=b"child", verify=default_tls())
            refused = "sent"
        except httpx.ConnectError as exc:
            refused = "refused" if "CERTIFICATE_VERIFY_FAILED" in str(exc) else repr(exc)
        print("child", same, sent.status_code, refused, flush=True)
        code = 0
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_process_forked_after_the_context_exists_verifies_with_it(
    receivers: tuple[TLSReceiver, TLSReceiver], tmp_path: Path
) -> None:
    a, b = receivers
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(A_CERT)
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_DIR"}
    env.update(SSL_CERT_FILE=str(bundle), REVIEW_A=a.url, REVIEW_B=b.url)
    done = run_python(FORKED_AFTER, env, tmp_path, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    # Built from the forked command's own SSL_CERT_FILE (the server forker built none that
    # its children would inherit), shared with the fork's child, verifying there as well.
    assert "child True 200 refused" in done.stdout, (done.stdout, done.stderr)
    assert "child exit 0" in done.stdout, (done.stdout, done.stderr)
    assert a.bodies == [b"parent", b"child"] and b.bodies == []


# Run by a process forked from the server forker: a thread is building the context (held
# inside httpx.create_ssl_context) when the process forks; the child then asks for it.
FORKED_DURING = """
import os, threading, httpx
from controlplane.client import tls

real = httpx.create_ssl_context
entered, release = threading.Event(), threading.Event()

def slow(**kw):
    entered.set()
    release.wait(60)
    return real(**kw)

httpx.create_ssl_context = slow
builder = threading.Thread(target=tls.default_tls, daemon=True)
builder.start()
assert entered.wait(60)
pid = os.fork()
if pid == 0:
    httpx.create_ssl_context = real
    got = threading.Event()
    threading.Thread(target=lambda: (tls.default_tls(), got.set()), daemon=True).start()
    os._exit(0 if got.wait(%(hang)r) else 3)
release.set()
builder.join(60)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_child_forked_while_a_thread_builds_the_context_can_still_build_one(
    tmp_path: Path,
) -> None:
    done = run_python(FORKED_DURING % {"hang": HANG}, dict(os.environ), tmp_path, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "child exit 0" in done.stdout, (
        f"the forked child's default_tls() had not returned after {HANG} s",
        done.stdout,
        done.stderr,
    )


# --- migrate: the lock timeout ---------------------------------------------------------

# The revision before the migration that drops result_keys' foreign key (ALTER TABLE
# result_keys); upgrade() goes on from it to the head.
BEFORE = "9e4a6c2d8b13"


@contextmanager
def holding(url: str, statement: str) -> Iterator[sa.Connection]:
    """A session of its own in a transaction that ran `statement` (and holds what it took)
    until the block ends."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(statement))
            try:
                yield conn
            finally:
                conn.rollback()
    finally:
        engine.dispose()


def _server_default_lock_timeout(url: str) -> str:
    with holding(url, "SELECT 1") as conn:
        return str(conn.execute(sa.text("SHOW lock_timeout")).scalar_one())


def test_the_lock_timeout_is_the_migration_transaction_s_alone(pg_url: str) -> None:
    """Set on the connection the migration runs on, for its transaction only: the same
    connection, once it is back in its pool, and keep_partitions' after it, wait for
    locks as the server's default says again."""
    inside: list[str] = []
    returned: list[str] = []

    def executed(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if "set_config('lock_timeout'" in statement:
            with conn.connection.dbapi_connection.cursor() as own:  # type: ignore[union-attr]
                own.execute("SHOW lock_timeout")
                inside.append(own.fetchone()[0])

    def checked_in(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is None:
            return
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            returned.append(cursor.fetchone()[0])
        dbapi_connection.rollback()

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", executed)
    sa.event.listen(sa.pool.Pool, "checkin", checked_in)
    try:
        upgrade(pg_url, lock_timeout_seconds=0.25)
    finally:
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", executed)
        sa.event.remove(sa.pool.Pool, "checkin", checked_in)
    assert inside == ["250ms"]
    default = _server_default_lock_timeout(pg_url)
    assert default != "250ms"
    # The migration's connection and keep_partitions' (its SET LOCAL of 2 s) at least.
    assert len(returned) >= 2 and set(returned) == {default}, (returned, default)


def test_the_retry_sleeps_only_between_lock_timeouts(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(migrate_module, "time", SimpleNamespace(sleep=slept.append))
    # A session holding alembic_version to itself: even a database at head waits on it.
    with holding(pg_url, "LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE"):
        with pytest.raises(MigrationLocked, match="alembic_version") as raised:
            upgrade(pg_url, lock_timeout_seconds=0.2, attempts=3, pause_seconds=7)
    assert slept == [7, 7], "a pause between attempts, none after the last"
    assert "3 times" in str(raised.value) and "nothing was changed" in str(raised.value)
    # Another failure (nothing listens on the port) is not a lock: no pause, no retry.
    slept.clear()
    nowhere = make_url(pg_url).set(port=free_port()).render_as_string(hide_password=False)
    with pytest.raises(OperationalError):
        upgrade(nowhere, lock_timeout_seconds=0.2, attempts=3, pause_seconds=7)
    assert slept == []


def test_the_command_s_lock_error_names_no_password(pg_url: str, tmp_path: Path) -> None:
    secret = "hunter2-review-secret"  # the server trusts the test's connections: ignored
    url = make_url(pg_url).set(password=secret).render_as_string(hide_password=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env.update(SHADOWPLANE_DATABASE_URL=url, SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS="0.2")
    code = (
        "import controlplane.migrate as m\n"
        "m.LOCK_PAUSE_SECONDS = 0\n"
        "from controlplane.cli import app\n"
        "app(args=['migrate'], prog_name='shadowplane')\n"
    )
    with holding(pg_url, "LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE"):
        done = run_python(code, env, tmp_path, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    err = done.stderr.strip().splitlines()[-1]
    assert err.startswith("error: cannot migrate ") and "alembic_version" in err, err
    assert "***" in err, err
    assert secret not in done.stdout + done.stderr


def test_sqlite_migrations_send_no_lock_timeout(sqlite_url: str) -> None:
    """The lock timeout is set where the migrations' transaction begins, at head or not
    (SQLite has no set_config: sending it would fail every SQLite migrate)."""
    sent: list[str] = []

    def executed(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", executed)
    try:
        upgrade(sqlite_url, lock_timeout_seconds=0.2)
    finally:
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", executed)
    assert any("alembic_version" in s for s in sent), sent
    assert not [s for s in sent if "lock_timeout" in s]


@pytest.mark.fresh_db  # migrates down and up
def test_the_documented_way_ends_a_transaction_left_open_and_migrate_goes_through(
    pg_url: str,
) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    engine = sa.create_engine(pg_url, poolclass=NullPool)
    left_open = engine.connect()
    try:
        left_open.execute(sa.text("SELECT count(*) FROM result_keys"))
        mine = left_open.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        with pytest.raises(MigrationLocked):
            upgrade(pg_url, lock_timeout_seconds=0.2, attempts=1)
        # docs/operations.md: find the holder with its query; a session idle in its
        # transaction ignores pg_cancel_backend (the migration is refused again), and
        # pg_terminate_backend(pid) ends it.
        with holding(pg_url, "SELECT 1") as operator:
            found = operator.execute(
                sa.text(
                    "SELECT pid, state, xact_start, query FROM pg_stat_activity "
                    "WHERE xact_start IS NOT NULL ORDER BY xact_start"
                )
            ).all()
            assert (mine, "idle in transaction") in {(row.pid, row.state) for row in found}
            assert operator.execute(sa.text(f"SELECT pg_cancel_backend({mine})")).scalar_one()
            operator.commit()
            with pytest.raises(MigrationLocked):
                upgrade(pg_url, lock_timeout_seconds=0.2, attempts=1)
            ended = operator.execute(sa.text(f"SELECT pg_terminate_backend({mine})"))
            assert ended.scalar_one()
            operator.commit()
        upgrade(pg_url, lock_timeout_seconds=5, attempts=1)
    finally:
        with contextlib.suppress(sa.exc.DBAPIError):  # its session was ended under it
            left_open.close()
        engine.dispose()
    assert _revision(pg_url) == head_revisions()


def _revision(url: str) -> set[str]:
    get_engine(url).dispose()
    with get_engine(url).connect() as conn:
        return current_revisions(conn)


def test_upgrade_with_no_attempts_does_not_pass_for_a_migration(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never.db'}"
    try:
        upgrade(url, attempts=0)
    except ValueError:
        return
    try:
        with get_engine(url).connect() as conn:
            assert current_revisions(conn) == head_revisions()
    finally:
        get_engine(url).dispose()

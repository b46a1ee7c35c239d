"""Engine and session handling: one transaction owner per unit of work.

Services only `flush()`; whoever opens the session (the API dependency, a CLI command,
a Celery job) commits on success and rolls back on error.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import generators, pq
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import InvalidatePoolError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.compare.jsonutil import dumps
from controlplane.settings import get_settings

# What a door that has no SQL of its own (the dashboard) catches: any database failure.
StorageError = SQLAlchemyError


class StoredJSON:
    """A JSON value already turned into the text `json_text` stores, written as it is;
    `replaced_nul` says whether a NUL character in it was stored as U+FFFD.

    Ingest serialises each item's JSON columns while handling that item, so a value that
    cannot be stored rejects its own item instead of failing the batch's INSERT."""

    __slots__ = ("replaced_nul", "text")

    def __init__(self, value: Any) -> None:
        text = dumps(value).decode()
        self.text = _without_nul(text)
        self.replaced_nul = self.text is not text


# A JSON escape: every backslash in serialised JSON begins one, so reading them left to
# right tells a NUL (`\u0000`) from text that spells it (`\\u0000`: a backslash, then u0000).
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.DOTALL)


def _nul_to_fffd(match: re.Match[str]) -> str:
    return "\\ufffd" if match.group() == "\\u0000" else match.group()


def _without_nul(text: str) -> str:
    """Serialised JSON with each NUL escape turned into U+FFFD's; the same object when
    there was none."""
    if "\\u0000" not in text:
        return text
    replaced = _ESCAPE.sub(_nul_to_fffd, text)
    return replaced if replaced != text else text


def json_text(value: Any) -> str:
    """JSON for storage. PostgreSQL's jsonb refuses the NUL escape: store U+FFFD instead."""
    if type(value) is StoredJSON:
        return value.text
    return _without_nul(dumps(value).decode())


def make_engine(url: str) -> Engine:
    """An engine tuned for the backend: WAL and a busy timeout on SQLite; on PostgreSQL,
    libpq's timeouts (`postgres_timeouts`) and a check of each pooled connection before use
    that gives up after SHADOWPLANE_DATABASE_TIMEOUT_SECONDS.

    Both hide statement parameters from error messages: a failed write must not carry the
    row's values (payload text, ids) into logs."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"timeout": 30, "check_same_thread": False},
            json_serializer=json_text,
            hide_parameters=True,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    seconds = get_settings().database_timeout_seconds
    engine = create_engine(
        url,
        connect_args=postgres_timeouts(url, seconds),
        pool_size=10,
        max_overflow=10,
        pool_timeout=5,
        json_serializer=json_text,
        hide_parameters=True,
    )
    checked_before_use(engine, seconds)
    return engine


def postgres_timeouts(url: str, seconds: float) -> dict[str, int]:
    """libpq's connection settings that bound a wait on a PostgreSQL server that has gone,
    each unless the URL sets it: a connection not made within `seconds` fails (libpq counts
    whole seconds, at least 2); data the server's host does not acknowledge within `seconds`
    breaks the connection (tcp_user_timeout), and so do TCP keepalives unanswered for about
    twice `seconds` (an idle connection, or one waiting for a long statement's answer)."""
    whole = max(1, math.ceil(seconds))
    wanted = {
        "connect_timeout": whole,
        "keepalives": 1,
        "keepalives_idle": whole,
        "keepalives_interval": max(1, math.ceil(seconds / 3)),
        "keepalives_count": 3,
        "tcp_user_timeout": math.ceil(seconds * 1000),
    }
    given = make_url(url).query
    return {name: value for name, value in wanted.items() if name not in given}


_FRESH = "shadowplane_fresh"


def checked_before_use(engine: Engine, seconds: float) -> None:
    """Check each connection as the pool hands it out (SQLAlchemy's pre-ping, with a
    deadline): one that does not answer within `seconds` is closed, the pool's others with
    it, and a new one made. A server restarted breaks its connections, which a check finds
    at once; one that stopped answering leaves them open, and only the deadline ends the
    wait. A connection just made that does not answer fails the checkout itself."""

    @event.listens_for(engine, "connect")
    def _made(_dbapi_connection: Any, record: Any) -> None:
        record.info[_FRESH] = True

    @event.listens_for(engine, "checkout")
    def _check(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        fresh = record.info.pop(_FRESH, False)
        try:
            answers(dbapi_connection, seconds)
        except psycopg.Error as exc:
            if fresh:
                raise  # a new connection to a server that does not answer: an outage
            raise InvalidatePoolError(f"the database did not answer a check: {exc}") from exc


def answers(connection: psycopg.Connection[Any], seconds: float) -> None:
    """Raise psycopg's OperationalError unless `connection` answers SELECT 1 within
    `seconds`, closing it. A server that stopped answering (its process frozen, its disk
    hung, a proxy holding the connection) keeps the connection open and its host
    acknowledges what is sent, so no TCP setting ends the wait: only a deadline does."""
    try:
        with connection.lock:
            connection.pgconn.send_query(b"SELECT 1")
            results = connection.wait(generators.execute(connection.pgconn), timeout=seconds)
        if not results or results[-1].status != pq.ExecStatus.TUPLES_OK:
            raise psycopg.OperationalError("the database's answer to a check was an error")
    except psycopg.Error:
        connection.close()
        raise


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for `url`, or for the settings' database: one per database."""
    # None is resolved before the cache: cached as None, the first database a process
    # asked for would be every later caller's, whatever its settings say by then.
    return _engine(url or get_settings().database_url)


# The process's engines by URL, the most recently used last; at most ENGINES of them.
ENGINES = 8
_engines: OrderedDict[str, Engine] = OrderedDict()
_engines_lock = threading.Lock()


def _engine(url: str) -> Engine:
    with _engines_lock:
        found = _engines.get(url)
        if found is not None:
            _engines.move_to_end(url)
            return found
        engine = _engines[url] = make_engine(url)
        while len(_engines) > ENGINES:
            # The least recently used one goes, its idle connections closed: dropped with
            # them open, they would close only when collected (and warn then). Anyone still
            # holding it may go on using it: its pool opens connections anew.
            _, evicted = _engines.popitem(last=False)
            evicted.dispose()
        return engine


def forget_engines() -> None:
    """Drop the process's engines (a forked process must not share its parent's pools)."""
    with _engines_lock:
        _engines.clear()


def dialect_insert(session: Session, table: Any) -> Any:
    """INSERT with the backend's ON CONFLICT clauses (PostgreSQL and SQLite share the syntax)."""
    from sqlalchemy.dialects import postgresql, sqlite

    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block succeeds and rolls back when it raises."""
    # Session itself, not a sessionmaker made per call: each sessionmaker makes a Session
    # subclass, to which SQLAlchemy copies every class-level event listener (the outbox's,
    # the flag bus's): 0.5-0.7 ms of CPU per transaction, growing with the subclasses the
    # collector has not yet freed.
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


T = TypeVar("T")
# Deadlock and serialization failure: PostgreSQL rolled the transaction back and asks for a
# retry. Two routers resending overlapping batches in different orders can deadlock on the
# unique key; each result is written once all the same.
TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})


def is_transient(exc: BaseException) -> bool:
    original = getattr(exc, "orig", None) or exc
    return getattr(original, "sqlstate", None) in TRANSIENT_SQLSTATES


def in_transaction(engine: Engine, work: Callable[[Session], T], attempts: int = 5) -> T:
    """Run `work` in one transaction (committed on success); retry it from the start when
    the database rolled it back for a transient conflict, after a random pause that grows
    with each attempt (retrying at once, the same writers tend to collide again)."""
    for attempt in range(1, attempts + 1):
        try:
            with session_scope(engine) as session:
                return work(session)
        except Exception as exc:
            if attempt < attempts and is_transient(exc):
                time.sleep(random.uniform(0, 0.02 * 2**attempt))
                continue
            raise
    raise AssertionError("unreachable")

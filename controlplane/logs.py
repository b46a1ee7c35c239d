"""Logging: one JSON object per line for every process (API, workers, beat, dashboard), and
the outage state that says once per process that Redis or the database went away and once
that it answers again (docs/operations.md, "Logs").

A line holds `ts` (UTC), `level`, `logger` and `pid`, then either the fields of a message
that is itself a JSON object (the request log, events) or `message`; a traceback is one
field (`exception`) of its line, never lines of its own.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.pool import Pool

_BASE_FIELDS = ("ts", "level", "logger", "pid")
_TRACEBACK = "Traceback (most recent call last):"
MAX_DETAIL_CHARS = 300


# --- the line --------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def __init__(self, use_colors: bool | None = None) -> None:
        # `use_colors`: uvicorn sets it on the formatters of a log config it is given.
        super().__init__()

    def format(self, record: logging.LogRecord) -> str:
        return orjson.dumps(fields(record)).decode()


def fields(record: logging.LogRecord, level: str | None = None) -> dict[str, Any]:
    """What a record's line holds, its level given as `level` when not its own."""
    line: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": level or record.levelname,
        "logger": record.name,
        "pid": record.process,
    }
    message = record.getMessage()
    told = None
    if message.startswith(_TRACEBACK):
        # A traceback given as the message (uvicorn logs a lifespan's failure so, as
        # Starlette hands it over): its last line the message, the rest its field.
        told = message.rstrip()
        message = told.rsplit("\n", 1)[-1].strip()
    parsed, rest = _leading_object(message)
    if parsed is None:
        line["message"] = message
    else:
        line.update((k, v) for k, v in parsed.items() if k not in _BASE_FIELDS)
        if rest:
            line["message"] = rest
    if told is not None:
        line["exception"] = told
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        line["error"] = _error(exc)
        line["exception"] = "".join(traceback.format_exception(exc)).rstrip()
    if record.stack_info:
        line["stack"] = record.stack_info
    return line


def _leading_object(message: str) -> tuple[dict[str, Any] | None, str]:
    """A message that starts with a JSON object: the object and the text after it."""
    if not message.startswith("{"):
        return None, message
    try:
        parsed = orjson.loads(message)
        rest = ""
    except orjson.JSONDecodeError:
        # A JSON object followed by words (`{"event": "startup"} reading texts with ...`).
        try:
            parsed, end = json.JSONDecoder().raw_decode(message)
        except ValueError:
            return None, message
        rest = message[end:].strip()
    return (parsed, rest) if isinstance(parsed, dict) else (None, message)


def _error(exc: BaseException) -> str:
    """The exception's type and first line, short: never a statement's parameters (SQL
    errors carry them), which may hold results' text."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    first = text[0][:MAX_DETAIL_CHARS] if text else ""
    return f"{type(cause).__name__}: {first}" if first else type(cause).__name__


# --- the handler -----------------------------------------------------------------------------

Demote = Callable[[logging.LogRecord], bool]
# Loggers whose INFO is chatter in every process: Alembic's seven "setup plugin ..." lines at
# its first import (each API process reads the migrations' head at start).
CHATTER = frozenset({"alembic.runtime.plugins"})


class JsonLines(logging.StreamHandler):
    """One JSON line per record on stderr. A record whose exception says Redis or the
    database is out of reach marks that outage (`outage_of`; its WARNING is logged once)
    and is itself kept at DEBUG; so is a record of a CHATTER logger or one `demote` picks
    (periodic chatter). A record whose exception says the server refused this process
    (`refusal_of`: a wrong password, a database or role that does not exist) is an ERROR,
    once a REFUSAL_REPEAT_SECONDS per server, the others between at DEBUG."""

    def __init__(self, level: str | int = logging.INFO, demote: Demote | None = None) -> None:
        super().__init__(sys.stderr)
        self.setLevel(level)
        self.setFormatter(JsonFormatter())
        self.demote = demote

    def handle(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and record.name != OUTAGE_LOGGER:
            kind, exc = outage_in(record)
            if kind is not None:
                OUTAGES[kind].failed(exc)
            refused, _ = refusal_in(record)
            if refused is not None and OUTAGES[refused].refusal_due():
                # A setting to fix: an ERROR in its own words, once a REFUSAL_REPEAT_SECONDS.
                if record.levelno < logging.ERROR:
                    record = _at(record, logging.ERROR)
            elif (
                kind is not None
                or refused is not None
                or record.name in CHATTER
                or (self.demote is not None and self.demote(record))
            ):
                if self.level > logging.DEBUG:
                    return False
                record = _at(record, logging.DEBUG)
        return bool(super().handle(record))


def _at(record: logging.LogRecord, level: int) -> logging.LogRecord:
    """A copy of `record` at `level`."""
    return logging.makeLogRecord(
        {**record.__dict__, "levelno": level, "levelname": logging.getLevelName(level)}
    )


def configure_logging(level: str) -> None:
    """The `shadowplane` loggers in JSON lines at `level`, whatever the process's root
    logger does (the API's app, also when a test makes one)."""
    follow_database()
    logger = logging.getLogger("shadowplane")
    handler = next((h for h in logger.handlers if isinstance(h, JsonLines)), None)
    if handler is None:
        logger.addHandler(JsonLines(level))
    else:
        handler.setLevel(level)
    logger.setLevel(level)
    logger.propagate = False


def configure_process(level: str, demote: Demote | None = None) -> JsonLines:
    """Every logger of this process in JSON lines at `level` (a process whose output is all
    ours: uvicorn's server, a Celery worker or beat, the dashboard), Python's warnings
    included."""
    follow_database()
    handler = JsonLines(level, demote)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    shadowplane = logging.getLogger("shadowplane")
    for old in list(shadowplane.handlers):
        shadowplane.removeHandler(old)
    shadowplane.setLevel(level)
    shadowplane.propagate = True
    logging.captureWarnings(True)
    return handler


def process_handler(level: str = "INFO") -> JsonLines:
    """The handler of a process whose output is all ours, for `logging.config.dictConfig`
    (uvicorn applies its `log_config` in every worker process it starts)."""
    logging.captureWarnings(True)
    return JsonLines(level)


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """uvicorn's `log_config`: its loggers and every other one in JSON lines at `level`.
    Its access log stays off (`access_log=False`): the request log (controlplane.http) says
    the same with the key's name, one line per request."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        # Named as uvicorn's own, which it may set `use_colors` on (the handler formats).
        "formatters": {
            name: {"()": "controlplane.logs.JsonFormatter"} for name in ("default", "access")
        },
        "handlers": {"json": {"()": "controlplane.logs.process_handler", "level": level}},
        "root": {"handlers": ["json"], "level": level},
        "loggers": {
            name: {"handlers": [], "level": level, "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "shadowplane")
        },
    }


# --- outages ---------------------------------------------------------------------------------

OUTAGE_LOGGER = "shadowplane.outage"
_outage_log = logging.getLogger(OUTAGE_LOGGER)
# psycopg's connection errors: no server answer at all (no SQLSTATE), class 08 (connection
# exception), and the server shutting down or starting up.
_SERVER_GONE = ("57P01", "57P02", "57P03")
# A server that answers and refuses this process: a password, a role or a database that is
# wrong (class 28, invalid authorization; 3D000, no such database). libpq gives no SQLSTATE
# for a connection it could not open, only the server's words: any FATAL it answered is a
# refusal but for those of a server starting, stopping or full (an outage to wait out).
_REFUSED = ("28", "3D000")
_FATAL = "FATAL:"
_NOT_YET = (
    "the database system is",  # starting up, shutting down, in recovery, not yet accepting
    "too many clients",
    "connection slots are reserved",
    "terminating connection",
)
_NO_PASSWORD = "no password supplied"  # libpq's own: the server asked for one
# How often a process says again that a server refuses it.
REFUSAL_REPEAT_SECONDS = 60.0


class Outage:
    """Whether this process reaches one dependency. The first failure logs one WARNING
    (`<name>_unavailable`), the first answer after it one more (`<name>_available`, with how
    long it was away); the failures and answers in between log nothing."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._since: float | None = None
        self._refusal_said: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException | None = None) -> None:
        if exc is not None and refusal_of(exc) is not None:
            self.refused(exc)
            return
        if self._since is not None:
            return
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        event: dict[str, Any] = {"event": f"{self.name}_unavailable"}
        if exc is not None:
            event["error"] = _error(exc)
        event["message"] = f"{self.name} unavailable; retrying until it answers"
        _outage_log.warning(orjson.dumps(event).decode())

    def answered(self) -> None:
        if self._since is None:
            return
        with self._lock:
            since, self._since = self._since, None
        if since is None:
            return
        away = round(time.monotonic() - since, 1)
        _outage_log.warning(
            orjson.dumps(
                {
                    "event": f"{self.name}_available",
                    "down_seconds": away,
                    "message": f"{self.name} available again after {away} s",
                }
            ).decode()
        )

    def refused(self, exc: BaseException) -> None:
        """The server answered and refused this process (`refusal_of`): a setting to fix,
        not an outage to wait out. One ERROR naming it, again each REFUSAL_REPEAT_SECONDS
        while it refuses."""
        if not self.refusal_due():
            return
        setting = f"SHADOWPLANE_{'REDIS' if self.name == 'redis' else 'DATABASE'}_URL"
        _outage_log.error(
            orjson.dumps(
                {
                    "event": f"{self.name}_refused",
                    "error": _error(exc),
                    "message": f"{self.name} refused this process; check {setting}",
                }
            ).decode()
        )

    def refusal_due(self) -> bool:
        """Whether a refusal is to be said now (the first, or none said for
        REFUSAL_REPEAT_SECONDS), counting it said."""
        now = time.monotonic()
        with self._lock:
            said = self._refusal_said
            if said is not None and now - said < REFUSAL_REPEAT_SECONDS:
                return False
            self._refusal_said = now
        return True

    def reset(self) -> None:
        """Forget an outage without a word (a new process, a test)."""
        with self._lock:
            self._since = None
            self._refusal_said = None


REDIS = Outage("redis")
DATABASE = Outage("database")
OUTAGES = {"redis": REDIS, "database": DATABASE}


def follow_database() -> None:
    """End this process's database outage, if any, at its first new connection (after an
    outage the pool drops the connections it broke and makes new ones)."""
    if not event.contains(Pool, "connect", _connected):
        event.listen(Pool, "connect", _connected)


def _connected(*_: Any) -> None:
    DATABASE.answered()


def outage_of(exc: BaseException | None) -> str | None:
    """`redis` or `database` when `exc` (or what it wraps) says that server is out of
    reach (the pool's wait for a connection timed out included); None for anything else,
    a statement timeout, a refused statement or a refused login (`refusal_of`) included."""
    server, refused = _reach(exc)
    return None if refused else server


def refusal_of(exc: BaseException | None) -> str | None:
    """`redis` or `database` when `exc` (or what it wraps) says that server answered and
    refused this process: a wrong password, a role or database that does not exist."""
    server, refused = _reach(exc)
    return server if refused else None


def _reach(exc: BaseException | None) -> tuple[str | None, bool]:
    """The server whose connection `exc` or what it wraps failed, and whether that server
    refused this process."""
    server, refused = None, False
    for link in _wrapped(exc):
        kind = _kind(link)
        if kind is not None:
            server = server or kind
            refused = refused or _refuses(link)
    return server, refused


def _wrapped(exc: BaseException | None) -> list[BaseException]:
    """`exc` and what it wraps: the driver's error (`orig`), the error it was raised from,
    or the error it was raised while handling when it says that error's words (Celery's
    "Couldn't apply scheduled task plan: Error 111 connecting..."). A bug raised while
    handling an error (a fallback's) wraps nothing: it is a bug, whatever was in the air."""
    chain: list[BaseException] = []
    while exc is not None and len(chain) < 10:
        chain.append(exc)
        context = exc.__context__
        said = context is not None and (
            (str(context) and str(context) in str(exc)) or _kombu_without_connection(exc)
        )
        exc = getattr(exc, "orig", None) or exc.__cause__ or (context if said else None)
    return chain


def _kombu_without_connection(exc: BaseException) -> bool:
    """kombu's `ignore_errors(connection, close)` handed the connection Celery 5.7 has already
    dropped (its consumer restarting after the broker went away, a bootstep closing its
    channel): reading the dropped connection's error types fails with this AttributeError,
    raised in kombu while handling the broker's connection error — that error's echo, not a
    bug of ours (Celery logs it as 'Error on restarting Gossip')."""
    if not isinstance(exc, AttributeError) or "'connection_errors'" not in str(exc):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.endswith(_KOMBU_COMMON)


_KOMBU_COMMON = os.path.join("kombu", "common.py")


def _kind(exc: BaseException) -> str | None:
    redis = sys.modules.get("redis.exceptions")
    if redis is not None and isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return "redis"
    kombu = sys.modules.get("kombu.exceptions")
    # The broker is Redis: kombu's OperationalError is a broker connection that failed.
    if kombu is not None and isinstance(exc, kombu.OperationalError):
        return "redis"
    sqlalchemy = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy is not None and isinstance(exc, sqlalchemy.DBAPIError):
        # Otherwise the driver's error (`orig`) says.
        return "database" if exc.connection_invalidated else None
    # The pool waited its pool_timeout for a connection: every one is held by a request
    # waiting on a database that does not answer (or each of them slow), and the next
    # requests fail alike; one WARNING for them all, not one each.
    if sqlalchemy is not None and isinstance(exc, sqlalchemy.TimeoutError):
        return "database"
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        state = exc.sqlstate
        if state is None or state.startswith(("08", *_REFUSED)) or state in _SERVER_GONE:
            return "database"
    return None


def _refuses(exc: BaseException) -> bool:
    """Whether a connection error (`_kind`) is the server refusing this process."""
    redis = sys.modules.get("redis.exceptions")
    if redis is not None and isinstance(exc, redis.AuthenticationError | redis.AuthorizationError):
        return True
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.OperationalError):
        return False
    if exc.sqlstate is not None:
        return exc.sqlstate.startswith(_REFUSED)
    text = str(exc)
    if _NO_PASSWORD in text:
        return True
    return _FATAL in text and not any(words in text for words in _NOT_YET)


def outage_in(record: logging.LogRecord) -> tuple[str | None, BaseException | None]:
    """The outage a record reports, by its exception or an exception among its arguments
    (Celery's connection errors pass theirs as arguments)."""
    return _reported(record, outage_of)


def refusal_in(record: logging.LogRecord) -> tuple[str | None, BaseException | None]:
    """The refusal (`refusal_of`) a record reports, as `outage_in` reads it."""
    return _reported(record, refusal_of)


def _reported(
    record: logging.LogRecord, read: Callable[[BaseException], str | None]
) -> tuple[str | None, BaseException | None]:
    candidates: list[Any] = []
    if record.exc_info and record.exc_info[1] is not None:
        candidates.append(record.exc_info[1])
    if isinstance(record.args, tuple):
        candidates.extend(a for a in record.args if isinstance(a, BaseException))
    for exc in candidates:
        kind = read(exc)
        if kind is not None:
            return kind, exc
    return None, None


def noticed(exc: BaseException) -> bool:
    """Mark the outage `exc` reports (its WARNING logged once per process) or say the
    refusal it reports (an ERROR, once a REFUSAL_REPEAT_SECONDS), and say whether it
    reported either; a caller logs anything else itself."""
    server, _ = _reach(exc)
    if server is None:
        return False
    OUTAGES[server].failed(exc)
    return True

"""The log line (one JSON object per record, a traceback in a field) and the outage state
(one WARNING as Redis or the database goes away, one as it answers again)."""

from __future__ import annotations

import io
import logging
import traceback
from collections.abc import Iterator

import kombu.common
import kombu.exceptions
import orjson
import psycopg
import pytest
import redis
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from controlplane.logs import DATABASE, OUTAGES, REDIS, JsonLines, outage_of, refusal_of
from controlplane.settings import Settings, explain
from tests.support import raised


class Logged:
    """A logger of its own, printing JSON lines at `level` into a string."""

    def __init__(self, name: str, level: str) -> None:
        self.stream = io.StringIO()
        self.handler = JsonLines(level)
        self.handler.setStream(self.stream)
        self.logger = logging.getLogger(name)
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False

    def lines(self) -> list[dict[str, object]]:
        return [orjson.loads(line) for line in self.stream.getvalue().splitlines()]

    def close(self) -> None:
        self.logger.removeHandler(self.handler)


@pytest.fixture
def logged() -> Iterator[Logged]:
    """JSON lines at INFO, from a test logger and from the outage logger, with no outage
    left over from another test."""
    for outage in OUTAGES.values():
        outage.reset()
    own = Logged("tests.logs", "INFO")
    outages = logging.getLogger("shadowplane.outage")
    outages.addHandler(own.handler)
    try:
        yield own
    finally:
        outages.removeHandler(own.handler)
        own.close()
        for outage in OUTAGES.values():
            outage.reset()


def test_a_record_is_one_json_line_with_its_exception_in_a_field(logged: Logged) -> None:
    try:
        {}["missing"]  # noqa: B018
    except KeyError:
        logged.logger.exception("lookup failed for %s", "task\nwith a newline")
    logged.logger.info('{"event": "startup", "text_reader": "%s"} reading texts with %s', "a", "b")
    logged.logger.info('{"ts": "not mine", "level": "not mine", "method": "GET"}')
    text = logged.stream.getvalue()
    assert text.count("\n") == 3  # three records, three lines: newlines only escaped inside
    failed, started, request = logged.lines()
    assert failed["level"] == "ERROR" and failed["logger"] == "tests.logs"
    assert failed["message"] == "lookup failed for task\nwith a newline"
    assert failed["error"] == "KeyError: 'missing'"
    assert str(failed["exception"]).startswith("Traceback (most recent call last):")
    assert str(failed["exception"]).endswith("KeyError: 'missing'")
    # A JSON message's fields join the line's; words after it are its message.
    assert started["event"] == "startup" and started["text_reader"] == "a"
    assert started["message"] == "reading texts with b"
    # The line's own fields are not overwritten by the message's.
    assert request["method"] == "GET" and request["level"] == "INFO"
    assert request["ts"] != "not mine" and request["pid"] == failed["pid"]


def test_a_traceback_given_as_the_message_is_the_lines_exception(logged: Logged) -> None:
    # uvicorn logs a lifespan's failure (a second Ctrl-C cancels it) as the traceback's text.
    try:
        {}["missing"]  # noqa: B018
    except KeyError:
        text = traceback.format_exc()
    logged.logger.error(text)
    (line,) = logged.lines()
    assert line["message"] == "KeyError: 'missing'"
    assert line["exception"] == text.rstrip() and "\n" in text.rstrip()


def test_an_outage_is_one_warning_when_it_starts_and_one_when_it_ends(logged: Logged) -> None:
    down = raised(redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379."))
    for _ in range(3):
        REDIS.failed(down)
    # A record carrying the same failure, as Celery logs its own: it marks the outage (said
    # already) and is kept at DEBUG only, below this handler's INFO.
    logged.logger.error("consumer: Cannot connect to %s: %s.", "redis://", down)
    logged.logger.error("Message Error", exc_info=down)
    for _ in range(3):
        REDIS.answered()
    REDIS.answered()
    assert [(r["level"], r["event"]) for r in logged.lines()] == [
        ("WARNING", "redis_unavailable"),
        ("WARNING", "redis_available"),
    ]
    unavailable, available = logged.lines()
    assert unavailable["error"] == "ConnectionError: Error 111 connecting to 127.0.0.1:6379."
    assert unavailable["logger"] == "shadowplane.outage"
    assert isinstance(available["down_seconds"], float)


def test_a_record_of_an_outage_starts_it_and_shows_at_debug(logged: Logged) -> None:
    logged.handler.setLevel(logging.DEBUG)
    gone = psycopg.OperationalError("connection failed: Connection refused")
    wrapped = raised(OperationalError("SELECT secret_param", {"x": "SECRET"}, gone))
    logged.logger.error("scheduled pass failed", exc_info=wrapped)
    DATABASE.answered()
    warned, demoted, back = logged.lines()
    assert warned["event"] == "database_unavailable"
    # The error names the driver's failure, never the statement or its parameters.
    assert warned["error"] == "OperationalError: connection failed: Connection refused"
    assert demoted["level"] == "DEBUG" and demoted["message"] == "scheduled pass failed"
    assert back["event"] == "database_available"
    # Another failure (not an outage) is left as it is.
    logged.logger.error("webhook failed", exc_info=raised(ConnectionRefusedError(111, "refused")))
    assert logged.lines()[-1]["level"] == "ERROR"


def test_what_counts_as_an_outage() -> None:
    def chained(outer: BaseException, inner: BaseException) -> BaseException:
        try:
            try:
                raise inner
            except BaseException:
                raise outer  # noqa: B904 (the implicit context is what is read)
        except BaseException as caught:
            return caught

    refused = redis.exceptions.ConnectionError("refused")
    assert outage_of(refused) == "redis"
    assert outage_of(redis.exceptions.TimeoutError("slow")) == "redis"
    assert outage_of(kombu.exceptions.OperationalError("broker")) == "redis"
    # Celery's scheduling error, raised while handling the connection error in its words.
    applying = RuntimeError("Couldn't apply scheduled task plan-windows: refused")
    assert outage_of(chained(applying, refused)) == "redis"
    # A bug raised while handling it (a fallback's) is a bug, not the outage.
    assert outage_of(chained(KeyError("bucket"), refused)) is None
    # Celery 5.7 closing a channel on the connection it already dropped, through kombu's
    # ignore_errors (its 'Error on restarting Gossip' in a Redis restart): the echo of the
    # outage. The same AttributeError raised by anything else is a bug.
    try:
        kombu.common.ignore_errors(None, lambda: (_ for _ in ()).throw(refused))
    except AttributeError as dropped:
        assert outage_of(dropped) == "redis"
    else:
        raise AssertionError("kombu's ignore_errors took a None connection")
    assert (
        outage_of(
            chained(
                AttributeError("'NoneType' object has no attribute 'connection_errors'"), refused
            )
        )
        is None
    )
    assert outage_of(redis.exceptions.ResponseError("WRONGTYPE")) is None

    assert outage_of(psycopg.OperationalError("server closed the connection")) == "database"
    assert outage_of(psycopg.errors.AdminShutdown("terminating connection")) == "database"
    assert outage_of(OperationalError("SELECT 1", {}, psycopg.errors.CannotConnectNow())) == (
        "database"
    )
    # A connection or a check before use that timed out (a server that stopped answering),
    # and the pool's wait for a connection that those hold.
    timed_out = psycopg.errors.ConnectionTimeout("connection timeout expired")
    assert outage_of(OperationalError(None, None, timed_out)) == "database"
    assert outage_of(PoolTimeout("QueuePool limit of size 10 overflow 10 reached")) == "database"
    # The database answered: a statement it cancelled or a lock it refused is no outage.
    assert outage_of(psycopg.errors.QueryCanceled("statement timeout")) is None
    assert outage_of(OperationalError("SELECT 1", {}, psycopg.errors.LockNotAvailable())) is None
    assert outage_of(ConnectionRefusedError(111, "refused")) is None
    assert outage_of(None) is None


def test_a_server_that_refuses_this_process_is_a_refusal_not_an_outage() -> None:
    # libpq's words (no SQLSTATE for a connection it could not open): the server answered.
    at = 'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
    for words in (
        'FATAL:  database "shadowplane" does not exist',
        'FATAL:  role "shadowplane" does not exist',
        'FATAL:  password authentication failed for user "shadowplane"',
        "fe_sendauth: no password supplied",
    ):
        wrong = OperationalError("SELECT 1", {}, psycopg.OperationalError(at + words))
        assert (outage_of(wrong), refusal_of(wrong)) == (None, "database"), words
    # A server starting, stopping or full is an outage to wait out.
    for words in (
        "FATAL:  the database system is starting up",
        "FATAL:  the database system is shutting down",
        "FATAL:  sorry, too many clients already",
        "Connection refused\n\tIs the server running on that host?",
    ):
        busy = psycopg.OperationalError(at + words)
        assert (outage_of(busy), refusal_of(busy)) == ("database", None), words
    assert refusal_of(psycopg.errors.InvalidPassword("wrong")) == "database"
    wrong_password = redis.exceptions.AuthenticationError("invalid username-password pair")
    assert (outage_of(wrong_password), refusal_of(wrong_password)) == (None, "redis")
    # kombu's error, raised from redis-py's (Celery's consumer logs that one).
    try:
        raise kombu.exceptions.OperationalError(str(wrong_password)) from wrong_password
    except kombu.exceptions.OperationalError as broker:
        assert (outage_of(broker), refusal_of(broker)) == (None, "redis")
    assert refusal_of(redis.exceptions.ConnectionError("refused")) is None


def test_a_refusal_is_an_error_once_a_minute_per_server(logged: Logged) -> None:
    wrong = raised(redis.exceptions.AuthenticationError("invalid username-password pair"))
    for _ in range(3):
        logged.logger.error("consumer: Cannot connect to %s: %s.", "redis://:**@r:6379/0", wrong)
        REDIS.failed(wrong)  # a caller that falls back (the rate limiter) says it alike
    refused = raised(psycopg.OperationalError('FATAL:  database "sp" does not exist'))
    DATABASE.failed(refused)
    logged.logger.warning("flags not reloaded", exc_info=refused)
    lines = logged.lines()
    assert [(r["level"], r["logger"]) for r in lines] == [
        ("ERROR", "tests.logs"),
        ("ERROR", "shadowplane.outage"),
    ]
    assert lines[0]["message"].endswith("invalid username-password pair.")
    assert lines[1]["event"] == "database_refused"
    assert lines[1]["error"] == 'OperationalError: FATAL:  database "sp" does not exist'
    assert "SHADOWPLANE_DATABASE_URL" in lines[1]["message"]
    assert not REDIS.down and not DATABASE.down


def test_the_level_setting_takes_a_level_name_in_any_case() -> None:
    assert Settings(log_level=" debug ").log_level == "DEBUG"
    with pytest.raises(ValidationError) as refused:
        Settings(log_level="loud")
    assert explain(refused.value) == [
        "SHADOWPLANE_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    ]

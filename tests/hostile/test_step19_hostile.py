"""Hostile review of step 19 (issue 29): no hidden jobs, quiet logs and the README's
production section, tried as an SRE woken at night and a hostile user would. Each test pins
one defect that main shows, and fails there."""

from __future__ import annotations

import io
import json
import logging
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from controlplane.catalog.schemas import DEFAULT_CAP, DEFAULT_H, TaskConfig
from controlplane.logs import OUTAGES, JsonLines
from controlplane.settings import Settings, explain
from shadowplane_workers.app import make_celery
from shadowplane_workers.schedule import PLAN_JOB
from tests.conftest import pg_admin_url
from tests.fixtures import StartWorker
from tests.liveapi import ROOT, WAIT, Proxy, free_port, run_cli, run_python, wait_until
from tests.support import CeleryProcess, raised

# --- helpers ---------------------------------------------------------------------------------


class Printed:
    """What JSON lines at INFO print, from a test logger and from the outage logger."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.handler = JsonLines("INFO")
        self.handler.setStream(self.stream)
        self.logger = logging.getLogger("tests.hostile19")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self.handler)
        logging.getLogger("shadowplane.outage").addHandler(self.handler)

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def close(self) -> None:
        self.logger.removeHandler(self.handler)
        logging.getLogger("shadowplane.outage").removeHandler(self.handler)


@pytest.fixture
def printed() -> Iterator[Printed]:
    for outage in OUTAGES.values():
        outage.reset()
    lines = Printed()
    try:
        yield lines
    finally:
        lines.close()
        for outage in OUTAGES.values():
            outage.reset()


def not_json(text: str) -> list[str]:
    """The lines of a process's output that are not one JSON object each."""
    bad = []
    for line in text.splitlines():
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            bad.append(line)
    return bad


def own_env(**settings: str) -> dict[str, str]:
    """This process's environment without its SHADOWPLANE_* settings (the text reader
    kept), plus `settings`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SHADOWPLANE_") or k == "SHADOWPLANE_TEXT_READER"
    }
    env.update(settings)
    return env


# --- point 2: no hidden jobs -----------------------------------------------------------------


@pytest.mark.parametrize("limit", ["inf", "1e400"])
def test_a_job_time_limit_without_end_is_refused_like_any_bad_setting(
    limit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SHADOWPLANE_JOB_TIME_LIMIT_SECONDS=inf passes the settings (gt=0 lets infinity in):
    `shadowplane api` serves, and `shadowplane worker` dies loading the app (job_limits:
    math.ceil(inf), OverflowError) with Celery's plain-text 'Unable to load celery
    application' and a traceback, instead of 'settings refused' naming the variable."""
    monkeypatch.setenv("SHADOWPLANE_JOB_TIME_LIMIT_SECONDS", limit)
    with pytest.raises(ValidationError) as refused:
        Settings(database_url="sqlite://")
    assert any(
        line.startswith("SHADOWPLANE_JOB_TIME_LIMIT_SECONDS") for line in explain(refused.value)
    )


def test_shadowplane_queue_on_a_redis_url_it_cannot_read_fails_in_one_line(tmp_path: Path) -> None:
    """The runbook's queue check, with a SHADOWPLANE_REDIS_URL redis-py cannot read (a
    typo'd scheme; kombu's own sentinel:// and redis+socket:// alike): a rich traceback of
    redis.from_url's ValueError, outside the 'did not answer' line the command has."""
    env = own_env(
        SHADOWPLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'queue.db'}",
        SHADOWPLANE_REDIS_URL="http://redis:6379/0",
    )
    done = run_cli(["queue"], env, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Traceback" not in out and "╭" not in out, out
    assert done.stderr.startswith("error:"), out


# --- point 3: quiet logs ---------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(
    ("part", "value"), [("database", "sp_no_such_database"), ("username", "sp_no_such_role")]
)
def test_a_database_that_refuses_the_login_stays_an_error(
    part: str, value: str, printed: Printed
) -> None:
    """A wrong SHADOWPLANE_DATABASE_URL (a database or role that does not exist, a password
    rotated) is read as an outage: psycopg's connection errors carry no SQLSTATE. The API
    and each worker log one WARNING, 'database unavailable; retrying until it answers',
    and every failure after it at DEBUG; nothing at ERROR, ever, while it never answers."""
    url = make_url(pg_admin_url()).set(drivername="postgresql", **{part: value})
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(url.render_as_string(hide_password=False), connect_timeout=10)
    printed.logger.error("Task metrics.plan raised unexpected", exc_info=refused.value)
    assert [line["level"] for line in printed.lines()] == ["ERROR"], printed.lines()


def test_a_redis_that_refuses_the_password_stays_an_error(printed: Printed) -> None:
    """redis-py's AuthenticationError is a ConnectionError: a wrong password in
    SHADOWPLANE_REDIS_URL is an 'outage' — one WARNING 'retrying until it answers', then
    Celery's every 'Cannot connect' ERROR at DEBUG."""
    wrong = raised(
        redis.exceptions.AuthenticationError("invalid username-password pair or user is disabled.")
    )
    printed.logger.error("consumer: Cannot connect to %s: %s.", "redis://:**@redis:6379/0", wrong)
    assert [line["level"] for line in printed.lines()] == ["ERROR"], printed.lines()


def test_a_bug_raised_while_handling_a_redis_error_is_still_an_error(printed: Printed) -> None:
    """Code that runs only while Redis is away runs inside `except` blocks (RedisLimiter.take
    calls its in-process fallback in one): a bug there carries the Redis error as its
    __context__, and the outage filter, which follows __context__, prints uvicorn's 'Exception
    in ASGI application' (a 500) at DEBUG. A fallback's bug is hidden exactly when it shows."""
    try:
        try:
            raise redis.exceptions.ConnectionError("Error 111 connecting to redis:6379.")
        except redis.exceptions.ConnectionError:
            {}["bucket"]  # noqa: B018 (the fallback's bug)
    except KeyError as bug:
        printed.logger.error("Exception in ASGI application", exc_info=bug)
    errors = [line for line in printed.lines() if line["level"] == "ERROR"]
    assert [line.get("error") for line in errors] == ["KeyError: 'bucket'"], printed.lines()


def test_celerys_shutdown_words_follow_the_log_level(tmp_path: Path) -> None:
    """`shadowplane_workers.logs.say` writes Celery's signal-handler words ('worker: Warm shutdown',
    'Hitting Ctrl+C again ...') as INFO lines whatever SHADOWPLANE_LOG_LEVEL says: a worker
    at WARNING prints INFO lines at every stop."""
    code = (
        "from shadowplane_workers import logs; logs.configure('WARNING'); "
        "logs.say('worker: Warm shutdown (MainProcess)\\n')"
    )
    done = run_python(code, own_env(), tmp_path)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["level"] for line in done.stderr.splitlines()] == [], done.stderr


def test_an_api_process_start_says_nothing_of_alembics_plugins(tmp_path: Path) -> None:
    """Every API process (each of `--workers N`) imports the app after uvicorn has set up
    the JSON lines at INFO, and importing controlplane.migrate (Alembic) logs seven 'setup
    plugin alembic.autogenerate...' INFO lines: noise in the log at every start and
    restart. A fresh interpreter, as uvicorn's worker is (a forked one has Alembic loaded)."""
    code = (
        "from controlplane.logs import configure_process; configure_process('INFO'); "
        "from controlplane.migrate import head_revisions; head_revisions()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=own_env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["logger"] for line in done.stderr.splitlines()] == [], done.stderr


@pytest.mark.integration
def test_the_dashboard_stopped_with_ctrl_c_prints_json_lines_only(tmp_path: Path) -> None:
    """One Ctrl-C (SIGINT, default disposition, as a terminal or `kill -INT` sends it):
    uvicorn shuts down in JSON lines, then re-raises the signal, and Streamlit's click main
    prints a blank line and 'Aborted!' in plain text, exit status 1."""
    log = tmp_path / "dashboard.log"
    env = own_env(SHADOWPLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'dash.db'}")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "dashboard", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A terminal's Ctrl-C meets Python's default handler (the test runner may ignore it).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
        )
    try:
        wait_until(
            lambda: process.poll() is not None or "Application startup complete" in log.read_text(),
            "the dashboard to serve",
            every=0.1,
        )
        assert process.poll() is None, log.read_text()
        process.send_signal(signal.SIGINT)
        process.wait(WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
    assert not_json(log.read_text()) == [], log.read_text()[-2000:]


@pytest.mark.integration
def test_a_job_on_a_database_that_stopped_answering_is_an_outage_not_a_killed_job(
    pg_url: str, redis_url: Any, celery_worker: StartWorker
) -> None:
    """PostgreSQL stops answering (frozen, partitioned: no refusal) under a worker. The
    engine had no connect timeout and no keepalive or client-side timeout, so the job's
    pre-ping waited on the dead connection until the hard time limit killed its pool process:
    per job 'Task handler raised error: TimeLimitExceeded', 'Hard time limit exceeded' and
    'Process ... exited with signal 9' at ERROR (three ERRORs a tick, no database_unavailable
    WARNING). The API alike: requests hung, then one 'storage_unavailable' WARNING per request
    once its pool was taken. Now the check before use gives up after
    SHADOWPLANE_DATABASE_TIMEOUT_SECONDS (1 s here; a new connection's at least 2 s, libpq's
    floor), the job is retried as on any outage, and the process says so once, and once when
    the database answers again."""
    target = make_url(pg_url)
    proxy = Proxy(target.port or 5432)
    via = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    broker = redis_url()
    # The time limit is well past a failed check and connection (1 + 2 s): only a wait
    # without end reaches it.
    worker = celery_worker(
        via,
        broker,
        ready=False,  # the first plan waits in the queue for it
        SHADOWPLANE_JOB_TIME_LIMIT_SECONDS="8",
        SHADOWPLANE_DATABASE_TIMEOUT_SECONDS="1",
    )
    celery = make_celery(Settings(database_url=via, redis_url=broker))
    try:
        celery.send_task(PLAN_JOB)  # a pooled connection, made while the server answers
        wait_until(lambda: "succeeded" in worker.log(), "the first plan to run", every=0.1)
        proxy.flowing.clear()
        celery.send_task(PLAN_JOB)
        wait_until(
            lambda: "database_unavailable" in worker.log() or "Hard time limit" in worker.log(),
            "the plan to fail on the frozen database",
            every=0.1,
        )
        proxy.flowing.set()
        # The job's retry (within a second or two) connects again.
        wait_until(
            lambda: "database_available" in worker.log() or "Hard time limit" in worker.log(),
            "the retried plan to reach the database",
            every=0.1,
        )
        text = worker.log(tail=10**7)
    finally:
        proxy.close()
        celery.close()
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line for line in lines if line["level"] == "ERROR"] == [], text[-3000:]
    events = [line["event"] for line in lines if line.get("event", "").startswith("database_")]
    assert events == ["database_unavailable", "database_available"], text[-3000:]


@pytest.mark.integration
def test_beat_on_a_redis_that_stopped_answering_says_so_once_and_once_when_it_is_back(
    pg_url: str, redis_url: Any, tmp_path: Path
) -> None:
    """Redis stops answering (frozen, not restarted) under beat. Defect 2, fixed: its
    publish waited on the socket without a timeout, so beat stopped queueing the plan and
    said nothing at all — no redis_unavailable, no redis_available when it answered again
    (a 45-s freeze: 45 s of silence, then it went on as if nothing happened). The broker's
    publish now gives up after `BEAT_SOCKET_TIMEOUT` (not retried), and beat says so once,
    then once when Redis answers. (The test gives beat 20 s to notice a
    freeze: the bound is this test's choice.)"""
    server = make_url(redis_url())
    proxy = Proxy(server.port or 6379)
    broker = server.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    env = own_env(
        SHADOWPLANE_DATABASE_URL=pg_url,
        SHADOWPLANE_REDIS_URL=broker,
        SHADOWPLANE_TICK_SECONDS="1",
    )
    beat = CeleryProcess(
        ["beat", "--schedule-file", str(tmp_path / "schedule")], env, tmp_path / "beat.log"
    ).start()
    sent = "Sending due task plan-windows"
    try:
        wait_until(lambda: sent in beat.log(), "beat to queue a plan", every=0.1)
        proxy.flowing.clear()
        noticed = wait_until(
            lambda: "redis_unavailable" in beat.log(tail=10**7) or not beat.running(),
            "beat to say Redis is away",
            timeout=20,
            every=0.2,
        )
        assert noticed and beat.running(), beat.log()
        proxy.flowing.set()
        wait_until(lambda: "redis_available" in beat.log(tail=10**7), "beat to say it is back")
    finally:
        proxy.close()
        beat.stop()
    events = [json.loads(line).get("event") for line in beat.log(tail=10**7).splitlines()]
    assert [e for e in events if e] == ["redis_unavailable", "redis_available"], beat.log()


# --- point 5: the README's production section ------------------------------------------------


def test_the_readmes_rollback_time_with_10_second_windows_holds_at_the_default_lateness() -> None:
    """README, 'Windows and lateness': a rollback comes '3 x window_seconds +
    allowed_lateness_seconds plus a tick after a breakage: about 17 minutes with the
    defaults, under a minute with 10-second windows'. With 10-second windows and the
    default lateness (120 s) that is 3 x 10 + 120 + 10 = 160 s, not under a minute (only
    the rehearsal's lateness of 1 s makes it one)."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    claim = "under a minute with 10-second windows"
    ten = TaskConfig.model_validate(
        {"task": "t", "comparator": {"kind": "label", "labels": ["a", "b"]}, "window_seconds": 10}
    )
    windows = math.ceil(DEFAULT_H / DEFAULT_CAP)  # 5 / 2: three windows of evidence
    seconds = (
        windows * ten.window_seconds
        + ten.allowed_lateness_seconds
        + Settings(database_url="sqlite://").tick_seconds
    )
    assert claim not in text or seconds < 60, (claim, seconds)


@pytest.mark.parametrize("limit", ["0", "0.1", "3601", "nan"])
def test_a_job_time_limit_outside_half_a_second_to_an_hour_is_refused(
    limit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Less kills every job as it starts; more hides a dead worker's job for longer than
    anyone waits (the visibility timeout follows the limit)."""
    monkeypatch.setenv("SHADOWPLANE_JOB_TIME_LIMIT_SECONDS", limit)
    with pytest.raises(ValidationError) as refused:
        Settings(database_url="sqlite://")
    assert any(
        line.startswith("SHADOWPLANE_JOB_TIME_LIMIT_SECONDS") for line in explain(refused.value)
    )


@pytest.mark.parametrize(
    "url", ["redis://redis:6379/0", "rediss://:pw@redis:6380/1", "unix:///run/redis.sock"]
)
def test_a_redis_url_redis_py_reads_is_taken(url: str) -> None:
    assert Settings(database_url="sqlite://", redis_url=url).redis_url == url

"""Hostile review of dcb0856 (scripts/test installs with uv, pip where uv cannot be had) and
b8fb959 (`shadowplane migrate` tries again a migration PostgreSQL ended as one side of a
deadlock; its one-line errors say whether the URL or a statement failed; `shadowplane demo`
migrates through the same helper), tried as a hostile operator would.

dcb0856 was tried on fresh clones outside the suite (an install is half a minute, too slow
for a test): the fallback to pip, the versions uv picks and the install stamp held (this
file's commit message says how). Here, b8fb959 against real PostgreSQL and SQLite: each
strict xfail is a defect found, each plain test a hostile case that held. The password below
is never a real one: the servers of the suite trust local connections and ignore it."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import NullPool

from controlplane.db import get_engine
from controlplane.migrate import MigrationLocked, current_revisions, head_revisions, upgrade
from tests.db.migrating import migrate_to
from tests.db.test_migrate_locks import BEFORE, HANG, reading_result_keys
from tests.liveapi import Done, free_port, output, run_python, start_python

SECRET = "hostile-review-pw-7f3e"
# The foreign key the first migration after BEFORE drops (ALTER TABLE result_keys).
FK = "fk_result_keys_task_id_tasks"


def _cli(args: list[str], url: str, workdir: Path, **env: str) -> Done:
    """`shadowplane ARGS` as an operator runs it, its pauses between attempts taken out."""
    workdir.mkdir(parents=True, exist_ok=True)
    code = (
        "import controlplane.migrate as m\n"
        "m.LOCK_PAUSE_SECONDS = 0\n"
        "from controlplane.cli import app\n"
        f"app(args={args!r}, prog_name='shadowplane')\n"
    )
    return run_python(code, {**os.environ, **env, "SHADOWPLANE_DATABASE_URL": url}, workdir, HANG)


def _one_line(done: Done) -> str:
    """The command's one line of error: no traceback, nothing else on stderr."""
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-4000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-4000:]
    return lines[0]


def _with_password(url: str) -> str:
    return make_url(url).set(password=SECRET).render_as_string(hide_password=False)


def _revision(url: str) -> set[str]:
    get_engine(url).dispose()
    with get_engine(url).connect() as conn:
        return current_revisions(conn)


def _wait_for_lock_wait(watch: Connection, table: str) -> None:
    """Until a session waits for a lock on `table`."""
    waiting = sa.text(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = CAST(:t AS regclass)"
    )
    deadline = time.monotonic() + HANG
    while not watch.execute(waiting, {"t": table}).scalar_one():
        watch.rollback()
        assert time.monotonic() < deadline, f"no session waited for {table} within {HANG} s"
        time.sleep(0.02)
    watch.rollback()


def _wait_for_advisory_lock_wait(watch: Connection) -> None:
    """Until a session waits for an advisory lock (a second migration for the first)."""
    waiting = sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'advisory'")
    deadline = time.monotonic() + HANG
    while not watch.execute(waiting).scalar_one():
        watch.rollback()
        assert time.monotonic() < deadline, f"no session waited for an advisory lock in {HANG} s"
        time.sleep(0.02)
    watch.rollback()


def _refuse_ddl(url: str, message: str, detail: str = "", sqlstate: str = "P0001") -> None:
    """An operator's event trigger that refuses every DDL statement with `message` (a guard
    against schema changes outside a release window, say): PostgreSQL's own error, raised
    from the migration's first ALTER. The message is read from a table, so a test can change
    it with an UPDATE (replacing the function would be DDL, refused too)."""
    with get_engine(url).begin() as conn:
        conn.execute(sa.text("CREATE TABLE hostile_refusal (message text, detail text)"))
        conn.execute(
            sa.text("INSERT INTO hostile_refusal VALUES (:m, :d)"), {"m": message, "d": detail}
        )
        conn.execute(
            sa.text(
                "CREATE FUNCTION hostile_refuse() RETURNS event_trigger LANGUAGE plpgsql AS $$ "
                "DECLARE m text; d text; BEGIN "
                "SELECT message, detail INTO m, d FROM hostile_refusal; "
                f"RAISE EXCEPTION USING MESSAGE = m, DETAIL = d, ERRCODE = '{sqlstate}'; "
                "END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE EVENT TRIGGER hostile_refuse ON ddl_command_start "
                "EXECUTE FUNCTION hostile_refuse()"
            )
        )


# Defects found, fixed since (they were strict xfails).


@pytest.mark.fresh_db
def test_two_migrate_commands_at_once_both_end_at_head(pg_url: str, tmp_path: Path) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    get_engine(pg_url).dispose()
    env = {"SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS": str(HANG)}
    code = "from controlplane.cli import app\napp(args=['migrate'], prog_name='shadowplane')\n"
    full = {**os.environ, **env, "SHADOWPLANE_DATABASE_URL": pg_url}
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    engine = sa.create_engine(pg_url, poolclass=NullPool)
    with engine.connect() as holder, engine.connect() as watch:
        # A session on tasks: the first migration takes result_keys, then waits for tasks.
        holder.execute(sa.text("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"))
        first = start_python(code, full, first_dir)
        _wait_for_lock_wait(watch, "tasks")
        # The second waits for the first to end before it reads the revision (it read
        # BEFORE, and waited for result_keys behind the first, before the fix).
        second = start_python(code, full, second_dir)
        _wait_for_advisory_lock_wait(watch)
        holder.rollback()
    engine.dispose()
    codes = [first.wait(HANG), second.wait(HANG)]
    done = [output(first_dir), output(second_dir)]
    assert codes[0] == 0, done[0].stderr
    assert _revision(pg_url) == head_revisions()
    assert codes[1] == 0, done[1].stderr
    assert "migrated" in done[1].stdout


@pytest.mark.fresh_db
def test_a_password_in_the_url_query_is_not_printed(pg_url: str, tmp_path: Path) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    with get_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f'ALTER TABLE result_keys DROP CONSTRAINT "{FK}"'))
    get_engine(pg_url).dispose()
    url = make_url(pg_url).update_query_dict({"password": SECRET})
    done = _cli(["migrate"], url.render_as_string(hide_password=False), tmp_path)
    assert done.returncode == 1, done.stderr
    line = _one_line(done)
    assert line.startswith("error: cannot migrate ") and "(running: ALTER TABLE" in line, line
    assert SECRET not in done.stdout + done.stderr, line


@pytest.mark.parametrize(
    "url",
    [
        # A typo in the port.
        f"postgresql+psycopg://shadowplane:{SECRET}@127.0.0.1:54x32/shadowplane",
        # A colon left out after the scheme.
        f"postgresql+psycopg//shadowplane:{SECRET}@127.0.0.1:5432/shadowplane",
    ],
    ids=["port", "scheme"],
)
def test_a_url_that_does_not_parse_is_one_line_blaming_the_url(url: str, tmp_path: Path) -> None:
    done = _cli(["migrate"], url, tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert SECRET not in done.stdout + done.stderr
    line = _one_line(done)
    assert line.startswith("error: SHADOWPLANE_DATABASE_URL: "), line


@pytest.mark.fresh_db
def test_a_database_ahead_of_this_release_is_one_line(pg_url: str, tmp_path: Path) -> None:
    with get_engine(pg_url).begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'ffffffffffff'"))
    get_engine(pg_url).dispose()
    done = _cli(["migrate"], _with_password(pg_url), tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    line = _one_line(done)
    assert line.startswith("error: cannot migrate ") and "ffffffffffff" in line, line


class _OnRetry(logging.Handler):
    """Runs `action` in the migration's thread when its first attempt is given up (the
    warning before it tries again)."""

    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self.action = action
        self.fired = 0
        self.failed: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "trying again" in record.getMessage() and not self.fired:
            self.fired += 1
            try:
                self.action()
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                self.failed.append(exc)


@pytest.mark.fresh_db
def test_the_last_message_counts_only_the_deadlocks_there_were(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    engine = sa.create_engine(pg_url, poolclass=NullPool)
    raised: list[BaseException] = []
    holder, partner = engine.connect(), engine.connect()
    holder.execute(sa.text("SELECT count(*) FROM result_keys"))  # attempt 1 gives up on it

    def deadlock_next() -> None:
        # Between the attempts: result_keys free, tasks held by a session that will ask
        # for result_keys once the migration holds it and waits for tasks.
        holder.rollback()
        partner.execute(sa.text("SET deadlock_timeout = '60s'"))
        partner.execute(sa.text("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"))

    def migrate() -> None:
        try:
            # 2 s: past the migration's own deadlock_timeout (1 s), so its check finds the
            # deadlock of the second attempt before its lock timeout.
            upgrade(pg_url, lock_timeout_seconds=2.0, attempts=2, pause_seconds=0)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    caplog.set_level(logging.WARNING, "shadowplane.migrate")
    hook = _OnRetry(deadlock_next)
    logging.getLogger("shadowplane.migrate").addHandler(hook)
    worker = threading.Thread(target=migrate, daemon=True)
    try:
        with engine.connect() as watch:
            worker.start()
            _wait_for_lock_wait(watch, "tasks")  # the second attempt, after the hook
        partner.execute(sa.text("SELECT count(*) FROM result_keys"))
        partner.rollback()
        worker.join(HANG)
    finally:
        logging.getLogger("shadowplane.migrate").removeHandler(hook)
        holder.close()
        partner.close()
        engine.dispose()
    assert not worker.is_alive() and hook.fired == 1 and not hook.failed, hook.failed
    warned = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert len(warned) == 1 and "waited 2 s for a lock" in warned[0], warned
    assert len(raised) == 1 and isinstance(raised[0], MigrationLocked), raised
    # The second attempt was a deadlock indeed.
    assert getattr(getattr(raised[0].__cause__, "orig", None), "sqlstate", None) == "40P01"
    message = str(raised[0])
    assert "deadlock with another session, 2 times" not in message, message


@pytest.mark.fresh_db
def test_a_serialization_failure_is_not_called_a_deadlock(pg_url: str) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    _refuse_ddl(pg_url, "could not serialize access due to concurrent update", sqlstate="40001")
    get_engine(pg_url).dispose()
    with pytest.raises(MigrationLocked) as raised:
        upgrade(pg_url, lock_timeout_seconds=HANG, attempts=1)
    assert getattr(getattr(raised.value.__cause__, "orig", None), "sqlstate", None) == "40001"
    assert "deadlock" not in str(raised.value), str(raised.value)


# What held.


@pytest.mark.fresh_db
def test_a_deadlock_on_the_last_attempt_says_so_and_changes_nothing(pg_url: str) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    engine = sa.create_engine(pg_url, poolclass=NullPool)
    raised: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade(pg_url, lock_timeout_seconds=HANG, attempts=1)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    worker = threading.Thread(target=migrate, daemon=True)
    with engine.connect() as partner, engine.connect() as watch:
        partner.execute(sa.text("SET deadlock_timeout = '60s'"))
        partner.execute(sa.text("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"))
        worker.start()
        _wait_for_lock_wait(watch, "tasks")
        partner.execute(sa.text("SELECT count(*) FROM result_keys"))
        partner.rollback()
    engine.dispose()
    worker.join(HANG)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], MigrationLocked), raised
    message = str(raised[0])
    assert "one side of a deadlock" in message and "nothing was changed" in message, message
    assert f"waiting on: ALTER TABLE result_keys DROP CONSTRAINT {FK}" in message, message
    assert _revision(pg_url) == {BEFORE}
    with get_engine(pg_url).connect() as conn:
        assert FK in {f["name"] for f in sa.inspect(conn).get_foreign_keys("result_keys")}


@pytest.mark.fresh_db
def test_a_migration_whose_connection_is_terminated_names_the_statement(
    pg_url: str, tmp_path: Path
) -> None:
    """pg_terminate_backend on the migration while it waits (or a server shut down under it):
    a connection error that carries a statement is one line, PostgreSQL's words and the
    statement, the URL's password masked, nothing changed."""
    migrate_to(pg_url, BEFORE, down=True)
    get_engine(pg_url).dispose()
    code = "from controlplane.cli import app\napp(args=['migrate'], prog_name='shadowplane')\n"
    env = {
        **os.environ,
        "SHADOWPLANE_DATABASE_URL": _with_password(pg_url),
        "SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS": str(HANG),
    }
    engine = sa.create_engine(pg_url, poolclass=NullPool)
    with reading_result_keys(pg_url), engine.connect() as watch:
        command = start_python(code, env, tmp_path)
        _wait_for_lock_wait(watch, "result_keys")
        ended = watch.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                "AND query LIKE 'ALTER TABLE result_keys%'"
            )
        ).scalar_one()
        assert ended == 1
        exit_code = command.wait(HANG)
    engine.dispose()
    done = output(tmp_path)
    assert exit_code == 1, done.stderr[-2000:]
    line = _one_line(done)
    assert line.startswith("error: cannot migrate postgresql+psycopg://postgres:***@"), line
    assert "terminating connection due to administrator command" in line, line
    assert f"(running: ALTER TABLE result_keys DROP CONSTRAINT {FK})" in line, line
    assert SECRET not in done.stdout + done.stderr
    assert _revision(pg_url) == {BEFORE}


@pytest.mark.fresh_db
def test_a_blank_or_many_line_error_of_a_statement_is_one_line(pg_url: str, tmp_path: Path) -> None:
    """An operator's event trigger refuses the migration's DDL. Blank words: still one line
    with the statement (what it shows as PostgreSQL's words is psycopg's next line, the
    CONTEXT). Words on two lines with a DETAIL: the first line only, so a DETAIL (which may
    quote a row's values) is not printed; the URL's password masked in both."""
    migrate_to(pg_url, BEFORE, down=True)
    _refuse_ddl(pg_url, " ")
    get_engine(pg_url).dispose()
    url = _with_password(pg_url)
    done = _cli(["migrate"], url, tmp_path / "blank")
    assert done.returncode == 1, done.stderr[-2000:]
    line = _one_line(done)
    assert line.startswith("error: cannot migrate ") and "SHADOWPLANE_DATABASE_URL" not in line
    assert f"(running: ALTER TABLE result_keys DROP CONSTRAINT {FK})" in line, line
    assert SECRET not in done.stdout + done.stderr
    with get_engine(pg_url).begin() as conn:
        conn.execute(
            sa.text("UPDATE hostile_refusal SET message = :m, detail = :d"),
            {"m": "schema changes wait for the window\nask the DBA on call", "d": f"key {SECRET}"},
        )
    get_engine(pg_url).dispose()
    done = _cli(["migrate"], url, tmp_path / "lines")
    assert done.returncode == 1, done.stderr[-2000:]
    line = _one_line(done)
    assert ": schema changes wait for the window (running: ALTER TABLE result_keys" in line, line
    assert "DBA" not in line and SECRET not in done.stdout + done.stderr, line
    assert _revision(pg_url) == {BEFORE}


def test_sqlite_migrates_and_a_database_not_reached_is_blamed_on_the_url(tmp_path: Path) -> None:
    """The demo's default, SQLite: `shadowplane migrate` brings a new file to head. A SQLite
    file that cannot be opened, and a PostgreSQL that refuses the connection, are the URL's
    one line, its password masked."""
    database = tmp_path / "sp.db"
    done = _cli(["migrate"], f"sqlite:///{database}", tmp_path / "sqlite")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == f"migrated sqlite:///{database}"
    with sa.create_engine(f"sqlite:///{database}").connect() as conn:
        assert current_revisions(conn) == head_revisions()
    missing = f"sqlite:///{tmp_path}/no/such/folder/sp.db"
    done = _cli(["migrate"], missing, tmp_path / "missing")
    assert done.returncode == 1
    line = _one_line(done)
    assert line == (
        f"error: SHADOWPLANE_DATABASE_URL: cannot migrate {missing}: unable to open database file"
    ), line
    refused = f"postgresql+psycopg://shadowplane:{SECRET}@127.0.0.1:{free_port()}/shadowplane"
    done = _cli(["migrate"], refused, tmp_path / "refused")
    assert done.returncode == 1
    line = _one_line(done)
    assert line.startswith(
        "error: SHADOWPLANE_DATABASE_URL: cannot migrate postgresql+psycopg://shadowplane:***@"
    ), line
    assert "Connection refused" in line and SECRET not in done.stdout + done.stderr, line

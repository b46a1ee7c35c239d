"""`shadowplane migrate` while a session holds a lock a migration needs (PostgreSQL): each
lock is waited for at most SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS, not for good (an ALTER
waiting behind a long query holds every later query on its table in line: ingest's, the
flags'). The migrations run in one transaction, so one that gives up changes nothing; it is
tried again, then the command names the statement that waited and exits non-zero."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from controlplane.db import get_engine
from controlplane.migrate import MigrationLocked, current_revisions, head_revisions, upgrade
from tests.db.migrating import migrate_to
from tests.liveapi import run_python

# The revision before the migration that drops result_keys' foreign key (an ALTER TABLE on
# result_keys); upgrade() goes on from it to the head.
BEFORE = "9e4a6c2d8b13"
# Bound on a migration that should give up within a second: past it, it waited for good.
HANG = 60.0


@contextmanager
def reading_result_keys(url: str) -> Iterator[None]:
    """A session in a transaction that has read result_keys (as a long query or an idle
    transaction would): it holds ACCESS SHARE on the table until it ends."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT count(*) FROM result_keys"))
        try:
            yield
        finally:
            conn.rollback()
    engine.dispose()


def command_behind_a_lock(url: str, tmp_path: Path, *args: str) -> Any:
    """`shadowplane ARGS` as an operator runs it (its pauses between attempts taken out)
    on the database migrated down to BEFORE, while a session reads result_keys."""
    migrate_to(url, BEFORE, down=True)
    env = {
        **os.environ,
        "SHADOWPLANE_DATABASE_URL": url,
        "SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS": "0.2",
    }
    code = (
        "import controlplane.migrate as m\n"
        "m.LOCK_PAUSE_SECONDS = 0\n"
        "from controlplane.cli import app\n"
        f"app(args={list(args)!r}, prog_name='shadowplane')\n"
    )
    with reading_result_keys(url):
        return run_python(code, env, tmp_path, timeout=HANG)


def _revision(url: str) -> set[str]:
    get_engine(url).dispose()
    with get_engine(url).connect() as conn:
        return current_revisions(conn)


def _foreign_keys(url: str) -> list[str]:
    with get_engine(url).connect() as conn:
        return [fk["referred_table"] for fk in sa.inspect(conn).get_foreign_keys("result_keys")]


@pytest.mark.fresh_db  # migrates down and up
def test_a_lock_held_past_the_timeout_changes_nothing_and_names_what_waited(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    assert _foreign_keys(pg_url) == ["tasks"]
    raised: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade(pg_url, lock_timeout_seconds=0.2, attempts=2, pause_seconds=0)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    caplog.set_level(logging.WARNING, "shadowplane.migrate")
    with reading_result_keys(pg_url):
        worker = threading.Thread(target=migrate, daemon=True)
        worker.start()
        worker.join(HANG)
        assert not worker.is_alive(), f"the migration still waits on the lock after {HANG} s"
    assert len(raised) == 1 and isinstance(raised[0], MigrationLocked), raised
    message = str(raised[0])
    assert "result_keys" in message and "nothing was changed" in message, message
    assert "2 times" in message and "pg_stat_activity" in message, message
    # The first attempt was given up with a warning, the second raised.
    warned = [r for r in caplog.records if "trying again" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    # Nothing changed: the revision, and the foreign key the migration drops.
    assert _revision(pg_url) == {BEFORE}
    assert _foreign_keys(pg_url) == ["tasks"]
    # Once the session is gone, the same migration goes through.
    upgrade(pg_url, lock_timeout_seconds=0.2, attempts=1)
    assert _revision(pg_url) == head_revisions()
    assert _foreign_keys(pg_url) == []


@pytest.mark.fresh_db
def test_a_lock_released_between_attempts_lets_the_migration_through(pg_url: str) -> None:
    migrate_to(pg_url, BEFORE, down=True)
    held = reading_result_keys(pg_url)
    held.__enter__()
    released = threading.Timer(1.0, held.__exit__, args=(None, None, None))
    released.start()
    try:
        # Three attempts of 0.2 s each, a second apart: the session ends during the pause.
        upgrade(pg_url, lock_timeout_seconds=0.2, attempts=3, pause_seconds=1.5)
    finally:
        released.join()
    assert _revision(pg_url) == head_revisions()


@pytest.mark.fresh_db
def test_the_command_says_why_it_stopped_and_exits_non_zero(pg_url: str, tmp_path: Path) -> None:
    done = command_behind_a_lock(pg_url, tmp_path, "migrate")
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    *tries, err = done.stderr.strip().splitlines()
    assert err.startswith("error: cannot migrate "), done.stderr
    # Each attempt given up before the last said so, and that it tries again.
    assert len(tries) == 2 and all("trying again" in t for t in tries), tries
    assert "0.2 s, 3 times" in err and "result_keys" in err and "nothing was changed" in err
    assert "SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS" in err, err
    assert "migrated" not in done.stdout
    assert _revision(pg_url) == {BEFORE}


@pytest.mark.fresh_db
def test_a_migration_ended_by_a_deadlock_is_tried_again(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The migration holds result_keys and waits for tasks, which another session holds
    and then asks for result_keys: PostgreSQL ends one side of the deadlock. That session
    never checks first (its deadlock_timeout is long), so the migration is the side ended;
    its transaction changed nothing, and it runs again once the other session is done."""
    migrate_to(pg_url, BEFORE, down=True)
    caplog.set_level(logging.WARNING, "shadowplane.migrate")
    raised: list[BaseException] = []

    def migrate() -> None:
        try:
            upgrade(pg_url, lock_timeout_seconds=HANG, attempts=2, pause_seconds=0.5)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    waiting_on_tasks = sa.text(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'tasks'::regclass"
    )
    worker = threading.Thread(target=migrate, daemon=True)
    with engine.connect() as conn, engine.connect() as watch:
        conn.execute(sa.text("SET deadlock_timeout = '60s'"))
        conn.execute(sa.text("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"))
        worker.start()
        for _ in range(int(HANG / 0.02)):
            if watch.execute(waiting_on_tasks).scalar_one():
                break
            watch.rollback()
            time.sleep(0.02)
        else:
            pytest.fail("the migration never waited for tasks")
        # Waits for the migration's lock on result_keys until PostgreSQL ends the migration.
        conn.execute(sa.text("SELECT count(*) FROM result_keys"))
        conn.rollback()
    engine.dispose()
    worker.join(HANG)
    assert not worker.is_alive(), f"the migration still runs after {HANG} s"
    assert raised == [], raised
    warned = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert len(warned) == 1 and "deadlocked with another session" in warned[0], warned
    assert _revision(pg_url) == head_revisions()
    assert _foreign_keys(pg_url) == []


@pytest.mark.fresh_db
def test_a_statement_that_fails_is_named_and_not_blamed_on_the_url(
    pg_url: str, tmp_path: Path
) -> None:
    """A migration's statement that fails (here the foreign key it drops is gone already)
    is named with PostgreSQL's words; the database URL, which was reached, is not blamed."""
    migrate_to(pg_url, BEFORE, down=True)
    [fk] = [
        f["name"]
        for f in sa.inspect(get_engine(pg_url)).get_foreign_keys("result_keys")
        if f["referred_table"] == "tasks"
    ]
    with get_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f'ALTER TABLE result_keys DROP CONSTRAINT "{fk}"'))
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": pg_url}
    code = "from controlplane.cli import app\napp(args=['migrate'], prog_name='shadowplane')\n"
    done = run_python(code, env, tmp_path, timeout=HANG)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    [err] = done.stderr.strip().splitlines()
    assert err.startswith("error: cannot migrate "), err
    assert "SHADOWPLANE_DATABASE_URL" not in err, err
    assert fk in err and "does not exist" in err and "(running: ALTER TABLE" in err, err
    assert _revision(pg_url) == {BEFORE}


@pytest.mark.fresh_db
def test_the_demo_says_in_one_line_why_it_cannot_migrate(pg_url: str, tmp_path: Path) -> None:
    """`shadowplane demo` on a database whose lock a session holds: the migrate command's
    one line, not a traceback."""
    done = command_behind_a_lock(pg_url, tmp_path, "demo", "--once")
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    err = done.stderr.strip().splitlines()[-1]
    assert err.startswith("error: cannot migrate ") and "result_keys" in err, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert _revision(pg_url) == {BEFORE}

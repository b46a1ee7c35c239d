"""Run Alembic from code: `shadowplane migrate`, the tests and the demo share this."""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from controlplane.db import TRANSIENT_SQLSTATES, make_engine
from controlplane.models.base import utcnow
from controlplane.models.partitions import keep_partitions
from controlplane.settings import get_settings

log = logging.getLogger("shadowplane.migrate")
# The Alembic migrations ship inside the package (a wheel holds them), beside this module.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(database_url: str) -> Config:
    """Alembic's configuration in code: no alembic.ini is needed where Shadowplane is
    installed (the repository's alembic.ini is for `alembic revision` while developing)."""
    if not (MIGRATIONS / "env.py").exists():
        raise RuntimeError(
            f"no Alembic migrations under {MIGRATIONS}: this installation of Shadowplane is "
            "incomplete (reinstall it: pip install --force-reinstall shadowplane)"
        )
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    # ConfigParser interpolation: a literal % in a password must be doubled.
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


# PostgreSQL's SQLSTATE for a lock not granted within lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"
# A migration that gave up on a lock tries again this many times in all, this far apart:
# what held it is usually a query or a transaction that ends within seconds.
LOCK_ATTEMPTS = 3
LOCK_PAUSE_SECONDS = 5.0
# Why an attempt was given up (it changed nothing, and can run again), by SQLSTATE: as the
# warning says it, and as the final error counts it.
GIVEN_UP = {
    LOCK_NOT_AVAILABLE: ("waited {waited:g} s for a lock", "a lock held past {waited:g} s"),
    "40P01": ("deadlocked with another session", "a deadlock with another session"),
    "40001": ("was ended by a serialization failure", "a serialization failure"),
}
assert set(GIVEN_UP) == {LOCK_NOT_AVAILABLE, *TRANSIENT_SQLSTATES}


class MigrationLocked(RuntimeError):
    """A migration gave up on a lock another session held (it waited past the timeout, or
    PostgreSQL ended it as one side of a deadlock); nothing was changed."""


def upgrade(
    database_url: str,
    revision: str = "head",
    *,
    lock_timeout_seconds: float | None = None,
    attempts: int | None = None,
    pause_seconds: float | None = None,
) -> None:
    """Migrate, then create the day partitions a result may arrive for (PostgreSQL).

    On PostgreSQL each lock is waited for at most `lock_timeout_seconds` (default
    SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS): an ALTER waiting behind a long query would
    hold every later query on its table in line, ingest's and the flags' included. The
    migrations run in one transaction, so one that gives up changes nothing; it is tried
    `attempts` times (LOCK_ATTEMPTS), then MigrationLocked names the statement that waited.
    A migration PostgreSQL rolls back as one side of a deadlock (or for a serialization
    failure) is tried again the same way. Two migrations at once run one after the other
    (migrations/env.py), the second finding the schema migrated."""
    attempts = LOCK_ATTEMPTS if attempts is None else attempts
    if attempts < 1:
        raise ValueError(f"attempts: must be at least 1 (one try, no retry), got {attempts!r}")
    pause_seconds = LOCK_PAUSE_SECONDS if pause_seconds is None else pause_seconds
    waited = (
        get_settings().migrate_lock_timeout_seconds
        if lock_timeout_seconds is None
        else lock_timeout_seconds
    )
    cfg = alembic_config(database_url)
    cfg.attributes["lock_timeout_seconds"] = waited
    given_up: list[str] = []  # each attempt's SQLSTATE
    for attempt in range(1, attempts + 1):
        try:
            command.upgrade(cfg, revision)
            break
        except OperationalError as exc:
            state = getattr(exc.orig, "sqlstate", None)
            if state not in GIVEN_UP:
                raise
            given_up.append(state)
            statement = " ".join(str(exc.statement or "").split())[:160]
            if attempt == attempts:
                raise MigrationLocked(_given_up(given_up, waited, statement)) from exc
            log.warning(
                "migration %s (attempt %d of %d, on: %s); nothing was changed, trying again "
                "in %g s",
                GIVEN_UP[state][0].format(waited=waited),
                attempt,
                attempts,
                statement,
                pause_seconds,
            )
            time.sleep(pause_seconds)
    engine = make_engine(database_url)
    try:
        keep_partitions(engine, utcnow(), get_settings().max_backfill)
    except OperationalError as exc:  # a lock busy past its timeout: the beat makes them
        log.warning("day partitions not created now (the beat creates them): %s", exc)
    finally:
        engine.dispose()


def _given_up(states: list[str], waited: float, statement: str) -> str:
    """The error of a migration given up at every attempt (`states`, in order): what ended
    each, the statement the last was on, and what to do."""
    n = len(states)
    times = "once" if n == 1 else f"{n} times"
    if set(states) == {LOCK_NOT_AVAILABLE}:
        why = f"another session held a lock the migration needs past {waited:g} s, {times}"
    elif set(states) == {"40P01"}:
        why = f"PostgreSQL ended the migration as one side of a deadlock with another session, {times}"
    else:
        ends = ", then ".join(GIVEN_UP[s][1].format(waited=waited) for s in states)
        why = f"the migration was given up {times}: {ends}"
    wait = (
        " (SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS sets the wait)"
        if LOCK_NOT_AVAILABLE in states
        else ""
    )
    return (
        f"{why} (waiting on: {statement}); nothing was changed. Find the other session with "
        "SELECT pid, state, xact_start, query FROM pg_stat_activity WHERE xact_start IS NOT "
        f"NULL ORDER BY xact_start, then run `shadowplane migrate` again{wait}"
    )


def below(database_url: str, revision: str) -> bool:
    """Whether the database is past `revision` (one of this release's): reaching it is a
    downgrade. False when it is at it, before it, or never migrated."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    target = script.get_revision(revision)  # CommandError for a revision this release lacks
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            current = current_revisions(connection)
    finally:
        engine.dispose()
    if target is None or not current or current == {target.revision}:
        return False
    known = {rev.revision for rev in script.walk_revisions()}
    for head in sorted(current - known):
        # Migrated by a newer release: Alembic's own words, as `upgrade` would give them
        # (iterating from it raised a ResolutionError with a traceback).
        raise CommandError(f"Can't locate revision identified by '{head}'")
    return any(
        rev.revision == target.revision
        for head in current
        for rev in script.iterate_revisions(head, "base")
    )


def known(revision: str) -> bool:
    """Whether `revision` (an id, or `head`) is one of this release's migrations."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    try:
        return script.get_revision(revision) is not None
    except CommandError:  # an id it lacks, or a prefix of several
        return False


def downgrade(database_url: str, revision: str) -> None:
    """Take the schema down to `revision` (each migration's downgrade, in one transaction;
    each lock waited for at most SHADOWPLANE_MIGRATE_LOCK_TIMEOUT_SECONDS, not retried)."""
    cfg = alembic_config(database_url)
    cfg.attributes["lock_timeout_seconds"] = get_settings().migrate_lock_timeout_seconds
    command.downgrade(cfg, revision)


def check(database_url: str) -> None:
    """Raise when the models and the migrated schema differ (alembic check)."""
    command.check(alembic_config(database_url))


def head_revisions() -> set[str]:
    """The revisions `shadowplane migrate` would bring a database to."""
    return set(_heads())


@functools.cache
def _heads() -> frozenset[str]:
    # The migration files ship with the code: read once per process (every app start
    # asks, and reading them takes ~15 ms).
    return frozenset(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


def current_revisions(connection: Connection) -> set[str]:
    """The revisions a database is at (empty when it was never migrated)."""
    return set(MigrationContext.configure(connection).get_current_heads())

"""Run Alembic from code: `shadowplane migrate`, the tests and the demo share this."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from controlplane.db import make_engine
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


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate, then create the day partitions a result may arrive for (PostgreSQL)."""
    command.upgrade(alembic_config(database_url), revision)
    engine = make_engine(database_url)
    try:
        keep_partitions(engine, utcnow(), get_settings().max_backfill)
    except OperationalError as exc:  # a lock busy past its timeout: the beat makes them
        log.warning("day partitions not created now (the beat creates them): %s", exc)
    finally:
        engine.dispose()


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

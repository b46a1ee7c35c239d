"""Alembic environment: one code path for SQLite (batch mode) and PostgreSQL."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import Connection, text

from controlplane.db import make_engine
from controlplane.models import Base
from controlplane.models.base import UTCDateTime
from controlplane.models.partitions import is_partition
from controlplane.settings import get_settings

config = context.config
target_metadata = Base.metadata
# The advisory lock one migration holds for its transaction (any number, the same in every
# release: "shadow" in ASCII).
MIGRATE_LOCK = 0x736861646F77


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Render our UTCDateTime as a plain timezone-aware DateTime: migrations stay standalone."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """The day partitions of `results` and `payloads` are made at run time, not modelled."""
    return not (type_ == "table" and reflected and name is not None and is_partition(name))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_item,
        include_object=_include_object,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # For this transaction only: a lock the migration waits for holds every later
            # query on that table in line behind it, so it is waited for a while, not for
            # good (controlplane.migrate gives up, tries again, then says who held it).
            seconds = config.attributes.get("lock_timeout_seconds")
            if seconds is None:  # `alembic upgrade` run by hand, not controlplane.migrate
                seconds = get_settings().migrate_lock_timeout_seconds
            connection.execute(
                text("SELECT set_config('lock_timeout', :timeout, true)"),
                {"timeout": f"{max(1, round(seconds * 1000))}ms"},
            )
            # Two migrations at once (two replicas starting a deploy) run one after the
            # other: the second reads the schema's revision once the first has committed,
            # and finds nothing left to do (it would otherwise run the same ALTERs again).
            # Waited for like any lock, within the timeout above.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATE_LOCK})
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `shadowplane migrate`")
run_migrations_online()

"""Test databases made once per run and put back between tests.

`Rows` is what some tables hold, taken from one database and written into another (the
seed: a key per scope and the suite's two tasks, written once per run and copied into each
test's database in a few milliseconds). `WorkerDatabase` is a PostgreSQL database of one
pytest worker's own, migrated once and put back to its migrated state before each test by
one statement block; a test that changed its schema (a migration, a table, a trigger, a
constraint, a database setting) is noticed and the database is cloned again.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, create_engine, delete, func, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from controlplane.auth.service import hash_key
from controlplane.models import ApiKey, Base

TABLES = Base.metadata.sorted_tables  # parents before children


@dataclass
class Rows:
    """The rows of the tables a piece of set-up wrote, as it left them, and the time it ran."""

    taken_at: datetime
    tables: dict[str, list[dict[str, Any]]]
    sequences: dict[str, tuple[int, bool]] = field(default_factory=dict)

    @classmethod
    def take(cls, engine: Engine, tables: set[str], taken_at: datetime) -> Rows:
        with engine.connect() as conn:
            rows = {
                table.name: [dict(r._mapping) for r in conn.execute(select(table))]
                for table in TABLES
                if table.name in tables
            }
            sequences: dict[str, tuple[int, bool]] = {}
            if engine.dialect.name == "postgresql":
                # The sequences of these tables alone (`<table>_<column>_seq`): writing
                # them back must not rewind another table's.
                names = [
                    name
                    for name in conn.scalars(
                        text("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'")
                    )
                    if any(name.startswith(f"{table}_") for table in rows)
                ]
                for name in names:
                    value, called = conn.execute(
                        text(f'SELECT last_value, is_called FROM public."{name}"')
                    ).one()
                    sequences[name] = (int(value), bool(called))
        return cls(taken_at, rows, sequences)

    def write(self, engine: Engine, keys: dict[str, str]) -> None:
        """Replace the tables' rows by these, their times moved as if written now, and
        each key given the secret named in `keys` (by key name)."""
        shift = datetime.now(UTC) - self.taken_at
        with engine.begin() as conn:
            for table in reversed(TABLES):
                if table.name in self.tables:
                    conn.execute(delete(table))
            for table in TABLES:
                rows = [_moved(row, shift) for row in self.tables.get(table.name, ())]
                if table.name == ApiKey.__tablename__:
                    rows = [_with_secret(row, keys[row["name"]]) for row in rows]
                if rows:
                    conn.execute(insert(table), rows)
            for name, (value, called) in self.sequences.items():
                conn.execute(
                    text("SELECT setval(:name, :value, :called)"),
                    {"name": name, "value": value, "called": called},
                )

    def holds_only_base(self, engine: Engine, base: dict[str, int]) -> bool:
        """Whether each of these tables holds what a migrated database holds, as counted
        in `base`: nothing written since it was put back."""
        with engine.connect() as conn:
            for table in TABLES:
                if table.name in self.tables:
                    count = conn.scalar(select(func.count()).select_from(table))
                    if count != base.get(table.name, 0):
                        return False
        return True


def _moved(row: dict[str, Any], shift: timedelta) -> dict[str, Any]:
    return {k: _moved_value(v, shift) for k, v in row.items()}


# A time written as text (isoformat) inside a JSON document, such as a flag's updated_at.
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)")


def _moved_value(value: Any, shift: timedelta) -> Any:
    """`value` with every time in it (a datetime, or ISO text in JSON) moved by `shift`:
    the seed's rows read as if written when they are copied, and consistently so."""
    if isinstance(value, datetime):
        return value + shift
    if isinstance(value, str) and _ISO_TIME.fullmatch(value):
        moved = (datetime.fromisoformat(value.replace("Z", "+00:00")) + shift).isoformat()
        return moved.replace("+00:00", "Z") if value.endswith("Z") else moved
    if isinstance(value, dict):
        return {k: _moved_value(v, shift) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved_value(v, shift) for v in value]
    return value


def _with_secret(row: dict[str, Any], plaintext: str) -> dict[str, Any]:
    return {**row, "key_hash": hash_key(plaintext), "prefix": plaintext[:10]}


def table_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            table.name: int(conn.scalar(select(func.count()).select_from(table)) or 0)
            for table in TABLES
        }


# Every user table's rows deleted (foreign keys not checked meanwhile: the order does not
# matter) and every sequence restarted, in one round trip. A sequence is restarted by
# setval, as ALTER SEQUENCE ... RESTART would (its start value, not yet called), without
# the new file ALTER SEQUENCE gives each of them (most of the reset's time).
_EMPTY_ALL = """
DO $$
DECLARE r record;
BEGIN
  SET LOCAL session_replication_role = replica;
  FOR r IN SELECT c.relname FROM pg_class c
           WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
             AND NOT c.relispartition AND c.relname <> 'alembic_version'
  LOOP
    EXECUTE format('DELETE FROM public.%I', r.relname);
  END LOOP;
  PERFORM setval(c.oid, s.seqstart, false)
     FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
     WHERE c.relnamespace = 'public'::regnamespace;
END $$
"""

# The schema as names and types: relations, their columns, the alembic revision.
_SHAPE = """
SELECT string_agg(format('%s:%s:%s', c.relname, c.relkind, a.attname || '/' ||
                  a.atttypid::regtype::text), ',' ORDER BY c.relname, a.attnum)
FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                          AND NOT a.attisdropped
WHERE c.relnamespace = 'public'::regnamespace AND NOT c.relispartition
"""
_PARTITIONS = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relispartition
"""


# Beyond the relations: constraints, triggers, schemas, sequences' settings and settings
# made for the database (ALTER DATABASE ... SET), any of which a test could leave behind.
_MORE_SHAPE = """
SELECT concat_ws('|',
  (SELECT string_agg(k.conname || ':' || pg_get_constraintdef(k.oid), ',' ORDER BY k.conname)
   FROM pg_constraint k LEFT JOIN pg_class c ON c.oid = k.conrelid
   WHERE k.connamespace = 'public'::regnamespace AND NOT coalesce(c.relispartition, false)),
  (SELECT string_agg(t.tgname || ':' || c.relname, ',' ORDER BY t.tgname, c.relname)
   FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE NOT t.tgisinternal AND NOT c.relispartition),
  (SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace),
  (SELECT string_agg(format('%s:%s:%s:%s:%s', sequencename, increment_by, min_value,
                            max_value, cycle), ',' ORDER BY sequencename)
   FROM pg_sequences WHERE schemaname = 'public'),
  (SELECT string_agg(array_to_string(setconfig, ';'), ',') FROM pg_db_role_setting s
   JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = current_database()))
"""


def _fingerprint(engine: Engine) -> tuple[str, frozenset[str], tuple[str, ...]]:
    with engine.connect() as conn:
        described = f"{conn.scalar(text(_SHAPE))}#{conn.scalar(text(_MORE_SHAPE))}"
        shape = hashlib.sha256(described.encode()).hexdigest()
        partitions = frozenset(conn.scalars(text(_PARTITIONS)))
        revisions = tuple(sorted(conn.scalars(text("SELECT version_num FROM alembic_version"))))
    return shape, partitions, revisions


@dataclass
class WorkerDatabase:
    """One pytest worker's PostgreSQL database, cloned from the migrated template once and
    put back to that state before each test (`reset`)."""

    admin_url: str
    name: str
    template: str
    base: Rows | None = None
    shape: tuple[str, frozenset[str], tuple[str, ...]] | None = None
    base_counts: dict[str, int] = field(default_factory=dict)
    rebuilt: int = 0

    @property
    def url(self) -> str:
        return make_url(self.admin_url).set(database=self.name).render_as_string(False)

    def _admin(self) -> Engine:
        return create_engine(self.admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)

    def create(self) -> None:
        admin = self._admin()
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
                conn.execute(text(f'CREATE DATABASE "{self.name}" TEMPLATE "{self.template}"'))
        finally:
            admin.dispose()
        engine = self._engine()
        try:
            self.base_counts = table_counts(engine)
            every = {n for n, c in self.base_counts.items() if c}
            self.base = Rows.take(engine, every, datetime.now(UTC))
            self.shape = _fingerprint(engine)
        finally:
            engine.dispose()

    def _engine(self) -> Engine:
        # Its own, disposed of after each use: an engine of the process's cache (get_engine)
        # could be pushed out of it by the tests' URLs with a connection still open in its
        # pool. Pooled meanwhile, so that the steps of one reset share one connection.
        return create_engine(self.url)

    def drop(self) -> None:
        admin = self._admin()
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        finally:
            admin.dispose()

    def reset(self) -> None:
        """Back to the migrated template's state: rows, sequences, no other session."""
        engine = self._engine()
        try:
            self._reset(engine)
        finally:
            engine.dispose()

    def _reset(self, engine: Engine) -> None:
        with engine.connect() as conn:
            # A session the last test did not close (locks, LISTEN, settings of its own).
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            conn.commit()
        shape = _fingerprint(engine)
        assert self.shape is not None and self.base is not None
        if shape != self.shape:
            extra = shape[1] - self.shape[1]
            if (
                shape[0] == self.shape[0]
                and shape[2] == self.shape[2]
                and shape[1] >= self.shape[1]
            ):
                # Day partitions made by the last test (a tick, a migrate): dropped.
                with engine.begin() as conn:
                    for name in sorted(extra):
                        conn.execute(text(f'DROP TABLE IF EXISTS public."{name}" CASCADE'))
            if _fingerprint(engine) != self.shape:
                self.rebuilt += 1
                self.create()
                return
        with engine.begin() as conn:
            conn.execute(text(_EMPTY_ALL))
        self.base.write(engine, {})

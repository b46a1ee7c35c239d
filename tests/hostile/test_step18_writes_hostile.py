"""Hostile review of the lighter-ingest-writes migration (b4d1e7f3a2c9): `result_keys`
without its foreign key to `tasks`, a BRIN index on its `ts`, LZ4 for payload texts. Each
test pins one defect found by upgrading and downgrading an installation the way an operator
would, kept as its regression test once fixed."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from controlplane.db import get_engine
from tests.db.migrating import migrate_to

BEFORE = "9e4a6c2d8b13"
REVISION = "b4d1e7f3a2c9"
PAYLOAD_TEXTS = ("input", "edge_output", "cloud_output", "diff")

# What a server built without LZ4 answers to `SET COMPRESSION lz4` (feature_not_supported,
# "compression method lz4 not supported"), made by an event trigger on a server that has it.
NO_LZ4 = (
    "CREATE FUNCTION no_lz4() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF current_query() ILIKE '%SET COMPRESSION lz4%' THEN "
    "RAISE EXCEPTION 'compression method lz4 not supported' "
    "USING ERRCODE = 'feature_not_supported'; END IF; END $$",
    "CREATE EVENT TRIGGER no_lz4 ON ddl_command_start EXECUTE FUNCTION no_lz4()",
)


def _compression(url: str) -> set[str]:
    """The payload texts' compression methods on `payloads` and every partition ('' is the
    server's default_toast_compression)."""
    with get_engine(url).connect() as conn:
        return set(
            conn.execute(
                sa.text(
                    "SELECT a.attcompression::text FROM pg_attribute a "
                    "JOIN pg_class c ON c.oid = a.attrelid "
                    "WHERE (c.relname = 'payloads' OR c.relispartition "
                    "AND c.relname LIKE 'payloads_%') AND a.attname = ANY(:names)"
                ),
                {"names": list(PAYLOAD_TEXTS)},
            ).scalars()
        )


def test_sqlite_downgrade_with_a_key_of_a_deleted_task(sqlite_url: str) -> None:
    """Without the foreign key a task's deletion (by hand: `DELETE FROM tasks`) leaves its
    keys behind. The PostgreSQL way down deletes such keys before it puts the key back;
    on SQLite the rebuilt table's copy meets PRAGMA foreign_keys=ON and the downgrade
    stops with `FOREIGN KEY constraint failed`."""
    with get_engine(sqlite_url).begin() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM tasks WHERE id = 999")).scalar() == 0
        conn.execute(
            sa.text(
                "INSERT INTO result_keys (task_id, request_id, ts) "
                "VALUES (999, 'orphan', CURRENT_TIMESTAMP)"
            )
        )
    migrate_to(sqlite_url, BEFORE, down=True)
    with get_engine(sqlite_url).connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM result_keys")).scalar() == 0


@pytest.mark.integration
@pytest.mark.fresh_db  # migrates down and up
def test_a_server_without_lz4_is_told_so(
    pg_url: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """The migration's docstring: 'A server built without LZ4 keeps pglz (the migration says
    so and goes on)'. It goes on; what it says is a NOTICE no one reads."""
    migrate_to(pg_url, BEFORE, down=True)
    with get_engine(pg_url).begin() as conn:
        for statement in NO_LZ4:
            conn.execute(sa.text(statement))
    get_engine(pg_url).dispose()
    caplog.set_level(logging.DEBUG)
    migrate_to(pg_url, REVISION)  # it went on
    assert "l" not in _compression(pg_url)  # and kept pglz
    out, err = capfd.readouterr()
    told = caplog.text + out + err
    assert "keep their compression" in told, told[-2000:]


@pytest.mark.integration
@pytest.mark.fresh_db  # migrates down
def test_downgrade_puts_back_the_default_compression(pg_url: str) -> None:
    """Before b4d1e7f3a2c9 the payload texts had no compression of their own (''): they
    followed default_toast_compression, which an operator may have set to lz4 for the
    whole server. The way down sets pglz on every one, so such a server compresses new
    payloads with pglz after a downgrade where it used LZ4 before the upgrade."""
    migrate_to(pg_url, BEFORE, down=True)
    assert _compression(pg_url) == {""}

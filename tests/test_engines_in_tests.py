"""What tests/conftest.py does to the engines get_engine makes in the suite: engines of
different test URLs share one dialect object and one compiled-SQL cache per backend (each
keeping its own URL and pool), and a connection returned after its engine was disposed is
closed as it comes back, not left to the garbage collector (whose psycopg would warn in
whichever test it ran)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select, text

from controlplane.db import get_engine
from controlplane.models import ApiKey


def test_two_test_urls_share_compiled_sql_not_their_pools(tmp_path: Path) -> None:
    one, two = (get_engine(f"sqlite:///{tmp_path / name}") for name in ("one.db", "two.db"))
    try:
        for engine in (one, two):
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        assert one.dialect is two.dialect
        assert one._compiled_cache is two._compiled_cache
        assert one.pool is not two.pool and one.url != two.url
        statement = select(ApiKey.id).where(ApiKey.name == "x")
        with one.connect() as conn:
            conn.execute(text("CREATE TABLE api_keys (id INTEGER, name TEXT)"))
            conn.execute(statement)
        compiled = len(one._compiled_cache)  # type: ignore[arg-type]
        with two.connect() as conn:
            conn.execute(text("CREATE TABLE api_keys (id INTEGER, name TEXT)"))
            conn.execute(statement)
        assert len(two._compiled_cache) == compiled  # type: ignore[arg-type]
    finally:
        one.dispose()
        two.dispose()


def test_a_connection_returned_after_dispose_is_closed(pg_url: str) -> None:
    engine = get_engine(pg_url)
    conn = engine.connect()
    conn.execute(text("SELECT 1"))
    raw = conn.connection.dbapi_connection
    engine.dispose()  # as a test's teardown does, while an app's thread still holds one
    conn.close()
    assert raw is not None and raw.closed

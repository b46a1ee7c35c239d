"""Database errors never carry row values: both engines hide statement parameters."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from controlplane.db import make_engine

SECRET = "zhang.san@example.com-13800138000"


def test_a_failed_write_does_not_quote_its_values(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with pytest.raises(IntegrityError) as raised, engine.connect() as conn:
            conn.execute(text("CREATE TEMPORARY TABLE probe (id INTEGER PRIMARY KEY, value TEXT)"))
            # The key is not the secret (PostgreSQL's own message quotes a violated key).
            insert = text("INSERT INTO probe (id, value) VALUES (1, :value)")
            conn.execute(insert, {"value": SECRET})
            conn.execute(insert, {"value": SECRET})
    finally:
        engine.dispose()
    message = str(raised.value)
    assert SECRET not in message
    assert "SQL parameters hidden" in message

"""Hostile review of 52522a8 (tests/conftest.py shares one dialect per backend among the
engines make_engine makes in the suite).

conftest shared the dialect of the first engine of a backend as that engine's pool fired
`first_connect`, on the word that create_engine's own listener had initialised the dialect
by then. It had not: SQLAlchemy initialises the dialect in a `connect` listener, which the
pool fires after `first_connect`. Shared that early, when the first engine's first
connection failed inside the dialect's initialisation (a server lost between its handshake
and initialise's first query), every later engine of the backend in that worker reflected
with a dialect that had no server version, and reflection raised TypeError. An engine now
joins the shared dialect only once its own is initialised (a `connect` listener after
create_engine's); one whose initialisation failed joins none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError

import controlplane.db
from tests import conftest


def test_a_first_engine_that_fails_while_initialising_shares_no_uninitialised_dialect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process where no engine of the backend has connected yet (conftest's own state).
    monkeypatch.setattr(conftest, "_shared_dialects", {})
    make = conftest._sharing_compiled_sql(controlplane.db.make_engine.__wrapped__)  # type: ignore[attr-defined]
    first = make(f"sqlite:///{tmp_path / 'first.db'}")
    lost: list[int] = []
    real = first.dialect._get_server_version_info

    def once(connection: Any) -> Any:
        lost.append(1)
        if len(lost) == 1:  # the first connection is lost inside initialise
            raise OperationalError("SELECT version()", {}, Exception("server closed"))
        return real(connection)

    monkeypatch.setattr(first.dialect, "_get_server_version_info", once)
    with pytest.raises(OperationalError):
        first.connect().close()
    second = make(f"sqlite:///{tmp_path / 'second.db'}")
    try:
        with second.begin() as conn:
            conn.execute(text("CREATE TABLE t (id INTEGER, name TEXT)"))
        assert [c["name"] for c in inspect(second).get_columns("t")] == ["id", "name"]
    finally:
        first.dispose()
        second.dispose()

"""One owner per transaction, retried from the start when PostgreSQL rolls it back for a
transient conflict (deadlock, serialization failure)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.db import get_engine, in_transaction, is_transient
from controlplane.migrate import upgrade
from controlplane.models import AuditEntry


@pytest.fixture
def engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'tx.db'}"
    upgrade(url)
    yield get_engine(url)
    get_engine(url).dispose()


def test_a_deadlock_is_retried_and_its_work_written_once(engine) -> None:  # type: ignore[no-untyped-def]
    attempts = []

    def work(session: Session) -> int:
        attempts.append(1)
        session.add(AuditEntry(actor="t", action="a", task=None, details={}))
        session.flush()
        if len(attempts) == 1:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return len(attempts)

    assert in_transaction(engine, work) == 2
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(AuditEntry)) == 1


def test_other_errors_and_exhausted_retries_propagate(engine) -> None:  # type: ignore[no-untyped-def]
    def always_deadlocked(session: Session) -> None:
        raise psycopg.errors.DeadlockDetected("deadlock detected")

    with pytest.raises(psycopg.errors.DeadlockDetected):
        in_transaction(engine, always_deadlocked, attempts=3)
    calls = []

    def broken(session: Session) -> None:
        calls.append(1)
        raise ValueError("not transient")

    with pytest.raises(ValueError):
        in_transaction(engine, broken)
    assert calls == [1]


def test_transient_states() -> None:
    assert is_transient(psycopg.errors.DeadlockDetected())
    assert is_transient(psycopg.errors.SerializationFailure())
    assert not is_transient(psycopg.errors.UniqueViolation())
    assert not is_transient(ValueError())

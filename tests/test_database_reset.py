"""What one test writes in its worker's PostgreSQL database is gone for the next test on
that worker: the first test writes keys, tasks, results and a day partition; the second,
run right after it on the same worker, finds none of them, the migrated rows back and the
same ids handed out again.

conftest.py hands this module to one worker first. Where pytest-xdist still gave the two
tests to two workers (run on their own, two tests make two parts), the second writes the
same itself and puts the database back as the fixture does between tests, then checks.
A change of the schema (a trigger, a constraint, a setting...) gets the database cloned
again from the template instead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from controlplane.db import get_engine, session_scope
from controlplane.keys.service import create_key
from controlplane.models import ApiKey, Result, Task
from controlplane.models.partitions import keep_partitions
from tests.conftest import make_api, make_result
from tests.dbstate import WorkerDatabase, table_counts

# The worker database the first test wrote in, when it ran in this process.
LEFT: dict[str, str] = {}


def _write(url: str) -> None:
    for api in make_api(url):
        results = [make_result(request_id=f"leak-{i}") for i in range(5)]
        assert api.post_results({"results": results}).json()["accepted"] == 5
        with session_scope(api.engine) as session:
            key, _ = create_key(session, name="left-behind", scopes=["read"], actor="test")
            assert key.id > 1
        keep_partitions(api.engine, datetime(2031, 1, 1, tzinfo=UTC), timedelta(days=1))
        with api.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(Result)) == 5
            assert conn.scalar(select(func.count()).select_from(Task)) == 2
            assert "results_p20310101" in _partitions(api.engine)


def _partitions(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(text("SELECT relname FROM pg_class WHERE relispartition")))


def test_a_test_writes_keys_tasks_results_and_a_partition(pg_url: str) -> None:
    _write(pg_url)
    LEFT["database"] = str(make_url(pg_url).database)


def test_the_next_test_on_the_worker_finds_none_of_it(
    pg_url: str, pg_worker_db: WorkerDatabase
) -> None:
    if LEFT.get("database") != make_url(pg_url).database:
        _write(pg_url)
        pg_worker_db.reset()
    engine = get_engine(pg_url)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Result)) == 0
        assert conn.scalar(select(func.count()).select_from(ApiKey)) == 0
        assert conn.scalar(select(func.count()).select_from(Task)) == 0
    assert "results_p20310101" not in _partitions(engine)
    # Every table holds what the migrated template holds (the flag state's row included).
    assert table_counts(engine) == pg_worker_db.base_counts
    with session_scope(engine) as session:
        key, _ = create_key(session, name="left-behind", scopes=["read"], actor="test")
        # Sequences restarted: the first key of an emptied database is 1, as in a new one.
        assert key.id == 1
    for api in make_api(pg_url):  # the seed goes in again on top of the emptied tables
        with api.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(Task)) == 2
        assert api.client.get("/v1/tasks", headers=api.headers("read")).status_code == 200


# Changes of the schema a test could leave behind, each with a query that finds it.
LEFT_BEHIND = {
    "a database setting": (
        "ALTER DATABASE {db} SET timezone = 'Pacific/Kiritimati'",
        "SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d "
        "ON d.oid = s.setdatabase WHERE d.datname = current_database()",
    ),
    "a trigger": (
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'left by an earlier test'; END $$; "
        "CREATE TRIGGER refuse BEFORE INSERT ON api_keys FOR EACH ROW EXECUTE FUNCTION refuse()",
        "SELECT count(*) FROM pg_trigger WHERE tgname = 'refuse'",
    ),
    "a constraint": (
        "ALTER TABLE api_keys ADD CONSTRAINT short_names CHECK (length(name) < 3) NOT VALID",
        "SELECT count(*) FROM pg_constraint WHERE conname = 'short_names'",
    ),
    "a sequence's step": (
        "ALTER SEQUENCE api_keys_id_seq INCREMENT BY 1000",
        "SELECT count(*) FROM pg_sequences WHERE sequencename = 'api_keys_id_seq' "
        "AND increment_by = 1000",
    ),
    "a schema": (
        "CREATE SCHEMA leak; CREATE TABLE leak.rows (x int)",
        "SELECT count(*) FROM pg_namespace WHERE nspname = 'leak'",
    ),
}


@pytest.mark.parametrize("change", sorted(LEFT_BEHIND))
def test_a_schema_change_left_behind_is_not_handed_to_the_next_test(
    pg_url: str, pg_worker_db: WorkerDatabase, change: str
) -> None:
    statement, finds = LEFT_BEHIND[change]
    engine = create_engine(pg_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement.format(db=f'"{make_url(pg_url).database}"')))
        with engine.connect() as conn:
            assert conn.scalar(text(finds)) == 1
        rebuilt = pg_worker_db.rebuilt
        pg_worker_db.reset()  # what the fixture does before the next test
        assert pg_worker_db.rebuilt == rebuilt + 1  # noticed: cloned again from the template
        with engine.connect() as conn:
            assert conn.scalar(text(finds)) == 0
    finally:
        engine.dispose()

"""What one test writes in its worker's PostgreSQL database is gone for the next test on
that worker: the first test writes a key, a task, results and a day partition; the second,
run right after it on the same worker, reads none of them and gets the same ids again.

conftest.py schedules this module first, so pytest-xdist never hands the second test to
another worker; the second test fails, rather than passes unchecked, if the first did not
run just before it in this process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

from controlplane.db import get_engine, session_scope
from controlplane.keys.service import create_key
from controlplane.models import ApiKey, Result, Task
from controlplane.models.partitions import keep_partitions
from tests.conftest import make_api, make_result

# What the first test left, for the second to look for: the worker's database and the ids.
LEFT: dict[str, object] = {}


def test_a_test_writes_keys_tasks_results_and_a_partition(pg_url: str) -> None:
    LEFT["url"] = pg_url
    for api in make_api(pg_url):
        results = [make_result(request_id=f"leak-{i}") for i in range(5)]
        assert api.post_results({"results": results}).json()["accepted"] == 5
        with session_scope(api.engine) as session:
            key, _ = create_key(session, name="left-behind", scopes=["read"], actor="test")
            key_id = key.id
        keep_partitions(api.engine, datetime(2031, 1, 1, tzinfo=UTC), timedelta(days=1))
        with api.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(Result)) == 5
            tasks = conn.scalar(select(func.count()).select_from(Task))
            partitions = set(
                conn.scalars(text("SELECT relname FROM pg_class WHERE relispartition"))
            )
    assert tasks == 2 and "results_p20310101" in partitions
    LEFT.update(key_id=key_id, partitions=partitions)


def test_the_next_test_on_the_worker_finds_none_of_it(pg_url: str) -> None:
    assert LEFT, "the writing test did not run before this one in this process: run the module"
    same = make_url(str(LEFT["url"])).database == make_url(pg_url).database
    assert same, "not the same worker database: nothing to check"
    engine = get_engine(pg_url)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Result)) == 0
        assert conn.scalar(select(func.count()).select_from(ApiKey)) == 0
        assert conn.scalar(select(func.count()).select_from(Task)) == 0
        partitions = set(conn.scalars(text("SELECT relname FROM pg_class WHERE relispartition")))
        assert "results_p20310101" not in partitions
    with session_scope(engine) as session:
        key, _ = create_key(session, name="left-behind", scopes=["read"], actor="test")
        # Sequences restarted: the first key of an emptied database is 1, as in a new one.
        assert key.id == 1 and LEFT["key_id"] != 1
    for api in make_api(pg_url):  # the seed goes in again on top of the emptied tables
        with api.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(Task)) == 2
        assert api.client.get("/v1/tasks", headers=api.headers("read")).status_code == 200

"""The migration 6a2f9c1e4b70: `results` loses its foreign key to `tasks` (a check per
stored result, about 2.7 µs of PostgreSQL's CPU each, that guarded nothing: ingest writes
results only for tasks it has just read, and no task is ever deleted). The way down puts
the key back, after deleting the results of tasks that no longer exist; results stored
before the migration stay, and ingest stores and reads them back after it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from controlplane.api import create_app
from controlplane.db import get_engine
from controlplane.settings import Settings
from tests.conftest import Api, make_api, make_result
from tests.db.migrating import migrate_to

BEFORE = "df084010e878"
REVISION = "6a2f9c1e4b70"


def _foreign_keys(url: str) -> list[str]:
    with get_engine(url).connect() as conn:
        return [fk["referred_table"] for fk in sa.inspect(conn).get_foreign_keys("results")]


def _results(url: str) -> list[tuple[str, str]]:
    with get_engine(url).connect() as conn:
        return [
            (task, request_id)
            for task, request_id in conn.execute(
                sa.text(
                    "SELECT t.name, r.request_id FROM results r JOIN tasks t ON t.id = r.task_id "
                    "ORDER BY r.request_id"
                )
            )
        ]


def _served(url: str, keys: dict[str, str]) -> Iterator[Api]:
    """The API on the database as it is now, with keys made before."""
    settings = Settings(database_url=url, tick_seconds=0, max_backfill=timedelta(days=36500))
    with TestClient(create_app(settings)) as client:
        yield Api(client=client, url=url, keys=keys)


@pytest.mark.fresh_db  # migrates down and up
def test_results_lose_the_foreign_key_and_keep_their_rows(db_url: str) -> None:
    assert _foreign_keys(db_url) == []
    for api in make_api(db_url):
        assert api.post_results(make_result(request_id="before")).json()["accepted"] == 1
        keys = api.keys

    migrate_to(db_url, BEFORE, down=True)
    assert _foreign_keys(db_url) == ["tasks"]
    assert _results(db_url) == [("ticket_classify", "before")]

    migrate_to(db_url, REVISION)
    assert _foreign_keys(db_url) == []
    for api in _served(db_url, keys):
        answer = api.post_results(make_result(request_id="after")).json()
        assert answer["accepted"] == 1, answer
        read = api.client.get("/v1/results/ticket_classify/before", headers=api.headers("read"))
        assert read.status_code == 200, read.text
    assert _results(db_url) == [("ticket_classify", "after"), ("ticket_classify", "before")]

"""The lighter-ingest-writes migration (b4d1e7f3a2c9): `result_keys` loses its foreign key
to `tasks` (and on PostgreSQL its `ts` index becomes a BRIN index), payload texts are
compressed with LZ4 on PostgreSQL, and the way down puts every piece back. Keys claimed
before it stay claimed: a resend is still a duplicate."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from controlplane.db import get_engine
from controlplane.rollout.configs import apply_tasks
from tests.conftest import TICKET_TASK, Api, make_result
from tests.db.migrating import migrate_to

BEFORE = "9e4a6c2d8b13"
REVISION = "b4d1e7f3a2c9"
PAYLOAD_TEXTS = ("input", "edge_output", "cloud_output", "diff")


def _foreign_keys(url: str) -> list[str]:
    with get_engine(url).connect() as conn:
        return [fk["referred_table"] for fk in sa.inspect(conn).get_foreign_keys("result_keys")]


def _ts_index_method(url: str) -> str | None:
    with get_engine(url).connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT am.amname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_am am ON am.oid = c.relam WHERE c.relname = 'ix_result_keys_ts'"
            )
        ).scalar_one_or_none()


def _compression(url: str) -> dict[str, str]:
    """Each payload text column's compression, on the parent and on every partition."""
    with get_engine(url).connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT a.attname, a.attcompression FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE (c.relname = 'payloads' OR c.relispartition AND c.relname LIKE 'payloads_%') "
                "AND a.attname = ANY(:names)"
            ),
            {"names": list(PAYLOAD_TEXTS)},
        ).all()
    found: dict[str, set[str]] = {}
    for name, method in rows:
        found.setdefault(name, set()).add(method or "default")
    return {name: "+".join(sorted(methods)) for name, methods in found.items()}


@pytest.mark.fresh_db  # migrates down and up
def test_keys_lose_their_foreign_key_and_keep_their_claims(db_url: str) -> None:
    postgres = db_url.startswith("postgresql")
    assert _foreign_keys(db_url) == []
    # The task, registered by this code before the way down (the tables it writes now, the
    # failing evaluations among them, are newer than that revision); the key below is
    # claimed as that revision's code claimed it.
    apply_tasks(get_engine(db_url), [TICKET_TASK], actor="test")
    if postgres:
        with get_engine(db_url).connect() as conn:
            partitions = conn.execute(
                sa.text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'payloads'::regclass")
            ).scalar_one()
        assert partitions > 1  # the days made so far, and the default
        assert _ts_index_method(db_url) == "brin"
        assert _compression(db_url) == dict.fromkeys(PAYLOAD_TEXTS, "l")  # lz4

    migrate_to(db_url, BEFORE, down=True)
    assert _foreign_keys(db_url) == ["tasks"]
    if postgres:
        assert _ts_index_method(db_url) == "btree"
        assert _compression(db_url) == dict.fromkeys(PAYLOAD_TEXTS, "default")
    # A key claimed by the code of that revision, for a task it knew.
    with get_engine(db_url).begin() as conn:
        task_id = conn.execute(
            sa.text("SELECT id FROM tasks WHERE name = 'ticket_classify'")
        ).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO result_keys (task_id, request_id, ts) "
                "VALUES (:t, 'r-1', CURRENT_TIMESTAMP)"
            ),
            {"t": task_id},
        )

    migrate_to(db_url, REVISION)
    assert _foreign_keys(db_url) == []
    if postgres:
        assert _ts_index_method(db_url) == "brin"
        assert _compression(db_url) == dict.fromkeys(PAYLOAD_TEXTS, "l")
    with get_engine(db_url).connect() as conn:
        keys = conn.execute(sa.text("SELECT task_id, request_id FROM result_keys")).all()
    assert keys == [(task_id, "r-1")]


def test_a_resend_is_a_duplicate_and_long_payloads_are_stored_whole(api: Api) -> None:
    """Through the API: the key claim still refuses a resend, and a kept payload of long
    texts (compressed on PostgreSQL) reads back as posted."""
    long_text = "refund please, order 12345 arrived broken. " * 200  # ~8,800 characters
    item = make_result(
        request_id="lz4-1",
        input={"text": long_text},
        edge={"output": "refund", "latency_ms": 41.0},
        cloud={"output": "complaint", "latency_ms": 380.0},  # a conflict: its payload is kept
    )
    first = api.post_results(item).json()
    assert (first["accepted"], first["duplicates"]) == (1, 0), first
    again = api.post_results(item).json()
    assert (again["accepted"], again["duplicates"]) == (0, 1), again
    stored = api.client.get("/v1/results/ticket_classify/lz4-1", headers=api.headers("read"))
    assert stored.status_code == 200, stored.text
    assert stored.json()["payload"]["input"]["text"] == long_text

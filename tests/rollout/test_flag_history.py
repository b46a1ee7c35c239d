"""flag_history: every version of every flag is kept with its routing fields and its cause,
written with the flag; the migration copies the current flags of an existing database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from controlplane.db import get_engine, session_scope
from controlplane.migrate import check, upgrade
from controlplane.models import Flag, FlagHistory, FlagState, Task
from controlplane.rollout import flags
from tests.conftest import TICKET_TASK, Api, pg_admin_url

# The revision before flag_history existed.
BEFORE_HISTORY = "5e1d0b0a7001"


def _task_id(api: Api, name: str) -> int:
    with session_scope(api.engine) as session:
        task_id = session.scalar(sa.select(Task.id).where(Task.name == name))
    assert task_id is not None
    return task_id


def test_every_version_is_kept_with_its_cause(api: Api) -> None:
    admin = api.headers()
    steps = [
        ("/v1/tasks/ticket_classify/promote", {"reason": "gate passed", "force": True}),
        ("/v1/tasks/ticket_classify/rollback", {"reason": "agreement fell"}),
        ("/v1/kill", {"reason": "incident 7"}),
        ("/v1/kill/lift", {"reason": "incident 7 over"}),
        ("/v1/tasks/ticket_classify/rearm", {"reason": "new model"}),
    ]
    seen = [api.client.get("/v1/flags/ticket_classify", headers=api.headers("flags:read")).json()]
    for path, body in steps:
        response = api.client.post(path, json=body, headers=admin)
        assert response.status_code == 200, response.text
        seen.append(
            api.client.get("/v1/flags/ticket_classify", headers=api.headers("flags:read")).json()
        )
    changed = api.client.post("/v1/tasks", json={**TICKET_TASK, "shadow_rate": 0.5}, headers=admin)
    assert changed.status_code == 201
    seen.append(
        api.client.get("/v1/flags/ticket_classify", headers=api.headers("flags:read")).json()
    )

    with session_scope(api.engine) as session:
        kept = flags.history(session, _task_id(api, "ticket_classify"))
        revision = session.scalar(sa.select(FlagState.revision))
    assert [row["version"] for row in kept] == [1, 2, 3, 4, 5, 6, 7]
    assert [row["version"] for row in kept] == [flag["version"] for flag in seen]
    # Each version: the fields routers were given, and what made it.
    for row, flag in zip(kept, seen, strict=True):
        assert row["fields"] == {name: flag[name] for name in flags.ROUTING_FIELDS}
        assert row["cause"] == flag["reason"]
        assert row["created_at"] == flag["updated_at"]
    assert [row["cause"] for row in kept] == [
        "task created in shadow",
        "promoted to canary at 5%: gate passed",
        "rolled back by hand: agreement fell",
        "kill: incident 7",
        "lift: incident 7 over",
        "re-armed to shadow: new model",
        "config version 2",
    ]
    assert [row["fields"]["stage"] for row in kept] == [
        "shadow",
        "canary",
        "rolled_back",
        "rolled_back",
        "rolled_back",
        "shadow",
        "shadow",
    ]
    assert kept[1]["fields"]["edge_percent"] == 5 and kept[3]["fields"]["killed"] is True
    assert kept[-1]["fields"]["shadow_rate"] == 0.5
    # Revisions grow with the versions, and the last is the global revision now.
    revisions = [row["revision"] for row in kept]
    assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)
    assert revisions[-1] == revision


def test_a_change_that_is_rolled_back_leaves_no_history(api: Api) -> None:
    task_id = _task_id(api, "ticket_classify")
    with pytest.raises(RuntimeError), session_scope(api.engine) as session:
        task = session.get(Task, task_id)
        assert task is not None
        task.stage = "full"
        from controlplane.catalog.schemas import parse_config

        assert flags.publish(session, task, parse_config(TICKET_TASK), "not committed")
        raise RuntimeError("the transaction fails after the flag was written")
    with session_scope(api.engine) as session:
        assert [row["version"] for row in flags.history(session, task_id)] == [1]
        flag = session.get(Flag, task_id)
        assert flag is not None and flag.version == 1


def _seed_old_database(url: str) -> None:
    """A database at the revision before flag_history, with two tasks and their flags."""
    upgrade(url, BEFORE_HISTORY)
    engine = create_engine(url, poolclass=NullPool)
    meta = sa.MetaData()
    tasks = sa.Table("tasks", meta, autoload_with=engine)
    flag_table = sa.Table("flags", meta, autoload_with=engine)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    documents = {
        "ticket_classify": {
            "task": "ticket_classify",
            "version": 4,
            "stage": "canary",
            "edge_percent": 25,
            "sticky_by": "session",
            "max_input_tokens": 512,
            "shadow_rate": 1.0,
            "killed": False,
            "default_route": "cloud",
            "updated_at": now.isoformat(),
            "reason": "promoted: gate passed",
        },
        "invoice_extract": {
            "task": "invoice_extract",
            "version": 1,
            "stage": "shadow",
            "edge_percent": 0,
            "sticky_by": "user",
            "max_input_tokens": None,
            "shadow_rate": 0.5,
            "killed": False,
            "default_route": "cloud",
            "updated_at": now.isoformat(),
            "reason": "task created in shadow",
        },
    }
    with engine.begin() as conn:
        for task_id, (name, document) in enumerate(documents.items(), start=1):
            conn.execute(
                tasks.insert().values(
                    id=task_id,
                    name=name,
                    stage=document["stage"],
                    config_version=1,
                    created_at=now,
                    updated_at=now,
                    canary_step=1 if name == "ticket_classify" else 0,
                )
            )
            conn.execute(
                flag_table.insert().values(
                    task_id=task_id,
                    version=document["version"],
                    document=document,
                    updated_at=now,
                    reason=document["reason"],
                )
            )
    engine.dispose()


def _assert_backfilled(url: str) -> None:
    upgrade(url)
    check(url)
    with session_scope(get_engine(url)) as session:
        rows = session.scalars(sa.select(FlagHistory).order_by(FlagHistory.task_id)).all()
        got = [(r.task_id, r.version, r.revision, r.cause, r.fields) for r in rows]
        assert all(r.created_at == datetime(2026, 11, 30, 12, 0, tzinfo=UTC) for r in rows)
        assert got == [
            (
                1,
                4,
                None,
                "promoted: gate passed",
                {
                    "stage": "canary",
                    "edge_percent": 25,
                    "sticky_by": "session",
                    "max_input_tokens": 512,
                    "shadow_rate": 1.0,
                    "killed": False,
                    "default_route": "cloud",
                },
            ),
            (
                2,
                1,
                None,
                "task created in shadow",
                {
                    "stage": "shadow",
                    "edge_percent": 0,
                    "sticky_by": "user",
                    "max_input_tokens": None,
                    "shadow_rate": 0.5,
                    "killed": False,
                    "default_route": "cloud",
                },
            ),
        ]
        assert [row["version"] for row in flags.history(session, 1)] == [4]
    get_engine(url).dispose()


def test_the_migration_copies_current_flags_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    _seed_old_database(url)
    _assert_backfilled(url)


@contextmanager
def _empty_postgresql_database() -> Iterator[str]:
    name = f"sp_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.integration
def test_the_migration_copies_current_flags_on_postgresql() -> None:
    with _empty_postgresql_database() as url:
        _seed_old_database(url)
        _assert_backfilled(url)


def test_the_history_is_read_over_http(api: Api) -> None:
    admin = api.headers()
    api.client.post(
        "/v1/tasks/ticket_classify/rollback", json={"reason": "agreement fell"}, headers=admin
    )
    answer = api.client.get("/v1/flags/ticket_classify/history", headers=api.headers("read"))
    assert answer.status_code == 200
    body = answer.json()
    with session_scope(api.engine) as session:
        assert body == {
            "task": "ticket_classify",
            "versions": flags.history(session, _task_id(api, "ticket_classify")),
        }
    assert [(v["version"], v["fields"]["stage"]) for v in body["versions"]] == [
        (1, "shadow"),
        (2, "rolled_back"),
    ]
    # A human's read: the routers' scope does not open it.
    routers = api.client.get("/v1/flags/ticket_classify/history", headers=api.headers("flags:read"))
    assert routers.status_code == 403
    missing = api.client.get("/v1/flags/nope/history", headers=api.headers("read"))
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]

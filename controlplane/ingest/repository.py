"""All SQL of ingest: storing results and payloads idempotently, reading one back, and the
server secret that keys the hash of session and user ids.

Large batches on PostgreSQL take ids from the sequence and go in with one binary `COPY`
straight into `results`, inside a savepoint; when that meets a stored `(task, request_id)`
(a resend), the savepoint is rolled back and the batch goes through a session-local
temporary table and one `INSERT … SELECT … ON CONFLICT DO NOTHING RETURNING`. Small
batches, and SQLite, use a Core `INSERT … ON CONFLICT DO NOTHING RETURNING`. The ORM
stays off this path.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any

from psycopg.errors import UniqueViolation
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Engine, FromClause, Insert, event, func, insert, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from controlplane.db import dialect_insert, json_text
from controlplane.models import Payload, Result, ServerSecret, Task

RESULT_COLUMNS = [c.name for c in Result.__table__.columns if c.name != "id"]
PAYLOAD_COLUMNS = [c.name for c in Payload.__table__.columns]
JSON_RESULT_COLUMNS = {"input_segments"}
JSON_PAYLOAD_COLUMNS = {"input", "edge_output", "cloud_output", "diff"}
# Below this many rows the three round trips of the COPY path cost more than they save.
COPY_MIN_ROWS = 20

_COLS = ", ".join(RESULT_COLUMNS)
_ID_AND_RESULT_COLUMNS = ["id", *RESULT_COLUMNS]
_NEXT_IDS = text("SELECT nextval('results_id_seq') FROM generate_series(1, :n)")
_CREATE_STAGING = text(
    "CREATE TEMPORARY TABLE IF NOT EXISTS ingest_staging ON COMMIT DELETE ROWS AS "
    f"SELECT {_COLS} FROM results WITH NO DATA"
)
# Moving the rows out of the staging table (DELETE … RETURNING) empties it in the same
# statement, so a second batch in one transaction never merges the first one's rows again.
_MERGE_STAGING = text(
    f"WITH staged AS (DELETE FROM ingest_staging RETURNING {_COLS}) "
    f"INSERT INTO results ({_COLS}) SELECT {_COLS} FROM staged "
    # The order every writer takes unique-key locks in (see insert_results).
    'ORDER BY task_id, request_id COLLATE "C" '
    "ON CONFLICT (task_id, request_id) DO NOTHING RETURNING id, task_id, request_id"
)


@event.listens_for(Engine, "rollback")
def _forget_staging(connection: Connection) -> None:
    # A rolled-back transaction may have rolled back the staging table's creation too.
    connection.info.pop("ingest_staging", None)


def insert_results(
    session: Session, rows: list[dict[str, Any]], payloads: dict[tuple[int, str], dict[str, Any]]
) -> int:
    """Insert the rows that are new; write payloads for those only. Returns how many were new."""
    if not rows:
        return 0
    # Every writer inserts in one order (task, then request id by code point, which is
    # PostgreSQL's "C" collation), so two routers resending overlapping batches in
    # opposite orders wait for each other instead of deadlocking.
    rows = sorted(rows, key=_key)
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres and len(rows) >= COPY_MIN_ROWS:
        inserted = _copy_results(session, rows)
    else:
        stmt = dialect_insert(session, Result).on_conflict_do_nothing(
            index_elements=["task_id", "request_id"]
        )
        returned = session.execute(
            stmt.returning(Result.id, Result.task_id, Result.request_id), rows
        )
        inserted = [(r[0], r[1], r[2]) for r in returned]
    new_payloads = [
        {"result_id": result_id, **payload}
        for result_id, task_id, request_id in inserted
        if (payload := payloads.get((task_id, request_id))) is not None
    ]
    if new_payloads:
        if postgres and len(new_payloads) >= COPY_MIN_ROWS:
            _copy(session, "payloads", PAYLOAD_COLUMNS, JSON_PAYLOAD_COLUMNS, new_payloads)
        else:
            session.execute(insert_payload(), new_payloads)
    return len(inserted)


_key = itemgetter("task_id", "request_id")


def insert_payload() -> Insert:
    return insert(Payload)


def _copy_results(session: Session, rows: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """Optimistic first: ids drawn from the sequence, then one COPY straight into `results`
    inside a savepoint. A resend (a unique violation) rolls the savepoint back and the batch
    goes through the staging table, which skips what is already stored."""
    ids = session.scalars(_NEXT_IDS, {"n": len(rows)}).all()
    for row, result_id in zip(rows, ids, strict=True):
        row["id"] = result_id
    try:
        with session.begin_nested():
            _copy(session, "results", _ID_AND_RESULT_COLUMNS, JSON_RESULT_COLUMNS, rows)
    except UniqueViolation:
        return _merge_results(session, rows)
    return [(row["id"], row["task_id"], row["request_id"]) for row in rows]


def _merge_results(session: Session, rows: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    connection = session.connection()
    # The temporary table lives as long as the database connection: create it once per
    # connection (the flag lives and dies with the pooled connection).
    if not connection.info.get("ingest_staging"):
        session.execute(_CREATE_STAGING)
        connection.info["ingest_staging"] = True
    _copy(session, "ingest_staging", RESULT_COLUMNS, JSON_RESULT_COLUMNS, rows)
    return [(r[0], r[1], r[2]) for r in session.execute(_MERGE_STAGING)]


def copy_types(table: FromClause, columns: list[str]) -> list[str]:
    """The PostgreSQL type names psycopg needs for these columns in a binary COPY."""
    dialect = postgresql.dialect()
    return [_PG_COPY_TYPES[table.c[c].type.compile(dialect=dialect).split("(")[0]] for c in columns]


_PG_COPY_TYPES = {
    "SMALLINT": "int2",
    "INTEGER": "int4",
    "BIGINT": "int8",
    "VARCHAR": "text",
    "TEXT": "text",
    "FLOAT": "float8",
    "BOOLEAN": "bool",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "JSONB": "jsonb",
}


def _copy(
    session: Session,
    table: str,
    columns: list[str],
    json_columns: set[str],
    rows: Iterable[dict[str, Any]],
) -> None:
    """Binary COPY of rows into a table on the session's own connection (in its transaction)."""
    raw = session.connection().connection.driver_connection
    assert raw is not None
    types = copy_types(Payload.__table__ if table == "payloads" else Result.__table__, columns)
    json_positions = [i for i, c in enumerate(columns) if c in json_columns]
    values_of = itemgetter(*columns)
    # Table and column names are ours, never input.
    statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
    with raw.cursor() as cursor, cursor.copy(statement) as copy:
        copy.set_types(types)
        for row in rows:
            values = values_of(row)
            if any(values[i] is not None for i in json_positions):
                values = list(values)
                for i in json_positions:
                    if values[i] is not None:
                        values[i] = Jsonb(values[i], dumps=json_text)
            copy.write_row(values)


def get_result(
    session: Session, task: str, request_id: str
) -> tuple[Result, Payload | None] | None:
    row = session.execute(
        select(Result, Payload)
        .join(Task, Task.id == Result.task_id)
        .outerjoin(Payload, Payload.result_id == Result.id)
        .where(Task.name == task, Result.request_id == request_id)
    ).first()
    return None if row is None else (row[0], row[1])


def outcome_counts(session: Session, task_id: int) -> list[tuple[str | None, int]]:
    rows = session.execute(
        select(Result.outcome, func.count())
        .where(Result.task_id == task_id)
        .group_by(Result.outcome)
    )
    return [(r[0], r[1]) for r in rows]


def request_ids_by_outcome(
    session: Session, task_id: int, outcome: str, *, limit: int
) -> list[str]:
    query = (
        select(Result.request_id)
        .where(Result.task_id == task_id, Result.outcome == outcome)
        .order_by(Result.ts.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def server_secret(session: Session, name: str, candidate: str) -> str:
    """The stored secret of that name, storing `candidate` first when there is none. The first
    writer wins (insert if absent, then read), so every replica and worker reads the same."""
    session.execute(
        dialect_insert(session, ServerSecret)
        .values(name=name, value=candidate)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    return session.scalars(select(ServerSecret.value).where(ServerSecret.name == name)).one()

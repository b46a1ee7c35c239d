"""All SQL of ingest: storing results and payloads once per `(task, request_id)` (keys
claimed in `result_keys` first, then one binary COPY on PostgreSQL or Core INSERTs, never
the ORM), reading them back, and the server secret that keys the hash of session and user
ids (docs/operations.md, "A request id counts once").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from operator import itemgetter
from typing import Any

import orjson
from psycopg.types.json import set_json_dumps
from sqlalchemy import (
    FromClause,
    Insert,
    Select,
    String,
    bindparam,
    cast,
    func,
    insert,
    select,
    text,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from controlplane.db import dialect_insert, json_text
from controlplane.models import Payload, Result, ResultKey, ServerSecret, Task

# The per-side fields stored as `edge_*` / `cloud_*` columns (outputs and error messages
# are payload text and live in the payloads table).
SIDE_FIELDS = ("error", "latency_ms", "ttfb_ms", "model", "input_tokens", "output_tokens", "cost")
EDGE_FIELDS = (*SIDE_FIELDS, "confidence", "valid")
RESULT_COLUMNS = [c.name for c in Result.__table__.columns if c.name != "id"]
PAYLOAD_COLUMNS = [c.name for c in Payload.__table__.columns]
JSON_RESULT_COLUMNS = {"input_segments", "repeat_diff", "cloud_print", "skipped"}
# Below this many rows the round trips of the COPY path cost more than they save.
COPY_MIN_ROWS = 20

_ID_AND_RESULT_COLUMNS = ["id", *RESULT_COLUMNS]
_NEXT_IDS = text("SELECT nextval('results_id_seq') FROM generate_series(1, :n)")
# The keys in the order given (sorted by the caller: the order every writer takes the key
# locks in, so two routers resending overlapping batches wait instead of deadlocking). They
# go as one JSON array of [task id, request id, ts] (orjson writes it in C; three bound
# arrays cost the driver a Python call per element, 7-8 us of CPU per result).
_CLAIM_KEYS = text(
    "INSERT INTO result_keys (task_id, request_id, ts) "
    "SELECT (k->>0)::integer, k->>1, (k->>2)::timestamp with time zone "
    "FROM jsonb_array_elements(CAST(:keys AS jsonb)) WITH ORDINALITY AS e(k, n) ORDER BY n "
    "ON CONFLICT (task_id, request_id) DO NOTHING RETURNING task_id, request_id"
)


def insert_results(
    session: Session,
    rows: list[dict[str, Any]],
    payloads: dict[tuple[int, str], dict[str, Any]],
    before_write: Callable[[list[dict[str, Any]]], None] | None = None,
) -> int:
    """Insert the rows that are new; write payloads for those only. Returns how many were new.
    `before_write` sees the new rows, in batch order, once their keys are claimed and before
    they are written (it may fill their columns)."""
    if not rows:
        return 0
    # Every writer claims keys in one order (task, then request id by code point, which is
    # PostgreSQL's "C" collation).
    order = {id(row): n for n, row in enumerate(rows)}
    rows = sorted(rows, key=_key)
    postgres = session.get_bind().dialect.name == "postgresql"
    claimed = _claim_keys(session, rows, postgres)
    new_rows = []
    for row in rows:
        if _key(row) in claimed:
            claimed.remove(_key(row))  # a key twice in `rows` was claimed once
            new_rows.append(row)
    rows = new_rows
    if not rows:
        return 0
    if before_write is not None:
        before_write(sorted(rows, key=lambda row: order[id(row)]))
    if postgres and len(rows) >= COPY_MIN_ROWS:
        ids = session.scalars(_NEXT_IDS, {"n": len(rows)}).all()
        for row, result_id in zip(rows, ids, strict=True):
            row["id"] = result_id
        _copy(session, "results", _ID_AND_RESULT_COLUMNS, rows)
        inserted = [(row["id"], row["task_id"], row["request_id"], row["ts"]) for row in rows]
    else:
        returned = session.execute(
            insert(Result).returning(Result.id, Result.task_id, Result.request_id, Result.ts),
            rows,
        )
        inserted = [(r[0], r[1], r[2], r[3]) for r in returned]
    new_payloads = [
        {"result_id": result_id, "result_ts": ts, **payload}
        for result_id, task_id, request_id, ts in inserted
        if (payload := payloads.get((task_id, request_id))) is not None
    ]
    if new_payloads:
        if postgres and len(new_payloads) >= COPY_MIN_ROWS:
            _copy(session, "payloads", PAYLOAD_COLUMNS, new_payloads)
        else:
            session.execute(insert_payload(), new_payloads)
    return len(inserted)


_key = itemgetter("task_id", "request_id")


def _claim_keys(
    session: Session, rows: list[dict[str, Any]], postgres: bool
) -> set[tuple[int, str]]:
    """The keys of `rows` this transaction stored in `result_keys`: those not stored before.
    A key another transaction is storing right now waits for it, then counts as stored."""
    if postgres:
        keys = orjson.dumps([(row["task_id"], row["request_id"], row["ts"]) for row in rows])
        returned = session.execute(_CLAIM_KEYS, {"keys": keys.decode()})
    else:
        stmt = dialect_insert(session, ResultKey).on_conflict_do_nothing(
            index_elements=["task_id", "request_id"]
        )
        returned = session.execute(
            stmt.returning(ResultKey.task_id, ResultKey.request_id),
            [{"task_id": r["task_id"], "request_id": r["request_id"], "ts": r["ts"]} for r in rows],
        )
    return {(r[0], r[1]) for r in returned}


def insert_payload() -> Insert:
    return insert(Payload)


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
    rows: Iterable[dict[str, Any]],
) -> None:
    """Binary COPY of rows into a table on the session's own connection (in its transaction)."""
    raw = session.connection().connection.driver_connection
    assert raw is not None
    types = copy_types(Payload.__table__ if table == "payloads" else Result.__table__, columns)
    values_of = itemgetter(*columns)
    # Table and column names are ours, never input.
    statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
    with raw.cursor() as cursor:
        # The JSON columns' values go as they are: the jsonb type set for their columns
        # serialises them with json_text (StoredJSON as its text), no wrapper per value.
        set_json_dumps(json_text, context=cursor)
        with cursor.copy(statement) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(values_of(row))


def result_view(session: Session, task: str, request_id: str) -> dict[str, Any] | None:
    """A stored result in the shape it was posted, with bucket, received_at, comparison, payload."""
    row = session.execute(
        select(Result, Payload)
        .join(Task, Task.id == Result.task_id)
        # The key gives the result's ts, so only its day's partition is read.
        .join(
            ResultKey,
            (ResultKey.task_id == Result.task_id)
            & (ResultKey.request_id == Result.request_id)
            & (ResultKey.ts == Result.ts),
        )
        .outerjoin(Payload, (Payload.result_id == Result.id) & (Payload.result_ts == Result.ts))
        .where(Task.name == task, ResultKey.request_id == request_id)
    ).first()
    if row is None:
        return None
    r: Result = row[0]
    p: Payload | None = row[1]

    def side(name: str) -> dict[str, Any] | None:
        if not getattr(r, f"{name}_ran"):
            return None
        fields = EDGE_FIELDS if name == "edge" else SIDE_FIELDS
        out = {f: getattr(r, f"{name}_{f}") for f in fields}
        out["output"] = getattr(p, f"{name}_output") if p is not None else None
        out["error_message"] = getattr(p, f"{name}_error_message") if p is not None else None
        return out

    return {
        "request_id": r.request_id,
        "task": task,
        "ts": r.ts,
        "received_at": r.received_at,
        "session_id": r.session_id,
        "user_id": r.user_id,
        "sticky_bucket": r.sticky_bucket,
        "input_tokens": r.input_tokens,
        "decision": r.decision,
        "served": r.served,
        "degraded": r.degraded,
        "degrade_reason": r.degrade_reason,
        "flag_version": r.flag_version,
        "input_segments": r.input_segments,
        "skipped": r.skipped,
        "bucket": r.bucket,
        "config_version": r.config_version,
        "edge": side("edge"),
        "cloud": side("cloud"),
        "comparison": {
            "outcome": r.outcome,
            "diff": p.diff if p is not None else None,
            "comparator": r.comparator,
            "comparator_version": r.comparator_version,
        },
        "repeat": None
        if r.repeat_source is None
        else {"outcome": r.repeat_outcome, "source": r.repeat_source, "diff": r.repeat_diff},
        "payload": None
        if p is None
        else {
            "policy": p.policy,
            "keep_probability": p.keep_probability,
            "input": p.input,
            "edge_output": p.edge_output,
            "cloud_output": p.cloud_output,
            "diff": p.diff,
            "edge_error_message": p.edge_error_message,
            "cloud_error_message": p.cloud_error_message,
        },
    }


# The latest stored answers to one input a batch reads, at most, whatever they are (the
# edge's alone, another task's to the same input, one too long to compare): an input
# answered all day costs a batch no more than one answered once. Among them each new result
# finds the latest one the cloud answered under its comparator spec before it.
SCAN_PER_INPUT = 16


def _latest_answers(input_hash: Any, *, outer: FromClause | None = None) -> Select[Any]:
    """A task's cloud answers (bound: task_id) among the latest SCAN_PER_INPUT stored answers
    to one input in [since, until] (bound: since, until), newest first. `outer`: the table
    of an enclosing statement `input_hash` is a column of (PostgreSQL's lateral read)."""
    scan = (
        select(
            Result.request_id,
            Result.ts,
            Result.task_id,
            Result.cloud_ran,
            Result.cloud_error,
            Result.cloud_print,
        )
        # Only the index's own columns here, so the LIMIT bounds the index entries read,
        # in the index's order (no sort an input).
        .where(
            Result.input_hash == input_hash,
            Result.ts >= bindparam("since", type_=Result.ts.type),
            Result.ts <= bindparam("until", type_=Result.ts.type),
        )
        .order_by(Result.ts.desc())
        .limit(SCAN_PER_INPUT)
    )
    latest = scan.subquery("latest") if outer is None else scan.correlate(outer).lateral("latest")
    return select(latest.c.request_id, latest.c.ts, latest.c.cloud_print).where(
        latest.c.task_id == bindparam("task_id"),
        # Answered by the cloud (a missing print, SQL NULL or JSON null, is left out below).
        latest.c.cloud_ran.is_(True),
        latest.c.cloud_error.is_(None),
    )


# The hashes go as one JSON array (a bound text[] costs the driver a Python call per
# element); the statement is built once.
_HASHES = (
    func.jsonb_array_elements_text(cast(bindparam("hashes", type_=String), JSONB))
    .table_valued("input_hash")
    .render_derived(name="h")
)
_PER_HASH = _latest_answers(_HASHES.c.input_hash, outer=_HASHES).lateral("r")
_EARLIER_PRINTS = (
    select(_HASHES.c.input_hash, _PER_HASH.c.request_id, _PER_HASH.c.ts, _PER_HASH.c.cloud_print)
    .select_from(_HASHES)
    .join(_PER_HASH, true())
)


def earlier_prints(
    session: Session,
    task_id: int,
    input_hashes: Collection[str],
    since: datetime,
    until: datetime,
) -> list[tuple[str, str, datetime, dict[str, Any]]]:
    """(input hash, request id, ts, cloud print) of a task's stored cloud answers with a
    print, among the latest SCAN_PER_INPUT stored answers to each of these inputs with `ts`
    in [since, until], newest first: what new results of a batch pair with (the caller picks,
    for each, the latest before it under its spec). One statement on PostgreSQL (a lateral
    read per input through the index on (input_hash, ts)); a read per input on SQLite."""
    hashes = sorted(input_hashes)
    if not hashes:
        return []
    bounds = {"task_id": task_id, "since": since, "until": until}
    found: list[tuple[str, str, datetime, Any]] = []
    if session.get_bind().dialect.name == "postgresql":
        # Through the index, always: on a day's partition not yet analysed the planner
        # takes a sequential scan per hash, and a batch reads the day hundreds of times
        # (seen: 400 results/s on a fresh install). Off for this statement only. The
        # setting is local to the transaction, so a read that fails (a lock or statement
        # timeout) needs no restoring: the rollback does it, and a restore in a `finally`
        # would run in the aborted transaction and hide the timeout (a 500, not a 503).
        previous = session.execute(
            text(
                "SELECT current_setting('enable_seqscan'), set_config('enable_seqscan', 'off', true)"
            )
        ).one()[0]
        rows = session.execute(_EARLIER_PRINTS, {"hashes": orjson.dumps(hashes).decode(), **bounds})
        found = [(r[0], r[1], r[2], r[3]) for r in rows]
        session.execute(
            text("SELECT set_config('enable_seqscan', :setting, true)"), {"setting": previous}
        )
    else:
        # SQLite (embedded, one process): a read per input.
        for input_hash in hashes:
            rows = session.execute(_latest_answers(input_hash), bounds)
            found.extend((input_hash, r[0], r[1], r[2]) for r in rows)
    # An output too long to compare has no print either.
    return [r for r in found if r[3] is not None]


def conflict_ids(session: Session, task_id: int, *, limit: int) -> list[str]:
    """Request ids of a task's most recent conflicting results."""
    query = (
        select(Result.request_id)
        .where(Result.task_id == task_id, Result.outcome == "conflict")
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

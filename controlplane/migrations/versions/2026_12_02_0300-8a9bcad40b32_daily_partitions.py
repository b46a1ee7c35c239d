"""results and payloads partitioned by day on PostgreSQL; result_keys holds each
(task, request id) once.

PostgreSQL: both tables are rebuilt as range-partitioned tables (one partition per UTC day
of the result's `ts`, and a default partition), every row copied, under an exclusive lock
on both for the copy: writers wait (ingest answers 503 past its pool timeout and routers
resend). A unique key cannot span partitions, so `(task_id, request_id)` moves to the new
`result_keys` table, which ingest claims before it writes a result. Payloads gain
`result_ts` (their result's `ts`, what they are partitioned by) and lose their foreign key.

SQLite: the same columns and keys, no partitions.

Revision ID: 8a9bcad40b32
Revises: 7c2e5a91d3b4
Create Date: 2026-12-02 03:00:00.000000
"""

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "8a9bcad40b32"
down_revision: str | None = "7c2e5a91d3b4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Days of existing data older than this go to the default partition (retention empties it).
MAX_DAYS_BEHIND = 62
DAYS_AHEAD = 3


def _create_result_keys() -> None:
    op.create_table(
        "result_keys",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_result_keys_task_id_tasks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", "request_id", name=op.f("pk_result_keys")),
    )
    op.create_index("ix_result_keys_ts", "result_keys", ["ts"], unique=False)


def _run(*statements: str) -> None:
    for statement in statements:
        op.execute(sa.text(statement))


def _bound(day: date) -> str:
    return datetime.combine(day, time(), tzinfo=UTC).isoformat()


def upgrade() -> None:
    _create_result_keys()
    if op.get_bind().dialect.name != "postgresql":
        _upgrade_sqlite()
        return
    _run(
        "LOCK TABLE results, payloads IN ACCESS EXCLUSIVE MODE",
        "ALTER TABLE payloads DROP CONSTRAINT fk_payloads_result_id_results",
        "ALTER TABLE payloads RENAME TO payloads_old",
        "ALTER TABLE payloads_old RENAME CONSTRAINT pk_payloads TO pk_payloads_old",
        "ALTER TABLE results RENAME TO results_old",
        "ALTER TABLE results_old RENAME CONSTRAINT pk_results TO pk_results_old",
        "ALTER TABLE results_old RENAME CONSTRAINT uq_results_task_id_request_id TO uq_results_old",
        "ALTER TABLE results_old RENAME CONSTRAINT fk_results_task_id_tasks TO fk_results_old",
        "ALTER INDEX ix_results_task_id_ts RENAME TO ix_results_old",
        "CREATE TABLE results (LIKE results_old INCLUDING DEFAULTS) PARTITION BY RANGE (ts)",
        # The id sequence now belongs to the new table (dropping the old one keeps it).
        "ALTER SEQUENCE results_id_seq OWNED BY results.id",
        "ALTER TABLE results ADD CONSTRAINT pk_results PRIMARY KEY (id, ts)",
        "ALTER TABLE results ADD CONSTRAINT fk_results_task_id_tasks FOREIGN KEY (task_id) "
        "REFERENCES tasks (id) ON DELETE CASCADE",
        "CREATE INDEX ix_results_task_id_ts ON results (task_id, ts)",
        "CREATE TABLE payloads (LIKE payloads_old INCLUDING DEFAULTS, "
        "result_ts timestamp with time zone NOT NULL) PARTITION BY RANGE (result_ts)",
        "ALTER TABLE payloads ADD CONSTRAINT pk_payloads PRIMARY KEY (result_id, result_ts)",
    )
    bind = op.get_bind()
    today = datetime.now(UTC).date()
    held = bind.execute(
        sa.text("SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM results_old")
    ).scalars()
    days = {d for d in held if d >= today - timedelta(days=MAX_DAYS_BEHIND)}
    days |= {today + timedelta(days=o) for o in range(-1, DAYS_AHEAD + 1)}
    for day in sorted(days):
        for table in ("results", "payloads"):
            _run(
                f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} "
                f"FOR VALUES FROM ('{_bound(day)}') TO ('{_bound(day + timedelta(days=1))}')"
            )
    _run(
        "CREATE TABLE results_default PARTITION OF results DEFAULT",
        "CREATE TABLE payloads_default PARTITION OF payloads DEFAULT",
        # Creating a day asks whether the default partition holds rows of it: an index probe.
        "CREATE INDEX ix_results_default_ts ON results_default (ts)",
        "CREATE INDEX ix_payloads_default_result_ts ON payloads_default (result_ts)",
        "INSERT INTO results SELECT * FROM results_old",
        "INSERT INTO result_keys (task_id, request_id, ts) "
        "SELECT task_id, request_id, ts FROM results_old",
        "INSERT INTO payloads SELECT p.*, r.ts FROM payloads_old p "
        "JOIN results_old r ON r.id = p.result_id",
        "DROP TABLE payloads_old",
        "DROP TABLE results_old",
        "ANALYZE results",
        "ANALYZE payloads",
        "ANALYZE result_keys",
    )


def _upgrade_sqlite() -> None:
    # Payloads first: batch mode rebuilds `results` (a DROP TABLE), which would cascade to
    # payloads through their old foreign key.
    with op.batch_alter_table("payloads", schema=None) as batch_op:
        batch_op.drop_constraint("fk_payloads_result_id_results", type_="foreignkey")
        batch_op.add_column(sa.Column("result_ts", sa.DateTime(timezone=True), nullable=True))
    _run("UPDATE payloads SET result_ts = (SELECT ts FROM results WHERE id = payloads.result_id)")
    with op.batch_alter_table("payloads", schema=None) as batch_op:
        batch_op.alter_column("result_ts", existing_type=sa.DateTime(timezone=True), nullable=False)
    _run(
        "INSERT INTO result_keys (task_id, request_id, ts) SELECT task_id, request_id, ts "
        "FROM results"
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_constraint("uq_results_task_id_request_id", type_="unique")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _downgrade_sqlite()
    else:
        _run(
            "LOCK TABLE results, payloads IN ACCESS EXCLUSIVE MODE",
            "ALTER TABLE payloads RENAME TO payloads_days",
            "ALTER TABLE payloads_days RENAME CONSTRAINT pk_payloads TO pk_payloads_days",
            "ALTER TABLE results RENAME TO results_days",
            "ALTER TABLE results_days RENAME CONSTRAINT pk_results TO pk_results_days",
            "ALTER TABLE results_days RENAME CONSTRAINT fk_results_task_id_tasks TO fk_results_days",
            "ALTER INDEX ix_results_task_id_ts RENAME TO ix_results_days_ts",
            "CREATE TABLE results (LIKE results_days INCLUDING DEFAULTS)",
            "ALTER SEQUENCE results_id_seq OWNED BY results.id",
            "INSERT INTO results SELECT * FROM results_days",
            "ALTER TABLE results ADD CONSTRAINT pk_results PRIMARY KEY (id)",
            "ALTER TABLE results ADD CONSTRAINT uq_results_task_id_request_id "
            "UNIQUE (task_id, request_id)",
            "ALTER TABLE results ADD CONSTRAINT fk_results_task_id_tasks FOREIGN KEY (task_id) "
            "REFERENCES tasks (id) ON DELETE CASCADE",
            "CREATE INDEX ix_results_task_id_ts ON results (task_id, ts)",
            "CREATE TABLE payloads (LIKE payloads_days INCLUDING DEFAULTS)",
            "ALTER TABLE payloads DROP COLUMN result_ts",
            "INSERT INTO payloads SELECT result_id, policy, keep_probability, input, edge_output, "
            "cloud_output, diff, edge_error_message, cloud_error_message FROM payloads_days",
            "ALTER TABLE payloads ADD CONSTRAINT pk_payloads PRIMARY KEY (result_id)",
            "ALTER TABLE payloads ADD CONSTRAINT fk_payloads_result_id_results "
            "FOREIGN KEY (result_id) REFERENCES results (id) ON DELETE CASCADE",
            "DROP TABLE payloads_days",
            "DROP TABLE results_days",
        )
    op.drop_index("ix_result_keys_ts", table_name="result_keys")
    op.drop_table("result_keys")


def _downgrade_sqlite() -> None:
    # `results` first, while no foreign key points at it (see _upgrade_sqlite).
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_unique_constraint(
            "uq_results_task_id_request_id", ["task_id", "request_id"]
        )
    with op.batch_alter_table("payloads", schema=None) as batch_op:
        batch_op.drop_column("result_ts")
        batch_op.create_foreign_key(
            "fk_payloads_result_id_results", "results", ["result_id"], ["id"], ondelete="CASCADE"
        )

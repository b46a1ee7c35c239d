"""results without a foreign key to tasks

Each stored result paid a foreign-key check against `tasks` (PostgreSQL's trigger, a lookup
per row): about 2.7 µs of the server's CPU a result, a quarter of a binary COPY's row into
`results` and a tenth of all PostgreSQL spends on an ingested result, measured on a 2-core
development machine (20,000 rows a COPY, with and without the key, in turns). It bought
nothing: ingest writes results only for tasks it knows (read from `tasks` by its process,
and read again every few seconds), and no code deletes a task (its ON DELETE CASCADE never
ran). Retention's drop of a day no longer locks `tasks` either. `result_keys` lost its key to
`tasks` for the same reason (b4d1e7f3a2c9), and `payloads` never had one.

PostgreSQL: dropping the key changes the catalog of the partitioned parent and of every
day's partition (no row is read). SQLite: the table is rebuilt without it.

The way down deletes the results and payloads of tasks that no longer exist (only a
hand-made deletion can have left any), then adds the key back, which reads every row.

Revision ID: 6a2f9c1e4b70
Revises: df084010e878
Create Date: 2026-12-09 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6a2f9c1e4b70"
down_revision: str | None = "df084010e878"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FK = "fk_results_task_id_tasks"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        with op.batch_alter_table("results") as batch:
            batch.drop_constraint(FK, type_="foreignkey")
        return
    op.drop_constraint(FK, "results", type_="foreignkey")


def downgrade() -> None:
    orphans = "NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.id = results.task_id)"
    op.execute(
        sa.text(f"DELETE FROM payloads WHERE result_id IN (SELECT id FROM results WHERE {orphans})")
    )
    op.execute(sa.text(f"DELETE FROM results WHERE {orphans}"))
    if op.get_bind().dialect.name != "postgresql":
        with op.batch_alter_table("results") as batch:
            batch.create_foreign_key(FK, "tasks", ["task_id"], ["id"], ondelete="CASCADE")
        return
    op.create_foreign_key(FK, "results", "tasks", ["task_id"], ["id"], ondelete="CASCADE")

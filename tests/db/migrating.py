"""Moving a test database between migration revisions, as an operator's upgrade would."""

from __future__ import annotations

from alembic import command

from controlplane.db import get_engine
from controlplane.migrate import alembic_config, current_revisions, upgrade


def migrate_to(url: str, revision: str, *, down: bool = False) -> None:
    """Upgrade (or downgrade) the database at `url` to `revision`, and check it is there."""
    get_engine(url).dispose()  # no pooled connection holds a lock the migration waits on
    if down:
        command.downgrade(alembic_config(url), revision)
    else:
        upgrade(url, revision)
    get_engine(url).dispose()
    with get_engine(url).connect() as conn:
        assert current_revisions(conn) == {revision}

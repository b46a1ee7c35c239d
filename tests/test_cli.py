"""The `shadowplane` command: migrate, keys create/list/revoke, tasks apply -f. Each command is
a process of its own, forked from one that imported the app (tests/liveapi.py `run_cli`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

from controlplane.catalog.examples import FOLDER
from controlplane.migrate import alembic_config, head_revisions
from tests.liveapi import Done, run_cli

EXAMPLES = FOLDER


def run(tmp_path: Path, *args: str, ok: bool = True) -> Done:
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    done = run_cli(list(args), env, tmp_path)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def migrated(tmp_path: Path) -> Path:
    assert "migrated" in run(tmp_path, "migrate").stdout
    return tmp_path


def test_keys_create_prints_the_key_alone_on_its_last_line(migrated: Path) -> None:
    out = run(
        migrated, "keys", "create", "--name", "router", "--scope", "ingest", "--scope", "flags:read"
    ).stdout
    key = out.strip().splitlines()[-1]
    assert key.startswith("sp_") and " " not in key
    listing = run(migrated, "keys", "list").stdout
    assert "router" in listing and "flags:read,ingest" in listing and "active" in listing
    assert key not in listing
    run(migrated, "keys", "revoke", "router")
    assert "revoked" in run(migrated, "keys", "list").stdout
    bad = run(migrated, "keys", "create", "--name", "x", "--scope", "root", ok=False)
    assert bad.returncode == 1 and "scope" in bad.stderr


def test_tasks_apply(migrated: Path) -> None:
    task_file = EXAMPLES / "ticket_classify.yaml"
    assert (
        "ticket_classify: created (version 1, stage shadow)"
        in run(migrated, "tasks", "apply", "-f", str(task_file)).stdout
    )
    assert (
        "ticket_classify: unchanged (version 1"
        in run(migrated, "tasks", "apply", "-f", str(task_file)).stdout
    )
    changed = migrated / "changed.yaml"
    changed.write_text(task_file.read_text() + "shadow_rate: 0.5\n")
    assert (
        "ticket_classify: new version (version 2"
        in run(migrated, "tasks", "apply", "-f", str(changed)).stdout
    )
    bad = migrated / "bad.yaml"
    bad.write_text("task: x\ncomparator: {kind: label}\nsticky_by: device\n")
    done = run(migrated, "tasks", "apply", "-f", str(bad), ok=False)
    assert done.returncode == 1
    assert "sticky_by: Input should be 'session' or 'user' (got \"device\")" in done.stderr


def test_a_refused_promotion_reads_one_line_per_thing_in_its_way(migrated: Path) -> None:
    # It was the refusal's JSON on one line (2 kB for a task with no traffic yet).
    run(migrated, "tasks", "apply", "-f", str(EXAMPLES / "ticket_classify.yaml"))
    refused = run(migrated, "promote", "ticket_classify", "--reason", "go", ok=False)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert lines[0] == "error: promotion refused:"
    assert lines[1].startswith("- the grade is insufficient: too little traffic")
    assert lines[2].startswith("- the gate (shadow): 0 of the 12 windows needed")
    assert lines[3] == "promote --force goes past these (audited, with its reason)."
    assert len(lines) == 4 and "{" not in refused.stderr


def test_migrate_to_an_earlier_revision_takes_the_schema_down_for_an_older_release(
    migrated: Path,
) -> None:
    # A deploy rolled back after its migration: the older release cannot migrate (it does
    # not know the newer revision) and says what to run with the newer one.
    [head] = head_revisions()
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    earlier = script.get_revision(head).down_revision
    assert isinstance(earlier, str)
    engine = create_engine(f"sqlite:///{migrated / 'cli.db'}")

    def version() -> str:
        with engine.connect() as connection:
            return str(connection.execute(text("SELECT version_num FROM alembic_version")).scalar())

    down = run(migrated, "migrate", "--to", earlier)
    assert down.stdout.strip().endswith(f"to {earlier}")
    assert version() == earlier
    run(migrated, "migrate")
    assert version() == head
    # Migrated by a release this one does not know: one line, ending with the command.
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'ffffffffffff'"))
    refused = run(migrated, "migrate", ok=False)
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        f"with the newer release, shadowplane migrate --to {head}"
    )
    # The same database, `--to` a revision this release knows: the same hint (it said only
    # Alembic's "Can't locate revision identified by 'ffffffffffff'").
    refused = run(migrated, "migrate", "--to", earlier, ok=False)
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        f"with the newer release, shadowplane migrate --to {head}"
    ), refused.stderr
    # A revision this release does not have, named as such with the one it would go to.
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
    refused = run(migrated, "migrate", "--to", "abc123", ok=False)
    assert refused.returncode == 1
    assert "--to abc123: this release has no such revision" in refused.stderr, refused.stderr
    assert f"(its latest: {head})" in refused.stderr, refused.stderr
    assert version() == head
    engine.dispose()

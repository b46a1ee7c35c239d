"""The `shadowplane` command: migrate, keys create/list/revoke, tasks apply -f. Each command is
a process of its own, forked from one that imported the app (tests/liveapi.py `run_cli`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controlplane.catalog.examples import FOLDER
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

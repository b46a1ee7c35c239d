"""The import contract (pyproject.toml `[tool.importlinter]`): imports flow downward only,
compare and client import nothing else of ours, nothing under controlplane imports shadowplane_workers;
the dashboard is a door nothing imports, with no SQL of its own.

The contract holds on the tree, and a scratch copy with one forbidden import added breaks
it, naming that import, so the check can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # The packages under `root` come first on the path, ahead of the installed project.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def scratch_copy(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("controlplane", "shadowplane_workers", "shadowplane_dashboard"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_the_import_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 5 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("path", "line", "broken"),
    [
        # An upward import: the ground-floor compare package reaching the API.
        (
            "controlplane/compare/comparators.py",
            "import controlplane.api",
            "controlplane.compare.comparators -> controlplane.api",
        ),
        # The client reaching into the server.
        (
            "controlplane/client/sticky.py",
            "import controlplane.db",
            "controlplane.client.sticky -> controlplane.db",
        ),
        # Two domains importing each other: metrics is below rollout.
        (
            "controlplane/metrics/service.py",
            "import controlplane.rollout.flags",
            "controlplane.metrics.service -> controlplane.rollout.flags",
        ),
        # The Celery app is beside the doors, never under them.
        (
            "controlplane/scheduler.py",
            "import shadowplane_workers.app",
            "controlplane.scheduler -> shadowplane_workers.app",
        ),
        # The dashboard writes its own SQL instead of calling a service.
        (
            "shadowplane_dashboard/app_pages/audit.py",
            "import sqlalchemy.orm",
            "shadowplane_dashboard.app_pages.audit -> sqlalchemy",
        ),
        # The guard every door uses reaching up into a domain it stands under: key changes
        # are audited by controlplane.keys, never by auth.
        (
            "controlplane/auth/service.py",
            "import controlplane.audit.service",
            "controlplane.auth.service -> controlplane.audit.service",
        ),
        # Something below reaching up into the dashboard.
        (
            "controlplane/rollout/service.py",
            "import shadowplane_dashboard.common",
            "controlplane.rollout.service -> shadowplane_dashboard.common",
        ),
    ],
)
def test_a_forbidden_import_breaks_the_contract_and_is_named(
    tmp_path: Path, path: str, line: str, broken: str
) -> None:
    root = scratch_copy(tmp_path)
    with (root / path).open("a") as source:
        source.write(f"\n{line}  # added by the test\n")
    done = lint_imports(root)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    assert broken in done.stdout, done.stdout

"""`shadowplane beat` keeps its schedule file where the operator says (`--schedule-file`,
its folder created), by default under the user's state folder, never in the working
directory: a real beat process on the real Redis broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.liveapi import wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def start_beat(tmp_path: Path, env: dict[str, str], *args: str) -> list[Path]:
    """Run beat in an empty working directory until a schedule file appears; the files
    named celerybeat-schedule* anywhere under tmp_path (the dbm module may add a suffix)."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    broker = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
    if not broker:
        pytest.fail("SHADOWPLANE_TEST_REDIS_URL is not set: run the suite with scripts/test")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "HOME")},
        "SHADOWPLANE_DATABASE_URL": f"sqlite:///{tmp_path / 'beat.db'}",
        "SHADOWPLANE_REDIS_URL": broker.rsplit("/", 1)[0] + "/7",
        "SHADOWPLANE_TICK_SECONDS": "3600",  # beat starts, nothing needs to run
        **env,
    }
    with (tmp_path / "beat.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "beat", *args],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def written() -> list[Path]:
            assert process.poll() is None, (tmp_path / "beat.log").read_text()[-3000:]
            return sorted(tmp_path.rglob("*schedule*"))

        return list(wait_until(written, "beat to write its schedule file", every=0.1))
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_beat_keeps_its_schedule_under_the_home_state_folder_by_default(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    found = start_beat(tmp_path, {"HOME": str(home)})
    folder = home / ".local" / "state" / "shadowplane"
    assert found and all(p.parent == folder for p in found), found
    assert all(p.name.startswith("celerybeat-schedule") for p in found), found
    assert not list((tmp_path / "cwd").iterdir())


def test_beat_follows_xdg_state_home(tmp_path: Path) -> None:
    state = tmp_path / "state"
    found = start_beat(tmp_path, {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(state)})
    assert found and all(p.parent == state / "shadowplane" for p in found), found


def test_beat_writes_its_schedule_where_told(tmp_path: Path) -> None:
    target = tmp_path / "var" / "lib" / "beat" / "schedule"  # the folders do not exist yet
    found = start_beat(tmp_path, {"HOME": str(tmp_path / "home")}, "--schedule-file", str(target))
    assert found and all(p.parent == target.parent for p in found), found
    assert not list((tmp_path / "cwd").iterdir())

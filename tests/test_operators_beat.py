"""`shadowplane beat` keeps its schedule file where the operator says (`--schedule-file`,
its folder created), by default under the user's state folder, never in the working
directory: a real beat process on the real Redis broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.liveapi import wait_until
from tests.support import CeleryProcess, celery_env

pytestmark = pytest.mark.integration


def start_beat(tmp_path: Path, broker: str, env: dict[str, str], *args: str) -> list[Path]:
    """Run beat in an empty working directory until a schedule file appears; the files
    named celerybeat-schedule* anywhere under tmp_path (the dbm module may add a suffix)."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    environment = celery_env(
        f"sqlite:///{tmp_path / 'beat.db'}",
        broker,
        SHADOWPLANE_TICK_SECONDS="3600",  # beat starts, nothing needs to run
    )
    for name in ("XDG_STATE_HOME", "HOME"):
        environment.pop(name, None)
    beat = CeleryProcess(["beat", *args], {**environment, **env}, tmp_path / "beat.log", workdir)
    beat.start()
    try:

        def written() -> list[Path]:
            assert beat.running(), beat.log(3000)
            return sorted(tmp_path.rglob("*schedule*"))

        return list(wait_until(written, "beat to write its schedule file", every=0.1))
    finally:
        beat.stop()


def logged(tmp_path: Path) -> list[dict[str, Any]]:
    """Beat's log, every line a JSON object."""
    return [json.loads(line) for line in (tmp_path / "beat.log").read_text().splitlines()]


def test_beat_keeps_its_schedule_under_the_home_state_folder_by_default(
    tmp_path: Path, redis_url: Callable[[], str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    found = start_beat(tmp_path, redis_url(), {"HOME": str(home)})
    folder = home / ".local" / "state" / "shadowplane"
    assert found and all(p.parent == folder for p in found), found
    assert all(p.name.startswith("celerybeat-schedule") for p in found), found
    assert not list((tmp_path / "cwd").iterdir())
    # SHADOWPLANE_LOG_LEVEL's default, INFO: beat says it starts, in a JSON line.
    assert {"logger": "celery.beat", "message": "beat: Starting..."}.items() <= next(
        line for line in logged(tmp_path) if line["logger"] == "celery.beat"
    ).items()


def test_beat_follows_xdg_state_home(tmp_path: Path, redis_url: Callable[[], str]) -> None:
    state = tmp_path / "state"
    found = start_beat(
        tmp_path,
        redis_url(),
        {
            "HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(state),
            "SHADOWPLANE_LOG_LEVEL": "warning",
        },
    )
    assert found and all(p.parent == state / "shadowplane" for p in found), found
    # At WARNING, beat's start is not told.
    assert [line for line in logged(tmp_path) if line["level"] in ("DEBUG", "INFO")] == []


def test_beat_writes_its_schedule_where_told(tmp_path: Path, redis_url: Callable[[], str]) -> None:
    target = tmp_path / "var" / "lib" / "beat" / "schedule"  # the folders do not exist yet
    found = start_beat(
        tmp_path, redis_url(), {"HOME": str(tmp_path / "home")}, "--schedule-file", str(target)
    )
    assert found and all(p.parent == target.parent for p in found), found
    assert not list((tmp_path / "cwd").iterdir())

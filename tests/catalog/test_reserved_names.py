"""Task names that a route spells literally are refused: `GET /v1/flags/stream` is the event
stream, so the flag of a task named `stream` could never be read by name."""

from __future__ import annotations

import os
import re
from pathlib import Path

from controlplane.api import create_app
from controlplane.catalog.schemas import RESERVED_TASK_NAMES, TASK_NAME
from controlplane.settings import Settings
from tests.conftest import Api
from tests.liveapi import Done, run_cli

COMPARATOR = {"kind": "label", "labels": ["a", "b"]}
# The path parameters that hold a task's name.
NAME_PARAMETERS = {"{task}", "{key}"}


def colliding_segments(paths: list[str]) -> set[str]:
    """Every literal path segment that sits where another route takes a task's name:
    `/v1/flags/stream` beside `/v1/flags/{task}`."""
    found = set()
    split = [p.strip("/").split("/") for p in paths]
    for named in split:
        for i, segment in enumerate(named):
            if segment not in NAME_PARAMETERS:
                continue
            for other in split:
                if len(other) > i and other[:i] == named[:i] and not other[i].startswith("{"):
                    found.add(other[i])
    return found


def test_every_route_word_a_task_name_could_shadow_is_reserved(sqlite_url: str) -> None:
    app = create_app(Settings(database_url=sqlite_url))
    paths = list(app.openapi()["paths"])
    assert "/v1/flags/stream" in paths and "/v1/flags/{task}" in paths
    words = {w for w in colliding_segments(paths) if TASK_NAME.fullmatch(w)}
    assert "stream" in words
    assert words <= set(RESERVED_TASK_NAMES), words - set(RESERVED_TASK_NAMES)


def test_the_api_refuses_a_reserved_task_name_naming_the_field(api: Api) -> None:
    for name in sorted(RESERVED_TASK_NAMES):
        response = api.client.post(
            "/v1/tasks", json={"task": name, "comparator": COMPARATOR}, headers=api.headers()
        )
        assert response.status_code == 422, response.text
        [problem] = response.json()["detail"]
        assert problem.startswith(f"task: {name!r} is reserved"), problem
        assert RESERVED_TASK_NAMES[name] in problem and f'(got "{name}")' in problem
    assert "GET /v1/flags/stream is the flags' event stream" in RESERVED_TASK_NAMES["stream"]
    # Only the exact word: names that merely contain it are fine.
    for name in ("streams", "stream_classify", "live.stream"):
        response = api.client.post(
            "/v1/tasks", json={"task": name, "comparator": COMPARATOR}, headers=api.headers()
        )
        assert response.status_code == 201, response.text
        flag = api.client.get(f"/v1/flags/{name}", headers=api.headers("flags:read"))
        assert flag.status_code == 200 and flag.json()["task"] == name


def test_tasks_apply_refuses_a_reserved_task_name(sqlite_url: str, tmp_path: Path) -> None:
    # A migrated database (a copy of the migrated template), the command a process of its own.
    env = {**os.environ, "SHADOWPLANE_DATABASE_URL": sqlite_url}

    def shadowplane(*args: str) -> Done:
        return run_cli(list(args), env, tmp_path)

    config = tmp_path / "stream.yaml"
    config.write_text("task: stream\ncomparator: {kind: label, labels: [a, b]}\n")
    done = shadowplane("tasks", "apply", "-f", str(config))
    assert done.returncode == 1, done.stdout
    assert re.search(r"task: 'stream' is reserved.*/v1/flags/stream", done.stderr), done.stderr
    assert "created" not in done.stdout


def test_the_collision_finder_itself() -> None:
    assert colliding_segments(["/v1/flags/{task}", "/v1/flags/stream", "/v1/flags"]) == {"stream"}
    assert colliding_segments(["/v1/tasks/{task}/gate", "/v1/tasks/{task}/windows"]) == set()
    assert colliding_segments(["/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags/x"]) == {
        "x"
    }

"""README, "Command line": `shadowplane tasks apply -f FILE` takes YAML or JSON, several
documents in one file, and `-` reads stdin — each document a task, applied through the same
action as the API's, credited to `cli:<user>`."""

from __future__ import annotations

import json

from sqlalchemy import select
from typer.testing import CliRunner

from controlplane.cli import app
from controlplane.db import get_engine, session_scope
from controlplane.models import AuditEntry
from tests.evalsets.helpers import cli_env

TWO_TASKS = """\
task: stdin_one
comparator: {kind: exact}
---
task: stdin_two
comparator: {kind: label, labels: [spam, ham]}
"""


def tasks(url: str) -> dict[str, str]:
    with session_scope(get_engine(url)) as session:
        rows = session.scalars(
            select(AuditEntry).where(AuditEntry.task.in_(["stdin_one", "stdin_two", "stdin_json"]))
        ).all()
        return {row.task: row.actor for row in rows if row.task}


def test_tasks_apply_reads_several_yaml_documents_from_stdin(sqlite_url: str) -> None:
    with cli_env(sqlite_url):
        done = CliRunner().invoke(app, ["tasks", "apply", "-f", "-"], input=TWO_TASKS)
    assert done.exit_code == 0, done.output
    assert "stdin_one: created (version 1" in done.output
    assert "stdin_two: created (version 1" in done.output
    actors = tasks(sqlite_url)
    assert set(actors) == {"stdin_one", "stdin_two"}
    assert all(actor.startswith("cli:") for actor in actors.values()), actors


def test_tasks_apply_reads_json_from_stdin(sqlite_url: str) -> None:
    document = json.dumps({"task": "stdin_json", "comparator": {"kind": "exact"}})
    with cli_env(sqlite_url):
        done = CliRunner().invoke(app, ["tasks", "apply", "-f", "-"], input=document)
        again = CliRunner().invoke(app, ["tasks", "apply", "-f", "-"], input=document)
    assert done.exit_code == 0, done.output
    assert "stdin_json: created (version 1" in done.output
    assert "stdin_json: unchanged (version 1" in again.output


def test_the_api_and_the_dashboard_listen_where_the_readme_says_by_default() -> None:
    """`shadowplane api` on 127.0.0.1:8000 and `shadowplane dashboard` on 127.0.0.1:8501
    unless told (README, "A five-minute tour" and "Dashboard")."""
    import inspect

    from controlplane import cli

    for command, port in ((cli.api, 8000), (cli.dashboard, 8501), (cli.demo, 8000)):
        parameters = inspect.signature(command).parameters
        assert parameters["port"].default == port, command.__name__
        if "host" in parameters:
            assert parameters["host"].default == "127.0.0.1", command.__name__


def test_tick_with_a_time_in_the_future_closes_the_windows_due_by_then(sqlite_url: str) -> None:
    """`shadowplane tick [--now ISO-TIME]`: one pass at the time given, which may be in the
    future — the windows of results posted just now are computed and closed."""
    from datetime import UTC, datetime, timedelta

    from tests.conftest import make_api, make_result

    for api in make_api(sqlite_url):
        now = datetime.now(UTC)
        ts = (now - timedelta(seconds=30)).isoformat()
        batch = {"results": [make_result(request_id=f"tick-{i}", ts=ts) for i in range(5)]}
        assert api.post_results(batch).json()["accepted"] == 5
        future = now + timedelta(hours=1)
        with cli_env(sqlite_url):
            done = CliRunner().invoke(app, ["tick", "--now", future.isoformat()])
        assert done.exit_code == 0, done.output
        rows = api.client.get(
            "/v1/tasks/ticket_classify/windows",
            params={
                "since": (now - timedelta(hours=1)).isoformat(),
                "until": future.isoformat(),
                "bucket": "all",
            },
            headers=api.headers("read"),
        ).json()["windows"]
        counted = [r for r in rows if r["n_results"]]
        assert sum(r["n_results"] for r in counted) == 5
        assert counted and all(r["closed"] for r in counted), counted

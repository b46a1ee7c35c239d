"""`shadowplane grade [--task T] [--json]`: grades now, keeps today's grade, prints one line
per task (task, tier, score, one reason) or the documents."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import select
from typer.testing import CliRunner

from controlplane.catalog.service import apply_config, no_task
from controlplane.cli import app
from controlplane.db import get_engine, session_scope
from controlplane.models import Task, TaskGrade
from controlplane.models.base import utcnow
from tests.evalsets.helpers import cli_env
from tests.grading.test_service import GRADED, Row, add_windows, register


def kept(url: str) -> dict[str, dict]:
    with session_scope(get_engine(url)) as session:
        rows = session.execute(select(Task.name, TaskGrade.document).join(Task)).all()
    return {name: document for name, document in rows}


def test_grade_prints_a_line_per_task_and_keeps_the_grades(sqlite_url: str) -> None:
    engine = get_engine(sqlite_url)
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    # A task with steady traffic and agreeing repeats, one that declares a high error cost,
    # and one with no traffic.
    task_id = register(engine, GRADED, versions={1: now - timedelta(days=30)})
    add_windows(
        engine,
        task_id,
        [
            Row(
                now - timedelta(hours=h),
                1,
                n=200,
                p50=120.0,
                p95=200.0,
                tokens=26000.0,
                pairs=10,
                agree=10,
            )
            for h in range(1, 49)
        ],
    )
    with session_scope(engine) as session:
        apply_config(session, {**GRADED, "task": "risky_task", "error_cost": 0.9}, actor="t")
        apply_config(session, {**GRADED, "task": "quiet_task"}, actor="t")

    with cli_env(sqlite_url):
        done = CliRunner().invoke(app, ["grade"])
    assert done.exit_code == 0, done.output
    documents = kept(sqlite_url)
    assert set(documents) == {"graded_task", "risky_task", "quiet_task"}
    lines = done.output.splitlines()
    assert lines[0].split() == ["task", "tier", "score", "why"]
    assert [line.split()[0] for line in lines[1:]] == ["graded_task", "quiet_task", "risky_task"]
    for line in lines[1:]:
        name, tier, score, *_ = line.split()
        d = documents[name]
        assert tier == d["tier"]
        assert score == ("-" if d["score"] is None else f"{d['score']:.3f}")
        why = d["missing"] if d["tier"] == "insufficient" else d["reasons"]
        if why:
            assert why[0][:40] in line
        assert len(line) <= 100
    assert documents["risky_task"]["tier"] == "keep_cloud"
    assert documents["quiet_task"]["tier"] == "insufficient"
    assert documents["graded_task"]["span"]["results"] == 200 * 48

    with cli_env(sqlite_url):
        every = CliRunner().invoke(app, ["grade", "--json"])
        one = CliRunner().invoke(app, ["grade", "--task", "risky_task", "--json"])
    assert every.exit_code == 0 and one.exit_code == 0, every.output + one.output
    graded = json.loads(every.output)["grades"]
    assert [g["task"] for g in graded] == ["graded_task", "quiet_task", "risky_task"]
    assert {g["task"]: g for g in graded} | {"risky_task": json.loads(one.output)} == kept(
        sqlite_url
    )


def test_grade_refuses_an_unknown_task(sqlite_url: str) -> None:
    with cli_env(sqlite_url):
        done = CliRunner().invoke(app, ["grade", "--task", "nope"])
    assert done.exit_code == 1
    assert f"error: {no_task('nope')}" in done.output

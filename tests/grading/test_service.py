"""Grades computed, kept and read (controlplane.grading.service) on SQLite and PostgreSQL:
the traffic a grade reads equals a pandas reference over the same window rows, one row per
task and UTC day (the day's latest computation replaces the earlier one), windows of an
older config version or outside the span ignored."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas
import pytest
from sqlalchemy import Engine, func, select, update

from controlplane.catalog import service as catalog
from controlplane.catalog.service import apply_config, no_task
from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.grading import service
from controlplane.models import Task, TaskConfigVersion, TaskGrade, Window, WindowMetrics

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
VETO = 0.7
GRADED: dict[str, Any] = {
    "task": "graded_task",
    "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
    "window_seconds": 3600,
}


@dataclass(frozen=True)
class Row:
    """One window's `all` row as a test writes it."""

    start: datetime
    version: int
    n: int
    p50: float | None
    p95: float | None
    tokens: float
    pairs: int = 0
    agree: int = 0
    invalid: int = 0
    diffs: dict[str, int] | None = None


def register(engine: Engine, config: dict[str, Any], *, versions: dict[int, datetime]) -> int:
    """Apply the config once per version (each a little different) and date each version
    as given: the task's current version is the highest."""
    with session_scope(engine) as session:
        for version in sorted(versions):
            applied = apply_config(
                session, {**config, "keep_agreeing_rate": 0.01 * version}, actor="test"
            )
            assert applied.version == version
        task_id = applied.task_id
        for version, created in versions.items():
            session.execute(
                update(TaskConfigVersion)
                .where(TaskConfigVersion.task_id == task_id, TaskConfigVersion.version == version)
                .values(created_at=created)
            )
    return task_id


def add_windows(engine: Engine, task_id: int, rows: list[Row], *, seconds: int = 3600) -> None:
    """Each row as a window, its `all` metrics, and a bucket row the grade must not read."""
    with session_scope(engine) as session:
        for row in rows:
            window = Window(
                task_id=task_id,
                window_start=row.start,
                window_end=row.start + timedelta(seconds=seconds),
                length_buckets=[128, 512, 2048],
                config_version=row.version,
                closed_at=row.start + timedelta(seconds=seconds),
            )
            session.add(window)
            session.flush()
            for bucket, scale in (("all", 1), ("128-511", 7)):
                session.add(
                    WindowMetrics(
                        window_id=window.id,
                        task_id=task_id,
                        window_start=row.start,
                        bucket=bucket,
                        n_results=row.n * scale,
                        n_pairs=row.n,
                        n_agree=row.n,
                        n_conflict=0,
                        n_invalid=0,
                        n_edge_runs=row.n,
                        n_edge_errors=0,
                        n_edge_fails=0,
                        n_edge_attempts=row.n,
                        n_offload_fails=0,
                        n_degraded=0,
                        n_served_edge=0,
                        n_repeat_pairs=row.pairs * scale,
                        n_repeat_agree=row.agree * scale,
                        n_repeat_invalid=row.invalid * scale,
                        repeat_diffs=row.diffs if bucket == "all" else {"x": 99},
                        input_tokens_sum=row.tokens * scale,
                        input_tokens_p50=None if row.p50 is None else row.p50 * scale,
                        input_tokens_p95=None if row.p95 is None else row.p95 * scale,
                        edge_cost=0.0,
                        cloud_cost=0.0,
                        baseline_cost=0.0,
                    )
                )


def random_rows(rng: random.Random, *, versions: tuple[int, ...], hours: int) -> list[Row]:
    """A window per hour over the `hours` before NOW (and two at or after it): random
    counts, lengths, repeats, some empty windows, some versions older than the current."""
    rows = []
    for h in range(-hours, 2):
        n = rng.choice([0, rng.randrange(1, 400)])
        pairs = rng.randrange(0, 8) if n else 0
        agree = rng.randrange(0, pairs + 1)
        p50 = rng.randrange(100, 800) / 2 if n else None  # halves: rounded up on both backends
        rows.append(
            Row(
                start=NOW + timedelta(hours=h),
                version=rng.choice(versions),
                n=n,
                p50=p50,
                p95=None if p50 is None else p50 * rng.uniform(1, 9),
                tokens=float(n * rng.randrange(50, 900)),
                pairs=pairs,
                agree=agree,
                invalid=rng.randrange(0, pairs - agree + 1),
                diffs=rng.choice([None, {"amount": rng.randrange(0, 3), "note": pairs - agree}])
                if pairs
                else None,
            )
        )
    return rows


def weighted_median(frame: pandas.DataFrame, column: str) -> float | None:
    """The smallest value whose rows, with those below it, hold half the results or more,
    to the nearest whole token (halves up)."""
    kept = frame[(frame.n > 0) & frame[column].notna()].sort_values(column)
    if kept.empty:
        return None
    reached = kept.n.cumsum() * 2 >= kept.n.sum()
    return float(math.floor(kept[column][reached].iloc[0] + 0.5))


def reference(rows: list[Row], *, version: int, since: datetime) -> dict[str, Any]:
    """The traffic a grade should read, from the rows written (pandas)."""
    frame = pandas.DataFrame([vars(r) for r in rows])
    span = frame[(frame.version == version) & (frame.start >= since) & (frame.start < NOW)]
    diffs: Counter[str] = Counter()
    for found in span[span.pairs > 0].diffs:
        diffs.update(found or {})
    return {
        "since": since,
        "until": NOW,
        "results": int(span.n.sum()),
        "days": span[span.n > 0].start.map(lambda t: t.date()).nunique(),
        "input_p50": weighted_median(span, "p50"),
        "input_p95": weighted_median(span, "p95"),
        "input_tokens_sum": float(span.tokens.sum()),
        "repeat_pairs": int(span.pairs.sum()),
        "repeat_agree": int(span.agree.sum()),
        "repeat_invalid": int(span.invalid.sum()),
        "repeat_diffs": dict(diffs),
    }


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    yield get_engine(db_url)


def read(engine: Engine, name: str) -> dict[str, Any]:
    from controlplane.catalog.service import runtime_or_404

    with session_scope(engine) as session:
        found = service.read_traffic(session, [runtime_or_404(session, name)], now=NOW)[name]
    out = {
        "since": found.since,
        "until": found.until,
        "results": found.results,
        "days": found.days,
        "input_p50": found.input_p50,
        "input_p95": found.input_p95,
        "input_tokens_sum": found.input_tokens_sum,
        "repeat_pairs": found.repeat_pairs,
        "repeat_agree": found.repeat_agree,
        "repeat_invalid": found.repeat_invalid,
        "repeat_diffs": dict(found.repeat_diffs),
    }
    return out


def test_the_traffic_read_is_the_current_versions_windows_over_the_span(engine: Engine) -> None:
    # Version 2, current, began 3.5 days ago: the span (7 days) starts there, and the
    # windows of version 1 after it are not read either.
    started = NOW - timedelta(days=3, hours=12)
    task_id = register(engine, GRADED, versions={1: NOW - timedelta(days=30), 2: started})
    rows = random_rows(random.Random(7), versions=(1, 2, 2, 2), hours=9 * 24)
    add_windows(engine, task_id, rows)
    expected = reference(rows, version=2, since=started)
    assert expected["results"] > 0 and expected["days"] == 4  # the test reads something
    assert expected["repeat_diffs"]
    got = read(engine, "graded_task")
    assert got == expected


def test_the_span_is_the_configured_one_when_the_version_is_older(engine: Engine) -> None:
    config = {**GRADED, "task": "span_task", "grading": {"span": "36h"}}
    task_id = register(engine, config, versions={1: NOW - timedelta(days=60)})
    rows = random_rows(random.Random(3), versions=(1,), hours=72)
    add_windows(engine, task_id, rows)
    expected = reference(rows, version=1, since=NOW - timedelta(hours=36))
    assert read(engine, "span_task") == expected


def test_a_task_without_windows_reads_nothing(engine: Engine) -> None:
    register(engine, {**GRADED, "task": "quiet_task"}, versions={1: NOW - timedelta(days=1)})
    got = read(engine, "quiet_task")
    assert got == {
        "since": NOW - timedelta(days=1),
        "until": NOW,
        "results": 0,
        "days": 0,
        "input_p50": None,
        "input_p95": None,
        "input_tokens_sum": 0.0,
        "repeat_pairs": 0,
        "repeat_agree": 0,
        "repeat_invalid": 0,
        "repeat_diffs": {},
    }


def grade_rows(engine: Engine, task_id: int) -> list[tuple[Any, ...]]:
    with session_scope(engine) as session:
        return [
            tuple(r)
            for r in session.execute(
                select(
                    TaskGrade.day,
                    TaskGrade.tier,
                    TaskGrade.computed_at,
                    TaskGrade.document,
                    TaskGrade.config_version,
                )
                .where(TaskGrade.task_id == task_id)
                .order_by(TaskGrade.day)
            )
        ]


def test_one_grade_per_task_and_day_the_latest_of_the_day_kept(engine: Engine) -> None:
    task_id = register(engine, GRADED, versions={1: NOW - timedelta(days=30)})
    add_windows(engine, task_id, random_rows(random.Random(1), versions=(1,), hours=48))
    later = NOW + timedelta(hours=3)
    with session_scope(engine) as session:
        first = service.grade_task(session, "graded_task", veto=VETO, now=NOW)
    with session_scope(engine) as session:
        second = service.grade_task(session, "graded_task", veto=VETO, now=later)
    rows = grade_rows(engine, task_id)
    assert len(rows) == 1
    day, tier, computed_at, document, _ = rows[0]
    assert day == NOW.date() and computed_at == later
    assert document == second and tier == second["tier"]
    assert first["span"]["results"] != second["span"]["results"]  # the later one read more

    tomorrow = NOW + timedelta(days=1)
    with session_scope(engine) as session:
        third = service.grade_task(session, "graded_task", veto=VETO, now=tomorrow)
        assert service.latest_grade(session, "graded_task") == third
        history = service.grade_history(session, "graded_task", 7, now=tomorrow)
    assert [r[0] for r in grade_rows(engine, task_id)] == [NOW.date(), tomorrow.date()]
    assert [h["day"] for h in history] == [tomorrow.date().isoformat(), NOW.date().isoformat()]
    assert [h["grade"] for h in history] == [third, second]


def test_grade_all_keeps_a_grade_for_every_task(engine: Engine) -> None:
    task_id = register(engine, GRADED, versions={1: NOW - timedelta(days=30)})
    add_windows(engine, task_id, random_rows(random.Random(2), versions=(1,), hours=24))
    with session_scope(engine) as session:
        done = service.grade_all(session, veto=VETO, now=NOW)
        names = [t for (t,) in session.execute(select(Task.name).order_by(Task.name))]
        latest = service.latest_grades(session)
        kept = session.scalar(select(func.count()).select_from(TaskGrade))
    assert [d["task"] for d in done] == names and len(names) >= 1
    assert latest == {d["task"]: d for d in done}
    assert kept == len(names)
    assert {d["task"]: d["span"]["results"] for d in done}["graded_task"] == reference(
        random_rows(random.Random(2), versions=(1,), hours=24),
        version=1,
        since=NOW - timedelta(days=7),
    )["results"]


def test_current_grade_computes_once_a_day_and_again_for_a_new_version(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = register(engine, GRADED, versions={1: NOW - timedelta(days=30)})
    with session_scope(engine) as session:
        assert service.latest_grade(session, "graded_task") is None
        first = service.current_grade(session, "graded_task", veto=VETO, now=NOW)
        again = service.current_grade(
            session, "graded_task", veto=VETO, now=NOW + timedelta(hours=1)
        )
    assert again == first  # kept, not computed again
    with session_scope(engine) as session:
        apply_config(session, {**GRADED, "error_cost": 0.9}, actor="test")
    # Processes see a new version within a second (the config cache); this one at once.
    monkeypatch.setattr(catalog, "_runtimes", {})
    with session_scope(engine) as session:
        changed = service.current_grade(
            session, "graded_task", veto=VETO, now=NOW + timedelta(hours=2)
        )
    rows = grade_rows(engine, task_id)
    assert len(rows) == 1
    _, _, computed_at, document, version = rows[0]
    assert (computed_at, version, document) == (NOW + timedelta(hours=2), 2, changed)


def test_an_unknown_task_is_refused_with_the_shared_words(engine: Engine) -> None:
    with session_scope(engine) as session:
        for call in (
            lambda: service.grade_task(session, "nope", veto=VETO, now=NOW),
            lambda: service.latest_grade(session, "nope"),
            lambda: service.current_grade(session, "nope", veto=VETO, now=NOW),
            lambda: service.grade_history(session, "nope", 7),
        ):
            with pytest.raises(ActionError) as refused:
                call()
            assert (refused.value.status, refused.value.detail) == (404, no_task("nope"))

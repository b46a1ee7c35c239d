"""A graded task for the dashboard's tests: a day and a half of hourly windows stored for a
task of the seeded database (its current config version, every bucket and `all`, with
repeat pairs in some buckets only and per-field repeat differences), then graded by the
grading service as the daily job grades it. The tests read the kept grade back through
the services; nothing here writes a grade document by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.grading.service import grade_task
from controlplane.ingest.buckets import bucket_labels
from controlplane.metrics.fields import ALL
from controlplane.models import TaskConfigVersion, Window, WindowMetrics

HOURS = 36
VETO = 0.7
# Per window and bucket (in the task's bucket order): results, agreeing pairs, repeat pairs
# and agreeing repeat pairs. The two long buckets have no repeat pairs: no floor there.
PER_BUCKET = [(40, 38, 4, 4), (40, 36, 6, 5), (15, 10, 0, 0), (5, 2, 0, 0)]
# Input length in `all`: a long tail (P95 far above P50).
INPUT_P50, INPUT_P95, MEAN_INPUT = 400.0, 2000.0, 640.0
# Repeat pairs that differed on each field, per window: amount on 2 of 10 (noisy), currency
# on 1 every fourth window (under the noisy-field rate).


def diffs(k: int) -> dict[str, int]:
    return {"amount": 2, **({"currency": 1} if k % 4 == 0 else {})}


@dataclass
class Graded:
    task: str
    grade: dict[str, Any]
    buckets: list[str]
    first: datetime
    last: datetime


def _metrics(window: Window, bucket: str, n: tuple[int, int, int, int]) -> WindowMetrics:
    results, agree, pairs, repeat_agree = n
    return WindowMetrics(
        window_id=window.id,
        task_id=window.task_id,
        window_start=window.window_start,
        bucket=bucket,
        n_results=results,
        n_pairs=results,
        n_agree=agree,
        n_conflict=results - agree,
        n_invalid=0,
        n_edge_runs=results,
        n_edge_errors=0,
        n_edge_fails=0,
        n_edge_attempts=0,
        n_offload_fails=0,
        n_degraded=0,
        n_served_edge=0,
        n_repeat_pairs=pairs,
        n_repeat_agree=repeat_agree,
        n_repeat_invalid=0,
        input_tokens_sum=results * MEAN_INPUT,
        input_tokens_p50=INPUT_P50,
        input_tokens_p95=INPUT_P95,
        edge_cost=0.0,
        cloud_cost=0.0,
        baseline_cost=0.0,
    )


def seed_graded(engine: Engine, task: str) -> Graded:
    """Store the windows after the task's current config version began, and grade it at
    the end of the last one (its span: the version's start to then)."""
    with session_scope(engine) as session:
        runtime = task_runtimes(session, {task})[task]
        started = session.scalar(
            select(TaskConfigVersion.created_at).where(
                TaskConfigVersion.task_id == runtime.id,
                TaskConfigVersion.version == runtime.config_version,
            )
        )
        assert started is not None
        first = started.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        buckets = bucket_labels(tuple(runtime.config.length_buckets))
        assert len(buckets) == len(PER_BUCKET)
        for k in range(HOURS):
            start = first + timedelta(hours=k)
            window = Window(
                task_id=runtime.id,
                window_start=start,
                window_end=start + timedelta(hours=1),
                length_buckets=list(runtime.config.length_buckets),
                config_version=runtime.config_version,
                closed_at=start + timedelta(hours=1, minutes=2),
            )
            session.add(window)
            session.flush()
            rows = [_metrics(window, b, n) for b, n in zip(buckets, PER_BUCKET, strict=True)]
            total = tuple(sum(n[i] for n in PER_BUCKET) for i in range(4))
            every = _metrics(window, ALL, total)  # type: ignore[arg-type]
            every.repeat_diffs = diffs(k)
            session.add_all([*rows, every])
        last = first + timedelta(hours=HOURS - 1)
    with session_scope(engine) as session:
        found = grade_task(session, task, veto=VETO, now=last + timedelta(hours=1))
    return Graded(task, found, buckets, first, last)

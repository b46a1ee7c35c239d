"""Traffic that grades a task `offload`, for tests whose subject is something else but
that promote a task out of shadow without `force` (leaving shadow needs the tier
`offload`).

`give_offload_grade` writes the closed windows such traffic leaves — a window row and its
metric rows, bucket `all` and every length bucket, under the task's current config
version — as the metrics pass would have stored them for cloud-served traffic: short
inputs, many calls a day, and cloud repeat pairs that all agree. The real `grade()` reads
them through the grading service like any other windows; nothing here computes a tier.

Where the windows lie: a day and more before `now`, the last ending two hours before it.
A test's gate reads the windows closed since the stage change (`rollout/repository.py`,
`stage_windows`), and the tests here move that change at most an hour or so back, so these
windows stay outside it; they hold no edge pairs either (the edge never ran on them), so
no agreement, failure or route figure of the test counts them. The task's current config
version is dated before the first of them, as if it had been applied then (a grade reads
only the traffic of the current config version).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from controlplane.catalog.schemas import parse_config
from controlplane.db import get_engine, session_scope
from controlplane.ingest.buckets import bucket_labels, length_bucket
from controlplane.metrics import lengths
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import empty_metrics
from controlplane.models import Task, TaskConfigVersion, Window, WindowMetrics

# Nine windows, six hours apart, from 50 h to 2 h before now: traffic on three UTC days.
WINDOWS = 9
EVERY = timedelta(hours=6)
LAST_ENDS_BEFORE = timedelta(hours=2)
# Per window: 3,000 results (about 13,000 calls a day over the span) and 1% of them asked
# twice of the cloud (or the task's minimums, when higher).
RESULTS_PER_WINDOW = 3000
REPEAT_SHARE = 0.01
# Input lengths: P50 and P95 close together and far under any edge limit (no long tail).
P50_TOKENS, P95_TOKENS, MEAN_TOKENS = 50.0, 90.0, 55.0


def give_offload_grade(
    url: str, task: str, *, now: datetime | None = None, input_lengths: bool = False
) -> list[datetime]:
    """Write WINDOWS closed windows of offload-grade traffic for `task` (see the module);
    returns their starts. `now` (default: the clock) is the time they are placed back from:
    a test whose passes run at a clock of its own passes that clock. `input_lengths` also
    keeps each window's input-length histogram (every input at P50 tokens), as the metrics
    pass stores it: a grade of this traffic then gives the task the input baseline it
    leaves shadow with (without, the grade holds no lengths and no baseline comes of it)."""
    return write_graded_traffic(url, task, now=now, input_lengths=input_lengths)


def write_graded_traffic(
    url: str,
    task: str,
    *,
    now: datetime | None = None,
    p50: float = P50_TOKENS,
    p95: float = P95_TOKENS,
    mean: float = MEAN_TOKENS,
    self_agreement: float = 1.0,
    input_lengths: bool = False,
) -> list[datetime]:
    """`give_offload_grade` with other traffic: input lengths (P50, P95 and mean tokens of
    every window) and the share of repeat pairs on which the cloud agreed with itself. Under
    the defaults every input lies under the first bucket boundary; otherwise the counts sit
    in the bucket holding P50 (a grade reads bucket `all`)."""
    now = now or datetime.now(UTC)
    with session_scope(get_engine(url)) as session:
        found = session.scalars(select(Task).where(Task.name == task)).one()
        version = session.scalars(
            select(TaskConfigVersion).where(
                TaskConfigVersion.task_id == found.id,
                TaskConfigVersion.version == found.config_version,
            )
        ).one()
        config = parse_config(version.config)
        grading = config.grading
        seconds = config.window_seconds
        results = max(RESULTS_PER_WINDOW, math.ceil(grading.min_results / WINDOWS))
        repeats = max(round(results * REPEAT_SHARE), math.ceil(grading.min_repeat_pairs / WINDOWS))
        agree = round(repeats * self_agreement)
        if (p50, p95, mean) == (P50_TOKENS, P95_TOKENS, MEAN_TOKENS) and config.length_buckets:
            # Short traffic stays short whatever the task's buckets: under the first bound.
            p95 = min(p95, config.length_buckets[0] - 1)
            p50, mean = min(p50, p95), min(mean, p95)
        holding = length_bucket(int(p50), config.length_buckets)
        last_end = now - LAST_ENDS_BEFORE
        starts = []
        for k in range(WINDOWS):
            at = last_end - timedelta(seconds=seconds) - EVERY * (WINDOWS - 1 - k)
            starts.append(datetime.fromtimestamp(at.timestamp() // seconds * seconds, UTC))
        if version.created_at > starts[0] - timedelta(seconds=seconds):
            version.created_at = starts[0] - timedelta(seconds=seconds)
        for start in starts:
            end = start + timedelta(seconds=seconds)
            window = Window(
                task_id=found.id,
                window_start=start,
                window_end=end,
                length_buckets=list(config.length_buckets),
                config_version=found.config_version,
                computed_at=end,
                closed_at=end + timedelta(seconds=config.allowed_lateness_seconds),
                alerts_evaluated=True,
                review_sampled=True,
            )
            session.add(window)
            session.flush()
            for bucket in (*bucket_labels(config.length_buckets), ALL):
                row: dict[str, Any] = empty_metrics(bucket)
                if bucket in (holding, ALL):
                    row.update(
                        n_results=results,
                        n_repeat_pairs=repeats,
                        n_repeat_agree=agree,
                        input_tokens_sum=results * mean,
                        input_tokens_p50=p50,
                        input_tokens_p95=p95,
                    )
                if bucket == ALL and input_lengths:
                    row["input_hist"] = lengths.histogram([p50] * results)
                session.add(
                    WindowMetrics(task_id=found.id, window_id=window.id, window_start=start, **row)
                )
        return starts


def offload_grade_of_lengths(session: Any, task: Any, tokens: list[int], at: datetime) -> None:
    """A stored `offload` grade of `task` computed at `at` whose input lengths are `tokens`:
    the baseline a task in shadow is compared with (controlplane.metrics.shift), written
    directly for tests about that comparison, not about grading."""
    from controlplane.metrics import lengths
    from controlplane.models import TaskGrade

    session.add(
        TaskGrade(
            task_id=task.id,
            day=at.date(),
            tier="offload",
            score=0.9,
            config_version=task.config_version,
            computed_at=at,
            document={
                "tier": "offload",
                "computed_at": at.isoformat(),
                "span": {"since": None, "until": None},
                "input_lengths": {
                    "counts": lengths.histogram(tokens),
                    "n": len(tokens),
                    "over_cap": None,
                },
            },
        )
    )

"""What the cost and input-shift rules and the input-shift alert read of the windows: each
closed window's `all` row reduced to its counts, costs and input-length histogram, and the
task's input baseline (docs/evidence.md, "Cost and input shift").

The baseline is the input-length distribution a task was graded and promoted on: kept on
the task when it leaves shadow (`tasks.input_baseline`) and read while it is in canary or
full; elsewhere the histogram of its latest `offload` grade (a task in shadow is compared
with the traffic it was graded on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, null, select
from sqlalchemy.orm import Session

from controlplane.metrics import lengths
from controlplane.metrics.fields import ALL
from controlplane.metrics.repository import epoch_seconds
from controlplane.metrics.windows import of_length_epoch
from controlplane.models import Task, TaskGrade, Window, WindowMetrics


@dataclass(frozen=True, slots=True)
class SpanWindow:
    """One closed window's `all` row as the span rules read it; `window` is its index
    (start // window_seconds)."""

    window: int
    n_results: int
    edge_cost: float
    cloud_cost: float
    baseline_cost: float
    input_hist: tuple[int, ...] | None = None
    n_over_cap: int | None = None

    @property
    def savings(self) -> float:
        """What offloading saved in this window: the cloud baseline minus what was paid."""
        return self.baseline_cost - (self.edge_cost + self.cloud_cost)


@dataclass(frozen=True, slots=True)
class Baseline:
    """An input-length distribution to compare with: counts per `lengths` bin, how many
    were over the cap then, and where it came from, in words."""

    counts: tuple[int, ...]
    over_cap: int | None
    source: str
    start: str | None = None
    end: str | None = None
    # The max_input_tokens `over_cap` was counted against (None: no cap, or not known).
    cap: int | None = None

    @property
    def n(self) -> int:
        return sum(self.counts)

    def document(self) -> dict[str, Any]:
        return {
            "counts": list(self.counts),
            "n": self.n,
            "over_cap": self.over_cap,
            "source": self.source,
            "start": self.start,
            "end": self.end,
            "cap": self.cap,
        }


def baseline_from(document: dict[str, Any] | None) -> Baseline | None:
    if not document or not document.get("counts"):
        return None
    counts = tuple(int(c) for c in document["counts"])
    if not sum(counts):
        return None
    return Baseline(
        counts,
        document.get("over_cap"),
        str(document.get("source") or "baseline"),
        document.get("start"),
        document.get("end"),
        document.get("cap"),
    )


def span_windows(
    session: Session,
    task_id: int,
    seconds: int,
    since: datetime,
    until: datetime | None = None,
    *,
    hist_since: datetime | None = None,
) -> list[SpanWindow]:
    """The task's closed windows that start in [since, until), oldest first, as the span
    rules read them: one light read of their `all` rows; with `hist_since`, the
    input-length histograms only of the windows from then on (JSON is the costly part)."""
    hist: Any = WindowMetrics.input_hist
    if hist_since is not None:
        hist = case((Window.window_start >= hist_since, WindowMetrics.input_hist), else_=null())
    query = (
        select(
            epoch_seconds(Window.window_start),
            epoch_seconds(Window.window_end),
            WindowMetrics.n_results,
            WindowMetrics.edge_cost,
            WindowMetrics.cloud_cost,
            WindowMetrics.baseline_cost,
            hist,
            WindowMetrics.n_over_cap,
        )
        .join(WindowMetrics, WindowMetrics.window_id == Window.id)
        .where(
            Window.task_id == task_id,
            Window.closed_at.is_not(None),
            Window.window_start >= since,
            WindowMetrics.bucket == ALL,
        )
        .order_by(Window.window_start)
    )
    if until is not None:
        query = query.where(Window.window_start < until)
    # Core, not the ORM: a span is hundreds of rows read at every pass.
    return [
        SpanWindow(
            start // seconds,
            n,
            edge,
            cloud,
            base,
            tuple(hist) if hist is not None else None,
            over,
        )
        for start, end, n, edge, cloud, base, hist, over in session.connection().execute(query)
        # Windows of the current length on its boundaries only.
        if of_length_epoch(start, end, seconds)
    ]


def histogram_between(
    session: Session, task_id: int, seconds: int, since: datetime, until: datetime
) -> tuple[list[int], int | None]:
    """The input-length histogram of the task's closed windows in [since, until), and how
    many of those inputs were over the cap (None when no window had a cap)."""
    rows = span_windows(session, task_id, seconds, since, until)
    over = [w.n_over_cap for w in rows if w.n_over_cap is not None]
    return lengths.add(w.input_hist for w in rows), (sum(over) if over else None)


def latest_offload_baseline(session: Session, task_id: int) -> Baseline | None:
    """The histogram of the task's latest `offload` grade, if it kept one."""
    document = session.scalar(
        select(TaskGrade.document)
        .where(TaskGrade.task_id == task_id, TaskGrade.tier == "offload")
        .order_by(TaskGrade.day.desc())
        .limit(1)
    )
    return grade_baseline(document)


def grade_baseline(grade: dict[str, Any] | None) -> Baseline | None:
    """The baseline a grade document gives: the input lengths over the span it read."""
    if not grade:
        return None
    traffic = grade.get("input_lengths") or {}
    span = grade.get("span") or {}
    found = baseline_from(
        {
            "counts": traffic.get("counts"),
            "over_cap": traffic.get("over_cap"),
            "source": f"the {grade.get('tier')} grade of {str(grade.get('computed_at'))[:10]}",
            "start": span.get("since"),
            "end": span.get("until"),
            "cap": traffic.get("cap"),
        }
    )
    return found


def baseline(session: Session, task: Task) -> Baseline | None:
    """The distribution the task's input lengths are compared with now: in canary and full,
    the one kept when it left shadow; elsewhere (and for a task promoted before baselines
    were kept) its latest offload grade's — after an input shift and a re-arm, the grade
    over traffic since the shift, never the baseline the shift was measured against."""
    if task.stage in ("canary", "full"):
        kept = baseline_from(task.input_baseline)
        if kept is not None:
            return kept
    return latest_offload_baseline(session, task.id)


def over_cap_share(windows: Sequence[SpanWindow]) -> float | None:
    counted = [w for w in windows if w.n_over_cap is not None]
    n = sum(w.n_results for w in counted)
    return sum(w.n_over_cap or 0 for w in counted) / n if n else None

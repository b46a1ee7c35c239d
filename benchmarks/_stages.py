"""Where ingest's time goes, per result: the server's own functions timed in place.

`StageClock` wraps named functions of the ingest modules for the length of a `with` block;
each call's time, less the time of the timed calls inside it, is added to its stage, so a
stage's figure is its own work and the stages add up to the whole. The real pipeline runs
(`validate_body`, then `ingest` in one transaction on PostgreSQL), nothing is re-implemented
here: a renamed function fails loudly instead of silently dropping out of the table.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import wraps
from types import ModuleType
from typing import Any

from controlplane.ingest import repository, scoring, service, validation

# (stage, module, attribute): the attribute is looked up where its callers find it.
STAGES: list[tuple[str, ModuleType, str]] = [
    ("body decode and validation", validation, "validate_body"),
    ("per-item checks", validation, "_refuse_impossible"),
    ("per-item checks", scoring, "event_time"),
    ("per-item checks", scoring, "_refuse_non_finite"),
    ("scoring (comparison)", scoring, "_compare"),
    ("scoring (comparison)", scoring, "_repeat_columns"),
    ("bucket and sticky hash", scoring, "bucket_of"),
    ("bucket and sticky hash", scoring, "length_bucket"),
    ("id hashing (ids, input, cloud print)", scoring, "hashed_id"),
    ("id hashing (ids, input, cloud print)", scoring, "_input_hash"),
    ("id hashing (ids, input, cloud print)", scoring, "_cloud_print"),
    ("payload shaping and masking", scoring, "keep_probability"),
    ("payload shaping and masking", scoring, "keep_draw"),
    ("payload shaping and masking", scoring, "_redacted"),
    ("payload shaping and masking", scoring, "_masked"),
    ("payload shaping and masking", service, "stored_form"),
    ("row building", service, "score"),
    ("batch bookkeeping (dedup, report)", service, "ingest"),
    ("free repeat pairs (one read per task)", service, "free_repeats"),
    ("database write (keys, COPY)", repository, "insert_results"),
]
# Timed by the caller around the transaction: task lookup, session, commit.
TRANSACTION = "transaction (task lookup, commit)"
ORDER = [*dict.fromkeys(stage for stage, _, _ in STAGES), TRANSACTION]


class StageClock:
    """Exclusive time per stage (seconds), over every timed call since it was made: wall
    time, or with `clock=time.thread_time` this thread's CPU time (which a busy machine
    inflates far less, and which leaves out the waits on PostgreSQL)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._children: list[float] = []
        self._clock = clock

    def timed(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            self._children.append(0.0)
            started = self._clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = self._clock() - started
                self.totals[stage] += elapsed - self._children.pop()
                if self._children:
                    self._children[-1] += elapsed

        return run

    @contextlib.contextmanager
    def installed(self) -> Iterator[StageClock]:
        """The stage functions timed within the block (each restored after it)."""
        saved = []
        try:
            for stage, module, name in STAGES:
                original = getattr(module, name)  # AttributeError: the table is out of date
                saved.append((module, name, original))
                setattr(module, name, self.timed(stage, original))
            yield self
        finally:
            for module, name, original in reversed(saved):
                setattr(module, name, original)

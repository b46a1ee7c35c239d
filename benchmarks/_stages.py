"""Where ingest's time goes, per result: the server's own functions, sampled as they run.

`StageSampler` takes a sample every half millisecond of this process's CPU time (or of wall
time) while the real pipeline runs (`validate_body`, then `ingest` in one transaction on
PostgreSQL): each sample counts for the innermost stage function on the stack, so a stage's
share is its own work, the stages add up to the whole, and nothing is wrapped or
re-implemented (the samples cost the path well under 1%). A renamed function fails loudly
instead of silently dropping out of the table.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import signal
import time
from collections import Counter
from collections.abc import Iterator
from types import CodeType, FrameType, ModuleType

from controlplane import db
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
    ("batch bookkeeping (task lookup, dedup, report)", service, "ingest"),
    ("batch bookkeeping (task lookup, dedup, report)", service, "store"),
    ("free repeat pairs (one read per task)", service, "free_repeats"),
    ("database write (keys, COPY)", repository, "insert_results"),
    ("transaction (session, commit)", db, "in_transaction"),
]
OUTSIDE = "the rest (this loop, the caller)"
ORDER = [*dict.fromkeys(stage for stage, _, _ in STAGES), OUTSIDE]
# Half a millisecond: thousands of samples a run, each handled in a few microseconds.
INTERVAL = 0.0005


def stage_codes() -> dict[CodeType, str]:
    """The code object of each stage function (through lru_cache and other wrappers)."""
    codes = {}
    for stage, module, name in STAGES:
        function = inspect.unwrap(getattr(module, name))  # AttributeError: table out of date
        code = getattr(function, "__code__", None)
        if code is None:
            raise TypeError(f"{module.__name__}.{name} is not a Python function: time it otherwise")
        codes[code] = stage
    return codes


class StageSampler:
    """Samples per stage, and the time they stand for (seconds) over the sampled blocks."""

    def __init__(self, cpu: bool) -> None:
        self.cpu = cpu
        self.samples: Counter[str] = Counter()
        self.seconds = 0.0
        self.gc_seconds = 0.0  # in the cyclic garbage collector (wall), over the blocks
        self._codes = stage_codes()
        self._gc_started = 0.0

    def _gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_started

    def _sample(self, _signum: int, frame: FrameType | None) -> None:
        while frame is not None:
            stage = self._codes.get(frame.f_code)
            if stage is not None:
                self.samples[stage] += 1
                return
            frame = frame.f_back
        self.samples[OUTSIDE] += 1

    @contextlib.contextmanager
    def sampling(self) -> Iterator[StageSampler]:
        """Sample the block (run it in the main thread)."""
        timer, sig = (
            (signal.ITIMER_PROF, signal.SIGPROF)
            if self.cpu
            else (signal.ITIMER_REAL, signal.SIGALRM)
        )
        clock = time.process_time if self.cpu else time.perf_counter
        previous = signal.signal(sig, self._sample)
        gc.callbacks.append(self._gc)
        started = clock()
        signal.setitimer(timer, INTERVAL, INTERVAL)
        try:
            yield self
        finally:
            signal.setitimer(timer, 0)
            self.seconds += clock() - started
            gc.callbacks.remove(self._gc)
            signal.signal(sig, previous)

    def share(self, stage: str) -> float:
        """The seconds a stage stands for: its share of the samples, of the time sampled."""
        total = sum(self.samples.values())
        return self.samples[stage] / total * self.seconds if total else 0.0

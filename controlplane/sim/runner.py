"""Playing routing services against a running API over HTTP, in real time, as routers would
(docs/architecture.md, "The traffic simulator").

Requests are routed by `FlagClient` and reported by `ResultReporter` exactly as README.md
("For routing services") tells a router to, so the simulator exercises the client too. On
the share of requests the flag's `repeat_rate` asks for, the cloud answers a second time
(`cloud_repeat`, from the task's profile).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from controlplane.client import FlagClient, ResultReporter, Route, wants_repeat
from controlplane.sim.profiles import (
    EDGE_MODEL,
    GENERATORS,
    costlier,
    eligible,
    serve,
    with_repeat,
)

MAX_OUTBOX = 200_000
# Seconds `stream` waits at the end for the reporters to deliver what is queued.
FLUSH_SECONDS = 60.0


@dataclass
class Totals:
    generated: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    dropped: int = 0
    served_edge: int = 0
    # The task's flag as this router holds it now: "canary 10% edge, version 4", or
    # "none, cloud only" (no flag for the task), "starting, …", "stale, …", "stopped, …".
    flag: str = "none"
    errors: list[str] = field(default_factory=list)

    @property
    def in_flight(self) -> int:
        """Generated and handed to the reporter, with no answer from the API yet."""
        answered = self.accepted + self.duplicates + self.rejected + self.dropped
        return max(0, self.generated - answered)

    def note(self, error: str | None) -> None:
        if error and (not self.errors or self.errors[-1] != error):
            self.errors.append(error)
            del self.errors[:-20]


@dataclass
class Plan:
    """Which scenario applies to which tasks, from when (seconds after the start), and which
    edge model answers (profiles.EDGE_MODELS)."""

    scenario: str = "none"
    tasks: set[str] | None = None  # None: every simulated task
    after_seconds: float = 0.0
    edge_model: str = EDGE_MODEL

    def active(self, task: str, elapsed: float) -> str:
        if elapsed >= self.after_seconds and (self.tasks is None or task in self.tasks):
            return self.scenario
        return "none"

    def seconds_in(self, elapsed: float) -> float:
        """How long the scenario has run at `elapsed` (0 before it starts)."""
        return max(0.0, elapsed - self.after_seconds)


def stream(
    base_url: str,
    key: str,
    tasks: list[str],
    *,
    rate: float,
    duration: float,
    rates: Mapping[str, float] | None = None,
    plan: Plan | None = None,
    batch_size: int = 500,
    seed: int = 0,
    stop: threading.Event | None = None,
    every_second: Callable[[float, dict[str, Totals]], None] | None = None,
    flag_stream: bool = True,
    on_flush: Callable[[dict[str, Totals]], None] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Totals]:
    """Post `rate` results per second per task (`rates` for the tasks it names) for
    `duration` seconds (until `stop` is set); then deliver what is still queued, for at most
    FLUSH_SECONDS (`on_flush` hears first). `every_second` hears at the end of each second,
    with the seconds elapsed and the counts as they stand then: that second's results have
    had it to reach the API, so what is still in flight is what the API has not answered
    within a second. `on_result` sees each result as it is reported (the demo's simulated
    reviewers learn the truth from it)."""
    plan = plan or Plan()
    stop = stop or threading.Event()
    totals = {task: Totals() for task in tasks}
    rngs = {task: random.Random(f"{task}:{seed}") for task in tasks}
    carry = dict.fromkeys(tasks, 0.0)
    counter = dict.fromkeys(tasks, 0)
    flags = FlagClient(
        base_url,
        key,
        stream=flag_stream,
        poll_interval=1.0,
        max_backoff=5.0,
        rng=random.Random(f"flags:{seed}"),
    )
    # One reporter per task, so each task's counts are its own.
    reporters = {
        task: ResultReporter(
            base_url,
            key,
            batch_size=min(batch_size, 1000),
            flush_interval=0.2,
            max_queue=MAX_OUTBOX,
            max_backoff=5.0,
        )
        for task in tasks
    }
    flags.start()
    flags.wait_ready(10)  # the first flags, or cloud until they come
    started = time.monotonic()
    try:
        second = 0
        while not stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed >= duration:
                break
            now = datetime.now(UTC)
            flag_error = flags.status().error
            for task in tasks:
                scenario = plan.active(task, elapsed)
                factor = (
                    0.0 if scenario == "silence" else 5.0 if scenario == "traffic_jump" else 1.0
                )
                carry[task] += (rates or {}).get(task, rate) * factor
                n, carry[task] = int(carry[task]), carry[task] % 1
                rng = rngs[task]
                make = GENERATORS[task]
                for _ in range(n):
                    ts = now - timedelta(seconds=rng.random())
                    result = make(rng, counter[task], ts, scenario, False, plan.edge_model)
                    if scenario == "costly_edge":
                        result = costlier(result, plan.seconds_in(elapsed), seed)
                    route = flags.route(
                        task,
                        session_id=result["session_id"],
                        user_id=result["user_id"],
                        input_tokens=result["input_tokens"],
                        eligible=eligible(result["input_tokens"]),
                    )
                    result = _as_routed(serve(result, route.served == "edge"), route)
                    # Off the serving path, as the client's ResultReporter asks it: the
                    # flag's repeat_rate, the request picked by its id.
                    if wants_repeat(task, result["request_id"], route.repeat_rate):
                        result = with_repeat(result, seed)
                    if on_result is not None:
                        on_result(result)
                    reporters[task].report(result)
                    totals[task].served_edge += result["served"] == "edge"
                    counter[task] += 1
                totals[task].generated += n
                totals[task].note(flag_error and f"flags: {flag_error}")
            second += 1
            stop.wait(max(0.0, started + second - time.monotonic()))
            # Counted at the end of the second, not as its results are handed over: then
            # every count would show a whole second's results in flight, answered or not.
            for task in tasks:
                totals[task].flag = _describe(flags, task)
                _count(totals[task], reporters[task])
            if every_second is not None:
                every_second(time.monotonic() - started, totals)
    finally:
        flags.close()
        if on_flush is not None:
            for task, reporter in reporters.items():
                _count(totals[task], reporter)
            on_flush(totals)
        for task, reporter in reporters.items():  # deliver what is still queued
            reporter.close(timeout=FLUSH_SECONDS)
            _count(totals[task], reporter)
    return totals


def _describe(flags: FlagClient, task: str) -> str:
    flag = flags.flag(task)
    if flag is None:  # no flag for the task, or no current copy: the cloud serves it all
        state = flags.status().state
        return f"{'none' if state == 'ok' else state}, cloud only"
    return f"{flag.get('stage')} {flag.get('edge_percent')}% edge, version {flag.get('version')}"


def _as_routed(result: dict[str, Any], route: Route) -> dict[str, Any]:
    """Drop the side that did not run; a degrade keeps both (the edge was tried first)."""
    result["flag_version"] = route.flag_version
    if route.served == "edge" or result["degraded"]:
        if not route.run_other and not result["degraded"]:
            result["cloud"] = None
    elif not route.run_other:
        result["edge"] = None
    return result


def _count(totals: Totals, reporter: ResultReporter) -> None:
    new_rejections = reporter.rejected - totals.rejected
    totals.accepted = reporter.accepted
    totals.duplicates = reporter.duplicates
    totals.rejected = reporter.rejected
    totals.dropped = reporter.dropped
    totals.note(reporter.last_error)
    if new_rejections > 0:
        for rejection in list(reporter.rejections)[-min(new_rejections, 3) :]:
            totals.note(f"rejected {rejection['request_id']}: {rejection['error']}")

"""Playing routing services against a running API over HTTP, in real time, as routers would.

Every second each task produces `rate` results (five times that under `traffic_jump`,
none under `silence`) stamped with the current time, and posts them in batches. A batch
the API could not take (503, connection error) is kept and sent again the next second,
as a router's outbox would; resends are harmless because ingest is idempotent.

Routing follows the flags, polled every second with `If-None-Match` (the key needs the
`flags:read` scope besides `ingest`), exactly as README.md ("For routing services") says a
router must: killed, cloud, rolled_back and shadow serve the cloud; canary serves the edge
when the session's sticky bucket is under `edge_percent` and the input within
`max_input_tokens`; full serves the edge within the cap; the other side runs with
probability `shadow_rate` where the stage table says so. A missing or unreadable flag means
cloud, and no second side.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from controlplane.client import sticky_bucket
from controlplane.sim.profiles import GENERATORS, serve

MAX_OUTBOX = 200_000


@dataclass
class Totals:
    generated: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    dropped: int = 0
    served_edge: int = 0
    errors: list[str] = field(default_factory=list)


def route(
    flag: dict[str, Any] | None, task: str, key: str | None, tokens: int, draw: float
) -> tuple[bool, bool]:
    """(the edge is on the serving path, the other side runs) for one request."""
    if not flag or flag.get("killed"):
        return False, False
    stage = flag.get("stage")
    beside = draw < float(flag.get("shadow_rate", 0))
    if stage in ("shadow", "rolled_back"):
        return False, beside  # the cloud serves, the edge runs in shadow
    if stage not in ("canary", "full"):
        return False, False  # cloud, or a stage this router does not know
    cap = flag.get("max_input_tokens")
    within = cap is None or tokens <= cap
    if stage == "full":
        return within, beside
    bucket = sticky_bucket(task, key)
    return within and bucket is not None and bucket < int(flag.get("edge_percent", 0)), beside


class FlagPoller:
    """The flags document, re-read when its ETag changes; None for a task means cloud."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.etag: str | None = None
        self.flags: dict[str, dict[str, Any]] = {}
        self.error: str | None = None

    def poll(self) -> None:
        headers = {"If-None-Match": self.etag} if self.etag else {}
        try:
            response = self.client.get("/v1/flags", headers=headers)
        except httpx.HTTPError as exc:
            self.error = f"flags unreadable ({type(exc).__name__}): routing to the cloud"
            self.flags = {}
            return
        if response.status_code == 304:
            return
        if response.status_code != 200:
            self.error = f"flags unreadable (HTTP {response.status_code}): routing to the cloud"
            self.flags, self.etag = {}, None
            return
        self.flags, self.etag, self.error = (
            response.json()["flags"],
            response.headers.get("etag"),
            None,
        )


@dataclass
class Plan:
    """Which scenario applies to which tasks, from when (seconds after the start)."""

    scenario: str = "none"
    tasks: set[str] | None = None  # None: every simulated task
    after_seconds: float = 0.0

    def active(self, task: str, elapsed: float) -> str:
        if elapsed >= self.after_seconds and (self.tasks is None or task in self.tasks):
            return self.scenario
        return "none"


def stream(
    base_url: str,
    key: str,
    tasks: list[str],
    *,
    rate: float,
    duration: float,
    plan: Plan | None = None,
    batch_size: int = 500,
    seed: int = 0,
    stop: threading.Event | None = None,
    every_second: Callable[[float, dict[str, Totals]], None] | None = None,
) -> dict[str, Totals]:
    """Post `rate` results per second per task for `duration` seconds (until `stop` is set)."""
    plan = plan or Plan()
    stop = stop or threading.Event()
    totals = {task: Totals() for task in tasks}
    outbox: dict[str, list[dict[str, Any]]] = {task: [] for task in tasks}
    rngs = {task: random.Random(f"{task}:{seed}") for task in tasks}
    carry = dict.fromkeys(tasks, 0.0)
    counter = dict.fromkeys(tasks, 0)
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        poller = FlagPoller(client)
        second = 0
        while not stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed >= duration:
                break
            poller.poll()
            if poller.error:
                for t in totals.values():
                    if not t.errors or t.errors[-1] != poller.error:
                        t.errors.append(poller.error)
            now = datetime.now(UTC)
            for task in tasks:
                scenario = plan.active(task, elapsed)
                factor = (
                    0.0 if scenario == "silence" else 5.0 if scenario == "traffic_jump" else 1.0
                )
                carry[task] += rate * factor
                n, carry[task] = int(carry[task]), carry[task] % 1
                rng = rngs[task]
                make = GENERATORS[task]
                flag = poller.flags.get(task)
                for _ in range(n):
                    ts = now - timedelta(seconds=rng.random())
                    result = make(rng, counter[task], ts, scenario, False)
                    edge, other = route(
                        flag, task, result["session_id"], result["input_tokens"], rng.random()
                    )
                    outbox[task].append(_as_routed(serve(result, edge), edge, other, flag))
                    totals[task].served_edge += result["served"] == "edge"
                    counter[task] += 1
                totals[task].generated += n
                _send(client, outbox, task, totals[task], batch_size)
            if every_second is not None:
                every_second(elapsed, totals)
            second += 1
            stop.wait(max(0.0, started + second - time.monotonic()))
        for task in tasks:  # a last try for what is still in the outbox
            _send(client, outbox, task, totals[task], batch_size)
            totals[task].dropped += len(outbox[task])
    return totals


def _as_routed(
    result: dict[str, Any], edge: bool, other: bool, flag: dict[str, Any] | None
) -> dict[str, Any]:
    """Drop the side that did not run; a degrade keeps both (the edge was tried first)."""
    result["flag_version"] = flag.get("version") if flag else None
    if edge or result["degraded"]:
        if not other and not result["degraded"]:
            result["cloud"] = None
    elif not other:
        result["edge"] = None
    return result


def _send(
    client: httpx.Client,
    outbox: dict[str, list[dict[str, Any]]],
    task: str,
    totals: Totals,
    batch_size: int,
) -> None:
    pending = outbox[task]
    while pending:
        batch = pending[:batch_size]
        try:
            response = client.post("/v1/results", json={"results": batch})
        except httpx.HTTPError as exc:
            totals.errors.append(f"{type(exc).__name__}: {exc}")
            break
        if response.status_code != 200:
            totals.errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
            if response.status_code in (429, 502, 503, 504):
                break  # kept: sent again next second
            del pending[: len(batch)]  # the API refused the batch itself; resending cannot help
            totals.rejected += len(batch)
            continue
        report = response.json()
        totals.accepted += report["accepted"]
        totals.duplicates += report["duplicates"]
        totals.rejected += len(report["rejected"])
        totals.errors.extend(r["error"] for r in report["rejected"][:3])
        del pending[: len(batch)]
    if len(pending) > MAX_OUTBOX:  # the API is gone for long: say how much is dropped
        totals.dropped += len(pending) - MAX_OUTBOX
        del pending[: len(pending) - MAX_OUTBOX]
    del totals.errors[:-20]

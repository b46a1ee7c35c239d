"""What the tests of `ResultReporter.close()` waiting for held results share: routers that
answer one fixed route, and a reporter that records instead of sending."""

from __future__ import annotations

import asyncio
from typing import Any

from controlplane.client import ResultReporter
from controlplane.client.routing import Route

WAIT = 30.0  # generous bound for a background event that must happen
KW: dict[str, Any] = {"task": "ticket_classify", "input_tokens": 100, "session_id": "s-1"}
NOWHERE = "http://127.0.0.1:9"  # the recording reporters below never send


class EdgeWithCloudBeside:
    """A router whose flag serves the edge and runs the cloud beside it, no repeats."""

    def route(self, task: str, **_: Any) -> Route:
        return Route("edge", True, 3, "canary", "edge+cloud")


class CloudWithEdgeBeside:
    def route(self, task: str, **_: Any) -> Route:
        return Route("cloud", True, 3, "canary", "cloud+edge")


class CloudThenRepeat:
    """Serves the cloud, runs nothing beside, and repeats every request."""

    def route(self, task: str, **_: Any) -> Route:
        return Route("cloud", False, 3, "canary", "cloud", repeat_rate=1.0)


class EdgeOnly:
    def route(self, task: str, **_: Any) -> Route:
        return Route("edge", False, 3, "canary", "edge")


class Recording(ResultReporter):
    """A ResultReporter whose `report` keeps each result here instead of sending it."""

    def __init__(self) -> None:
        super().__init__(NOWHERE, "k")
        self.got: list[dict[str, Any]] = []

    def report(self, result: Any, **_: Any) -> bool:
        self.got.append(dict(result))
        return True


class Unprintable(Exception):
    """An exception whose message cannot be read (its `__str__` raises)."""

    def __str__(self) -> str:
        raise KeyError("detail")


async def answers(payload: str) -> str:
    """An async side that answers at once."""
    return "refund"


async def never_answers(payload: str) -> str:
    """An async side that never answers (until its task is cancelled)."""
    await asyncio.Event().wait()
    return "refund"

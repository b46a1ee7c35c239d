"""Hostile review of the session's commits since 7beacd7 (the flag client's Retry-After cap,
`shadow_compare` passing over a parent's executor, GET /v1/decisions?action=, the CLI's one
line for a database out of reach, the flag copy vouched by Redis, a lift naming what it
left killed and `shadowplane_flag_killed`, `shadowplane migrate --to`, refusal_text), as a
router author who must never be blocked, an SRE at night and an admin. Each test here was a
strict xfail naming a defect found in this review, and is a plain test since it was fixed
(the stream's Retry-After waited as the polls' is, at least 1 s and at most a third of
max_staleness; an executor judged even when a weak dictionary cannot hold it; `--to base`
refused; a URL the driver refuses is one line too):

1. 6241346 caps the Retry-After of `GET /v1/flags` at max(max_backoff, max_staleness / 3)
   and the README says the client honours Retry-After "up to a third of max_staleness";
   the stream's own Retry-After (`GET /v1/flags/stream` answered 503 or 429 by a front) is
   still taken whole: "Retry-After: 3600" keeps the stream (a rollback "in about a second")
   off for an hour, the log saying "the stream again in 3600 s".
2. The same path with "Retry-After: 0": the stream is due again at once, and the turn's
   wait is min(poll, time until the stream) = 0, so the thread asks for the stream and then
   polls without ever waiting: hundreds of requests a second to a front that said 503.
3. afcd068 looks the caller's executor up in a WeakKeyDictionary before anything else; an
   executor that is not hashable (a dataclass: eq without hash) or not weakly referable
   (`__slots__`) makes `shadow_compare` raise TypeError on every call. Before the commit
   the executor was used. The `except TypeError` meant for it guards only the store, not
   the `get` that fails first.
4. f16c648: `shadowplane migrate --to base` prints "migrated <url> to base" and exits 0,
   and the schema is untouched at head (`below()` takes get_revision("base") -> None as
   "not below", so it runs an upgrade to base, which does nothing).
5. 8db0052 says the command group prints one line naming SHADOWPLANE_DATABASE_URL "for
   every command", as migrate does; a URL the driver refuses before reaching any server
   (`?ssl=true`, libpq has no such option; `postgres://`, SQLAlchemy 2 has no such dialect)
   is one line from `migrate` but a traceback from `kill` (60-180 lines here, 100-600 from
   the installed `shadowplane` with its rich traceback).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from controlplane.client import FlagClient, shadow_compare
from controlplane.migrate import head_revisions
from tests.client.fake import Exchange, FakeServer, document
from tests.client.holding import EdgeOnly, Recording
from tests.liveapi import run_cli

# -- 1, 2: the stream's Retry-After ---------------------------------------------------------


def _stream_refused(retry_after: str) -> Callable[[Exchange], None]:
    """A front that answers the stream 503 with `retry_after`, and polls 200."""

    def app(ex: Exchange) -> None:
        if ex.path.startswith("/v1/flags/stream"):
            ex.reply(503, b'{"detail": "front"}', headers={"Retry-After": retry_after})
        else:
            ex.reply(200, document(5), headers={"ETag": '"r5"'})

    return app


def test_a_stream_retry_after_is_capped_like_the_polls(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="shadowplane.client")
    with FakeServer(_stream_refused("3600")) as fake:
        with FlagClient(fake.base, "k", poll_interval=10) as flags:
            assert flags.wait_ready(10)
            assert flags.max_staleness == 600 and flags.max_backoff == 120
    waits = [
        float(m.group(1))
        for r in caplog.records
        if (m := re.search(r"the stream again in (\d+) s", r.getMessage()))
    ]
    assert waits, [r.getMessage() for r in caplog.records]
    # The poll path's cap with these settings: max(120, 600 / 3) = 200 s.
    assert waits[0] <= 200, waits


def test_a_stream_retry_after_of_zero_does_not_spin() -> None:
    with FakeServer(_stream_refused("0")) as fake:
        with FlagClient(fake.base, "k", poll_interval=10) as flags:
            assert flags.wait_ready(10)
            time.sleep(0.3)
            streams = len(fake.requests("/v1/flags/stream"))
            polls = len(fake.requests("/v1/flags"))
    # Polling every 10 s, the stream retried after at least its own backoff: in 0.3 s,
    # the first of each and perhaps one more.
    assert streams <= 3 and polls <= 3, (streams, polls)


# -- 3: an executor the WeakKeyDictionary cannot hold ----------------------------------------


@dataclass
class _DataclassExecutor(Executor):
    """A router's executor written as a dataclass: eq=True sets __hash__ to None."""

    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2))
    ran: list[int] = field(default_factory=list)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.ran.append(1)
        return self.pool.submit(fn, *args, **kwargs)


class _SlottedExecutor:
    """A duck-typed executor with __slots__ (no __weakref__)."""

    __slots__ = ("pool", "ran")

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(2)
        self.ran: list[int] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.ran.append(1)
        return self.pool.submit(fn, *args, **kwargs)


@pytest.mark.parametrize("make", [_DataclassExecutor, _SlottedExecutor], ids=["eq", "slots"])
def test_an_executor_a_weak_dictionary_cannot_hold_still_serves(make: Callable[[], Any]) -> None:
    executor = make()
    try:
        answer = shadow_compare(
            "q",
            lambda p: "edge:" + p,
            lambda p: "cloud:" + p,
            client=EdgeOnly(),
            reporter=Recording(),
            task="t",
            input_tokens=3,
            executor=executor,
        )
        assert answer == "edge:q"
        assert executor.ran, "made in this process, the executor is the one used"
    finally:
        executor.pool.shutdown(wait=False)


# -- 4: migrate --to base ---------------------------------------------------------------------


def _environment() -> dict[str, str]:
    """This process's environment without Shadowplane's settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}


def _version(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version"))
            return {str(row[0]) for row in rows}
    finally:
        engine.dispose()


def test_migrate_to_base_takes_the_schema_down_or_says_it_did_not(
    sqlite_url: str, tmp_path: Path
) -> None:
    assert _version(sqlite_url) == set(head_revisions())
    env = {**_environment(), "SHADOWPLANE_DATABASE_URL": sqlite_url}
    done = run_cli(["migrate", "--to", "base"], env, tmp_path)
    # Refused: it would drop every table; nothing is said migrated, nothing moved.
    assert done.returncode == 1, done.stdout
    assert "migrated" not in done.stdout, done.stdout
    assert done.stderr.startswith("error: --to base would drop every table"), done.stderr
    assert _version(sqlite_url) == set(head_revisions())


# -- 5: a URL the driver refuses ------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://admin:S3cretPW@127.0.0.1:9/sp?ssl=true",
        "postgres://admin:S3cretPW@127.0.0.1:9/sp",
    ],
    ids=["option", "dialect"],
)
def test_a_database_url_the_driver_refuses_is_one_line_for_every_command(
    url: str, tmp_path: Path
) -> None:
    env = {**_environment(), "SHADOWPLANE_DATABASE_URL": url}
    migrate = run_cli(["migrate"], env, tmp_path)
    # The standard the commit points to: migrate says it in one line.
    assert migrate.returncode == 1
    assert migrate.stderr.startswith("error: SHADOWPLANE_DATABASE_URL: ")
    assert len(migrate.stderr.strip().splitlines()) == 1
    done = run_cli(["kill", "--reason", "drill"], env, tmp_path)
    assert done.returncode == 1
    assert "S3cretPW" not in done.stdout + done.stderr
    assert "SHADOWPLANE_DATABASE_URL" in done.stderr, f"{len(done.stderr.splitlines())} lines"
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr[-1500:]

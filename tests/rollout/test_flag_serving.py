"""Flags served by real `shadowplane api` processes on one PostgreSQL database: identical
ETags across replicas; with Redis stopped they still follow the database; with the
database stopped too they serve their last copy marked stale; a process that never loaded
the flags answers 503 until the database is back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from controlplane.client.tls import default_tls
from controlplane.rollout.flagcopy import DB_BACKSTOP_SECONDS
from tests.drills.servers import PgServer
from tests.liveapi import (
    ApiServer,
    EventReader,
    Message,
    RedisServer,
    seed,
    stop_all,
    wait_until,
)

pytestmark = pytest.mark.integration

# Each process checks that its copy is current this often (the default is a second).
CHECK = {"SHADOWPLANE_FLAG_CHECK_SECONDS": "0.2"}


@contextmanager
def postgresql_stopped(server: PgServer) -> Iterator[None]:
    server.stop()
    try:
        yield
    finally:
        server.start()


@contextmanager
def servers(*apis: ApiServer) -> Iterator[tuple[ApiServer, ...]]:
    try:
        for api in apis:  # all start at once, then each is waited for
            api.launch()
        yield tuple(api.wait_ready() for api in apis)
    finally:
        stop_all(*apis)


class Poller:
    def __init__(self, api: ApiServer, keys: dict[str, str]) -> None:
        self.api = api
        self.read = {"Authorization": f"Bearer {keys['flags']}"}
        self.admin = {"Authorization": f"Bearer {keys['admin']}"}

    def get(self, path: str = "/v1/flags", etag: str | None = None) -> httpx.Response:
        headers = {**self.read, **({"If-None-Match": etag} if etag else {})}
        return httpx.get(
            f"{self.api.base}{path}", headers=headers, timeout=10, verify=default_tls()
        )

    def act(self, path: str, reason: str) -> None:
        response = httpx.post(
            f"{self.api.base}{path}",
            json={"reason": reason},
            headers=self.admin,
            timeout=30,
            verify=default_tls(),
        )
        assert response.status_code == 200, response.text

    def stage(self, task: str) -> str:
        return str(self.get().json()["flags"][task]["stage"])


def _same_everywhere(a: Poller, b: Poller) -> str:
    """Both replicas answer the same body and ETag (once b has caught up); returns the ETag."""
    wait_until(lambda: a.get().content == b.get().content, "the replicas to agree")
    first, second = a.get(), b.get()
    assert first.headers["etag"] == second.headers["etag"]
    # Either replica's tag is good at the other.
    assert b.get(etag=first.headers["etag"]).status_code == 304
    assert a.get(etag=second.headers["etag"]).status_code == 304
    one_a, one_b = a.get("/v1/flags/ticket_classify"), b.get("/v1/flags/ticket_classify")
    assert one_a.content == one_b.content and one_a.headers["etag"] == one_b.headers["etag"]
    return str(first.headers["etag"])


def test_two_api_processes_answer_identical_etags(pg_url: str, tmp_path: Path) -> None:
    keys = seed(pg_url)
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    with servers(
        ApiServer(pg_url, a_log, settings=CHECK), ApiServer(pg_url, b_log, settings=CHECK)
    ) as (
        one,
        two,
    ):
        a, b = Poller(one, keys), Poller(two, keys)
        before = _same_everywhere(a, b)
        # A change made through one replica reaches the other (its database check).
        a.act("/v1/tasks/ticket_classify/rollback", "agreement fell")
        wait_until(lambda: b.stage("ticket_classify") == "rolled_back", "b to follow a")
        after = _same_everywhere(a, b)
        assert after != before
        assert b.get(etag=before).status_code == 200


def test_redis_stopped_then_the_database_too(own_pg: PgServer, tmp_path: Path) -> None:
    pg_url = own_pg.url
    keys = seed(pg_url)
    redis = RedisServer(tmp_path).start()
    settings = {
        **CHECK,
        "SHADOWPLANE_REDIS_URL": redis.url,
        "SHADOWPLANE_FLAG_STREAM_HEARTBEAT_SECONDS": "0.1",
    }
    try:
        with servers(
            ApiServer(pg_url, tmp_path / "a.log", settings=settings),
            ApiServer(pg_url, tmp_path / "b.log", settings=settings),
        ) as (one, two):
            a, b = Poller(one, keys), Poller(two, keys)
            _same_everywhere(a, b)
            a.act("/v1/tasks/ticket_classify/rollback", "through Redis")
            wait_until(lambda: b.stage("ticket_classify") == "rolled_back", "b (Redis up)")

            # The database alone down, Redis up: Redis vouches for the copy (nobody can
            # change a flag without the database), past the database backstop too: b read
            # the database last when it followed the rollback, so the backstop comes due
            # within DB_BACKSTOP_SECONDS of now, and is tried at the next check (0.2 s).
            with postgresql_stopped(own_pg):
                deadline = time.monotonic() + DB_BACKSTOP_SECONDS + 1
                while time.monotonic() < deadline:
                    answer = b.get()
                    assert answer.status_code == 200
                    assert "x-shadowplane-stale" not in answer.headers
                    time.sleep(0.1)

            redis.stop()
            a.act("/v1/tasks/ticket_classify/rearm", "Redis is down")
            wait_until(lambda: b.stage("ticket_classify") == "shadow", "b (Redis down)")
            last = _same_everywhere(a, b)
            assert "x-shadowplane-stale" not in b.get().headers
            stream = EventReader(two.base, keys["flags"])
            stream.next_event()

            with postgresql_stopped(own_pg):
                stale = wait_until(
                    lambda: (r := b.get()).headers.get("x-shadowplane-stale") and r,
                    "the copy to be marked stale",
                )
                # The last copy, in full, as before the outage; never an error.
                assert stale.status_code == 200 and stale.headers["etag"] == last
                assert stale.json()["flags"]["ticket_classify"]["stage"] == "shadow"
                assert int(stale.headers["x-shadowplane-stale"]) >= 0
                unchanged = b.get(etag=last)
                assert unchanged.status_code == 304 and "x-shadowplane-stale" in unchanged.headers
                one_flag = b.get("/v1/flags/ticket_classify")
                assert one_flag.status_code == 200 and "x-shadowplane-stale" in one_flag.headers
                # The seconds count up while the outage lasts.
                first = int(stale.headers["x-shadowplane-stale"])
                wait_until(
                    lambda: int(b.get().headers.get("x-shadowplane-stale", -1)) > first,
                    "the staleness to grow",
                )
                # A streaming router hears it too: heartbeats carry the copy's age, so
                # its routers age their copy as polling routers do.
                while True:
                    beat = stream.next()
                    assert isinstance(beat, Message) and beat.event == "heartbeat", beat
                    if json.loads(beat.data or "")["stale_seconds"] is not None:
                        break
                # A stream opened now says so at once, right after the document.
                late = EventReader(two.base, keys["flags"])
                assert isinstance(document := late.next(), Message), document
                assert document.event == "flags"
                beat = late.next()
                assert isinstance(beat, Message) and beat.event == "heartbeat", beat
                assert json.loads(beat.data or "")["stale_seconds"] is not None
                late.close()
            stream.close()
            wait_until(
                lambda: "x-shadowplane-stale" not in b.get().headers,
                "the copy to be confirmed once the database is back",
            )
            a.act("/v1/tasks/ticket_classify/rollback", "after the outage")
            wait_until(lambda: b.stage("ticket_classify") == "rolled_back", "b (recovered)")
    finally:
        redis.stop()


def test_no_copy_and_the_database_down_answers_503_until_it_is_back(
    own_pg: PgServer, tmp_path: Path
) -> None:
    pg_url = own_pg.url
    keys = seed(pg_url)
    with postgresql_stopped(own_pg):
        with servers(ApiServer(pg_url, tmp_path / "a.log", settings=CHECK)) as (one,):
            a = Poller(one, keys)
            down = a.get()
            assert down.status_code == 503 and int(down.headers["Retry-After"]) > 0
            own_pg.start()
            served = wait_until(
                lambda: (r := a.get()).status_code == 200 and r, "the flags once it is back"
            )
            assert set(served.json()["flags"]) == {"ticket_classify", "invoice_extract"}
            assert "x-shadowplane-stale" not in served.headers
            own_pg.stop()
            # From now on a copy exists: it is served, marked stale, never an error.
            stale = wait_until(
                lambda: (r := a.get()).headers.get("x-shadowplane-stale") and r,
                "the copy to be marked stale",
            )
            assert stale.status_code == 200 and stale.content == served.content


def test_with_redis_a_change_reaches_other_replicas_and_their_streams_when_published(
    pg_url: str, tmp_path: Path
) -> None:
    keys = seed(pg_url)
    redis = RedisServer(tmp_path).start()
    # No replica checks on its own for ten minutes: only the publish can tell them.
    settings = {"SHADOWPLANE_REDIS_URL": redis.url, "SHADOWPLANE_FLAG_CHECK_SECONDS": "600"}
    try:
        with servers(
            ApiServer(pg_url, tmp_path / "a.log", settings=settings),
            ApiServer(pg_url, tmp_path / "b.log", settings=settings),
        ) as (one, two):
            a, b = Poller(one, keys), Poller(two, keys)
            _same_everywhere(a, b)
            stream = EventReader(two.base, keys["flags"])
            try:
                first = stream.next_event()
                a.act("/v1/tasks/ticket_classify/rollback", "published")
                event = stream.next_event()
                assert int(event.id or 0) == int(first.id or 0) + 1
                assert b.stage("ticket_classify") == "rolled_back"
            finally:
                stream.close()
            _same_everywhere(a, b)
    finally:
        redis.stop()

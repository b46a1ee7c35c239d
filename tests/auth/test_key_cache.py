"""The per-process key cache is a snapshot of every active key: a made-up token costs no
query (the key table is read at most once a second for unknown tokens), a key created a
moment ago works within about a second, a revoked key stops within the cache window, and
the keys it holds keep working through a database outage, whatever flood came before."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

from controlplane.auth.service import KeyCache, Principal, hash_key
from controlplane.db import get_engine, make_sessionmaker, session_scope
from controlplane.keys.service import create_key, revoke_key
from tests.drills.servers import PgServer


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CountedKeys(KeyCache):
    """A key cache over a set of valid keys the test changes, counting its reads."""

    def __init__(self, valid: set[str], clock: Clock, ttl_seconds: float = 5.0) -> None:
        super().__init__(make_sessionmaker(get_engine("sqlite://")), ttl_seconds, clock=clock)
        self.valid = set(valid)
        self.reads = 0
        self.down = False

    def _load(self) -> dict[str, Principal]:
        self.reads += 1
        if self.down:
            raise OperationalError("SELECT", {}, ConnectionRefusedError("database is down"))
        return {hash_key(k): Principal(name=k, scopes=frozenset({"read"})) for k in self.valid}


def test_a_flood_of_made_up_tokens_reads_the_keys_once_a_second() -> None:
    clock = Clock()
    cache = CountedKeys({"good"}, clock)
    for i in range(1000):
        assert cache.authenticate(f"junk-{i}") is None
    assert cache.reads == 1
    clock.advance(0.99)
    for i in range(1000):
        assert cache.authenticate(f"more-junk-{i}") is None
    assert cache.reads == 1
    clock.advance(0.01)
    for i in range(1000):
        assert cache.authenticate(f"later-junk-{i}") is None
    assert cache.reads == 2
    # The valid key was never pushed out, and costs no read.
    assert cache.authenticate("good") is not None
    assert cache.reads == 2


def test_a_key_created_meanwhile_works_within_a_second() -> None:
    clock = Clock()
    cache = CountedKeys({"good"}, clock)
    assert cache.authenticate("good") is not None
    cache.valid.add("new")
    clock.advance(0.5)
    # The table was read half a second ago: not again for an unknown token yet.
    assert cache.authenticate("new") is None
    clock.advance(0.5)
    principal = cache.authenticate("new")
    assert principal is not None and principal.name == "new"
    assert cache.reads == 2


def test_a_revoked_key_is_served_until_the_cache_window_ends() -> None:
    clock = Clock()
    cache = CountedKeys({"good", "other"}, clock, ttl_seconds=5.0)
    assert cache.authenticate("good") is not None
    cache.valid.discard("good")
    clock.advance(4.9)
    assert cache.authenticate("good") is not None
    assert cache.reads == 1
    clock.advance(0.1)
    assert cache.authenticate("good") is None
    assert cache.authenticate("other") is not None
    assert cache.reads == 2


def test_known_keys_are_served_through_an_outage_and_it_is_not_hammered() -> None:
    clock = Clock()
    cache = CountedKeys({"good"}, clock, ttl_seconds=5.0)
    assert cache.authenticate("good") is not None
    for i in range(100):
        assert cache.authenticate(f"junk-{i}") is None
    cache.down = True
    clock.advance(6)  # the snapshot is stale: the next request tries the database
    assert cache.authenticate("good") is not None
    assert cache.reads == 2
    # A token the snapshot does not hold cannot be checked: the database error, raised
    # again without asking the database for a second.
    for _ in range(100):
        with pytest.raises(OperationalError):
            cache.authenticate("sp_never_seen")
        assert cache.authenticate("good") is not None
    assert cache.reads == 2
    clock.advance(1)
    with pytest.raises(OperationalError):
        cache.authenticate("sp_never_seen")
    assert cache.reads == 3
    cache.down = False
    cache.valid.add("new")
    clock.advance(1)
    assert cache.authenticate("new") is not None
    assert cache.reads == 4


def test_concurrent_unknown_tokens_share_one_read() -> None:
    clock = Clock()
    cache = CountedKeys({"good"}, clock)
    assert cache.authenticate("good") is not None
    clock.advance(1)
    entered, release = threading.Event(), threading.Event()
    load = cache._load

    def slow_load() -> dict[str, Principal]:
        entered.set()
        release.wait(10)
        return load()

    cache._load = slow_load  # type: ignore[method-assign]
    answers: list[Principal | None] = []
    threads = [
        threading.Thread(target=lambda i=i: answers.append(cache.authenticate(f"junk-{i}")))
        for i in range(20)
    ]
    for thread in threads:
        thread.start()
    assert entered.wait(10)
    time.sleep(0.1)  # the other threads reach the read in progress and wait for it
    assert cache.authenticate("good") is not None  # a known key is served meanwhile
    release.set()
    for thread in threads:
        thread.join(10)
    assert answers == [None] * 20
    assert cache.reads == 2


class Statements:
    """Counts the statements an engine runs (a SQLAlchemy event)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        self.engine = engine
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


@pytest.fixture
def statements(db_url: str) -> Iterator[Statements]:
    counter = Statements(get_engine(db_url))
    yield counter
    counter.close()


def test_on_a_real_database_a_flood_costs_one_query_a_second(
    db_url: str, statements: Statements
) -> None:
    engine = get_engine(db_url)
    with session_scope(engine) as session:
        _, old = create_key(session, name="router", scopes=["ingest"], actor="test")
    clock = Clock()
    cache = KeyCache(make_sessionmaker(engine), ttl_seconds=5.0, clock=clock)
    statements.count = 0
    for i in range(500):
        assert cache.authenticate(f"sp_made_up_{i}") is None
    assert statements.count == 1
    with session_scope(engine) as session:
        _, new = create_key(session, name="new-router", scopes=["ingest"], actor="test")
        revoke_key(session, name="router", actor="test")
    statements.count = 0
    assert cache.authenticate(old) is not None  # revoked, but within the cache window
    assert cache.authenticate(new) is None  # created, but the table was read just now
    assert statements.count == 0
    clock.advance(1)
    created = cache.authenticate(new)
    assert created is not None and created.name == "new-router"
    assert created.scopes == frozenset({"ingest"}) and created.key_id == hash_key(new)[:16]
    assert statements.count == 1
    clock.advance(4)
    assert cache.authenticate(old) is None  # the window has ended
    assert statements.count == 2


@pytest.mark.integration
def test_a_used_key_authenticates_through_an_outage_after_a_flood(own_pg: PgServer) -> None:
    engine = get_engine(own_pg.url)
    with session_scope(engine) as session:
        _, key = create_key(session, name="router", scopes=["ingest"], actor="test")
    cache = KeyCache(make_sessionmaker(engine), ttl_seconds=0.2)
    first = cache.authenticate(key)
    assert first is not None and first.name == "router"
    for i in range(1000):
        assert cache.authenticate(f"sp_made_up_{i}") is None
    own_pg.stop()
    try:
        time.sleep(0.3)  # the snapshot is stale: the cache tries the database, then serves it
        principal = cache.authenticate(key)
        assert principal is not None and principal.name == "router"
        with pytest.raises(OperationalError):
            cache.authenticate("sp_never_seen")
    finally:
        own_pg.start()
    engine.dispose()

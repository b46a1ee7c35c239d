"""The per-process key cache evicts the least recently used entries, and made-up tokens
only ever push out other made-up tokens: the keys that must keep working through a
database outage survive any flood."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.exc import OperationalError

from controlplane.auth import service
from controlplane.auth.service import KeyCache, Principal, create_key, hash_key
from controlplane.db import get_engine, make_sessionmaker, session_scope
from tests.api.test_storage_outage import pgctl


class CountedKeys(KeyCache):
    """A key cache over a fixed set of valid keys that counts its lookups."""

    def __init__(self, valid: set[str], ttl_seconds: float = 60.0) -> None:
        super().__init__(make_sessionmaker(get_engine("sqlite://")), ttl_seconds)
        self.valid = {hash_key(k) for k in valid}
        self.loads = 0
        self.down = False

    def _load(self, digest: str) -> Principal | None:
        self.loads += 1
        if self.down:
            raise OperationalError("SELECT", {}, ConnectionRefusedError("database is down"))
        return Principal(name="k", scopes=frozenset({"read"})) if digest in self.valid else None


def test_valid_keys_are_evicted_least_recently_used_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "MAX_CACHED_KEYS", 2)
    cache = CountedKeys({"a", "b", "c"})
    for key in ("a", "b", "a", "c"):
        assert cache.authenticate(key) is not None
    assert cache.loads == 3
    for key in ("a", "c"):  # still cached: no lookup
        assert cache.authenticate(key) is not None
    assert cache.loads == 3
    assert cache.authenticate("b") is not None  # the least recently used went first
    assert cache.loads == 4


def test_made_up_tokens_never_push_out_a_valid_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "MAX_CACHED_KEYS", 5)
    monkeypatch.setattr(service, "MAX_CACHED_UNKNOWN_KEYS", 3, raising=False)
    cache = CountedKeys({"good"})
    assert cache.authenticate("good") is not None
    for i in range(20):
        assert cache.authenticate(f"junk-{i}") is None
    cache.down = True
    assert cache.authenticate("good") is not None
    # The latest junk is still cached (no lookup); older junk was evicted.
    assert cache.authenticate("junk-19") is None
    with pytest.raises(OperationalError):
        cache.authenticate("junk-0")


@pytest.mark.integration
def test_a_used_key_authenticates_through_an_outage_after_a_flood(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "MAX_CACHED_KEYS", 100)
    monkeypatch.setattr(service, "MAX_CACHED_UNKNOWN_KEYS", 50, raising=False)
    engine = get_engine(pg_url)
    with session_scope(engine) as session:
        _, key = create_key(session, name="router", scopes=["ingest"], actor="test")
    cache = KeyCache(make_sessionmaker(engine), ttl_seconds=0.2)
    first = cache.authenticate(key)
    assert first is not None and first.name == "router"
    for i in range(service.MAX_CACHED_KEYS + 50):
        assert cache.authenticate(f"sp_made_up_{i}") is None
    pgctl("stop", "-m", "fast")
    try:
        time.sleep(0.3)  # the record is stale: the cache tries the database, then serves it
        principal = cache.authenticate(key)
        assert principal is not None and principal.name == "router"
        with pytest.raises(OperationalError):
            cache.authenticate("sp_never_seen")
    finally:
        pgctl("start")
    engine.dispose()

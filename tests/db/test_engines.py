"""One engine per database: `get_engine()` without a URL is the settings' database as the
settings say now, not the first one a process asked for (the CLI and the workers call it so;
a test that changed SHADOWPLANE_DATABASE_URL wrote into an earlier test's database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.db import ENGINES, forget_engines, get_engine
from controlplane.settings import get_settings


@pytest.fixture
def settings_cleared() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_without_a_url_the_engine_is_the_settings_database_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings_cleared: None
) -> None:
    first, second = (f"sqlite:///{tmp_path / name}" for name in ("first.db", "second.db"))
    monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", first)
    get_settings.cache_clear()
    assert get_engine() is get_engine(first)
    monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", second)
    get_settings.cache_clear()
    assert get_engine() is get_engine(second)
    assert str(get_engine().url) == second


def test_forgotten_engines_are_made_anew(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    before = get_engine(url)
    assert get_engine(url) is before
    forget_engines()
    assert get_engine(url) is not before
    before.dispose()


def test_an_engine_pushed_out_of_the_cache_closes_its_idle_connections(tmp_path: Path) -> None:
    """Dropped with idle connections open, an engine would close them only when collected,
    warning then (in whichever test runs at that moment)."""
    forget_engines()
    first = get_engine(f"sqlite:///{tmp_path / 'first.db'}")
    with first.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    assert first.pool.checkedin() == 1  # type: ignore[attr-defined]
    others = [get_engine(f"sqlite:///{tmp_path / f'{i}.db'}") for i in range(ENGINES)]
    assert first.pool.checkedin() == 0  # type: ignore[attr-defined]
    assert get_engine(f"sqlite:///{tmp_path / 'first.db'}") is not first
    forget_engines()
    for engine in [first, *others]:
        engine.dispose()

"""Fixtures of the storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Api, make_api


@pytest.fixture
def pg_api(pg_url: str) -> Iterator[Api]:
    """An app on a fresh migrated PostgreSQL database (results partitioned by day)."""
    yield from make_api(pg_url)

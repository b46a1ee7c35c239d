"""Fixtures for the webhook tests: a real receiver, settings that point at it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.settings import Settings
from tests.notify.receiver import Receiver

SECRET = "whsec-test-0123456789"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def webhook_settings(url: str, *receivers: Receiver, **overrides: Any) -> Settings:
    """Settings for a delivery runner on `url` posting to the receivers."""
    values: dict[str, Any] = {
        "database_url": url,
        "webhook_urls": ",".join(r.url for r in receivers),
        "webhook_secret": SECRET,
        "public_url": "https://shadowplane.example",
        "webhook_timeout_seconds": 5.0,
        **overrides,
    }
    return Settings(**values)


def clean_env(**values: str) -> dict[str, str]:
    """This process's environment without SHADOWPLANE_* settings, plus `values`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env.update(values)
    return env

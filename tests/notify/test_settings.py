"""Webhook URLs without a secret refuse to start: nothing is ever sent unsigned."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from controlplane.api import create_app
from controlplane.settings import Settings, get_settings
from tests.liveapi import run_cli
from tests.notify.conftest import clean_env


@pytest.mark.parametrize("secret", [None, ""])
def test_webhook_urls_without_a_secret_are_refused(secret: str | None) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(webhook_urls="https://hooks.example/a", webhook_secret=secret)
    message = str(refused.value)
    assert "SHADOWPLANE_WEBHOOK_URLS" in message and "SHADOWPLANE_WEBHOOK_SECRET" in message
    # Without URLs there is nothing to sign; with both, the URLs are read as a list.
    assert Settings(webhook_urls=" , ").webhook_url_list == []
    both = Settings(webhook_urls="https://a.example/h, http://b.example/h", webhook_secret="k")
    assert both.webhook_url_list == ["https://a.example/h", "http://b.example/h"]


def test_the_api_refuses_to_start_from_such_an_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHADOWPLANE_WEBHOOK_URLS", "https://hooks.example/a")
    monkeypatch.delenv("SHADOWPLANE_WEBHOOK_SECRET", raising=False)
    get_settings.cache_clear()
    try:
        with pytest.raises(ValidationError, match="SHADOWPLANE_WEBHOOK_SECRET is not"):
            create_app()
    finally:
        get_settings.cache_clear()


def test_a_webhook_url_must_be_http() -> None:
    with pytest.raises(ValidationError, match="ftp://a.example is not an http"):
        Settings(webhook_urls="ftp://a.example", webhook_secret="k")


@pytest.mark.parametrize("command", [["api", "--port", "1"], ["tick"], ["migrate"]])
def test_the_commands_refuse_to_start_naming_both_settings(
    command: list[str], tmp_path: Path
) -> None:
    env = clean_env(
        SHADOWPLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'never.db'}",
        SHADOWPLANE_WEBHOOK_URLS="https://hooks.example/a",
    )
    # Each command as a process of its own (forked from one that imported the app).
    done = run_cli(command, env, tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: settings refused:"), done.stderr
    assert "SHADOWPLANE_WEBHOOK_URLS is set but SHADOWPLANE_WEBHOOK_SECRET is not" in done.stderr
    assert not (tmp_path / "never.db").exists()  # refused before touching anything

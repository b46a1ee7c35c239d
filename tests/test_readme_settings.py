"""README, "Settings": the table's defaults are the ones a process with no `SHADOWPLANE_*`
variable runs with, each variable sets its setting, and a rate of 0 turns that limit off.

The table is read from README.md itself, so a default changed on either side fails here."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from controlplane.api import create_app
from controlplane.compare import native
from controlplane.settings import Settings
from tests.conftest import make_api

README = Path(__file__).resolve().parent.parent / "README.md"
MIB = 1024 * 1024


def readme_settings() -> dict[str, str]:
    """Each variable of the README's settings table and the default the table gives it."""
    text = README.read_text(encoding="utf-8")
    table = text.split("### Settings", 1)[1].split("\n\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`SHADOWPLANE_"):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        defaults = [d.strip() for d in cells[1].split(",")] if len(names) > 1 else [cells[1]]
        assert len(defaults) == len(names), line
        first = names[0]
        for name, default in zip(names, defaults, strict=True):
            if name.startswith("…_"):
                rows[full_name(first, name.removeprefix("…_"))] = default
            else:
                rows[name] = default
    return rows


def full_name(first: str, suffix: str) -> str:
    """`…_BURST` beside `SHADOWPLANE_RATE_INGEST_PER_SECOND` is `SHADOWPLANE_RATE_INGEST_BURST`;
    `…_BACKOFF_MAX_SECONDS` beside `SHADOWPLANE_WEBHOOK_BACKOFF_SECONDS` is
    `SHADOWPLANE_WEBHOOK_BACKOFF_MAX_SECONDS`."""
    if first.endswith("_PER_SECOND"):
        return f"{first.removesuffix('_PER_SECOND')}_{suffix}"
    word = suffix.split("_")[0]
    return f"{first[: first.index('_' + word + '_')]}_{suffix}"


def parse_default(text: str) -> Any:
    """The README's spelling of a default as the value it means."""
    if text == "unset":
        return None
    if text == "empty":
        return ""
    if match := re.fullmatch(r"`([^`]*)`", text):
        return match.group(1)
    if match := re.fullmatch(r"(\d+) MiB", text):
        return int(match.group(1)) * MIB
    if match := re.fullmatch(r"(\d+) KiB", text):
        return int(match.group(1)) * 1024
    if match := re.fullmatch(r"(\d+) days", text):
        return timedelta(days=int(match.group(1)))
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    return text


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("SHADOWPLANE_"):
            monkeypatch.delenv(name)


def test_the_table_is_read_whole() -> None:
    rows = readme_settings()
    # Both variables of the paired rows are found under their full names.
    for name in (
        "SHADOWPLANE_RATE_INGEST_BURST",
        "SHADOWPLANE_RATE_ADMIN_BURST",
        "SHADOWPLANE_WEBHOOK_BACKOFF_MAX_SECONDS",
        "SHADOWPLANE_DATABASE_URL",
        "SHADOWPLANE_LOG_LEVEL",
    ):
        assert name in rows, sorted(rows)


def test_every_default_in_the_readme_table_is_the_default_a_process_runs_with(
    clean_env: None,
) -> None:
    settings = Settings()
    fields = type(settings).model_fields
    checked = []
    for name, written in readme_settings().items():
        field = name.removeprefix("SHADOWPLANE_").lower()
        if name == native.ENV:
            # Not a pydantic setting: the text reader reads its variable itself.
            assert written == "auto" and native.CHOICES[0] == "auto"
            continue
        assert field in fields, f"{name} is in the README's table but is no setting"
        value = getattr(settings, field)
        expected = parse_default(written)
        assert value == expected, (name, value, written)
        checked.append(name)
    # The whole table was compared, not a part of it.
    assert len(checked) >= 30, checked


def test_with_no_variable_set_the_embedded_default_runs(clean_env: None) -> None:
    """ "With none set, the embedded default runs: a SQLite file in the working directory and
    no Redis." """
    settings = Settings()
    assert settings.is_sqlite and settings.database_url == "sqlite:///./shadowplane.db"
    assert settings.redis_url is None


@pytest.mark.parametrize(
    ("written", "meant"), [("P7D", 7 * 86400), ("PT1H", 3600), ("600", 600), ("86400", 86400)]
)
def test_max_backfill_is_an_iso_duration_or_seconds(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, written: str, meant: int
) -> None:
    monkeypatch.setenv("SHADOWPLANE_MAX_BACKFILL", written)
    assert Settings().max_backfill == timedelta(seconds=meant)


@pytest.mark.parametrize("written", ["-5", "0", "-P1D"])
def test_a_max_backfill_that_is_not_positive_is_refused_naming_it(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    # It would reject every result as too old: refused at start, not obeyed.
    monkeypatch.setenv("SHADOWPLANE_MAX_BACKFILL", written)
    with pytest.raises(ValidationError, match="max_backfill"):
        Settings()


def test_each_variable_sets_its_setting(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWPLANE_RATE_READ_BURST", "7")
    monkeypatch.setenv("SHADOWPLANE_REVIEW_LEASE_SECONDS", "90")
    monkeypatch.setenv("SHADOWPLANE_WEBHOOK_URLS", "https://a.example/x, http://b.example/y")
    monkeypatch.setenv("SHADOWPLANE_WEBHOOK_SECRET", "s")
    settings = Settings()
    assert settings.rate_read_burst == 7 and settings.review_lease_seconds == 90
    assert settings.webhook_url_list == ["https://a.example/x", "http://b.example/y"]


def test_a_rate_of_zero_turns_that_limit_off(sqlite_url: str) -> None:
    """ "A rate of 0 turns that limit off": a read key far past a burst of 3 is never refused
    while the read rate is 0; the same burst with a rate above 0 refuses the fourth."""
    from fastapi.testclient import TestClient

    for api in make_api(sqlite_url, rate_read_per_second=0, rate_read_burst=3):
        read = api.headers("read")
        assert {api.client.get("/v1/tasks", headers=read).status_code for _ in range(20)} == {200}
        limited = create_app(
            Settings(
                database_url=api.url, tick_seconds=0, rate_read_per_second=0.01, rate_read_burst=3
            )
        )
        with TestClient(limited) as client:
            statuses = [client.get("/v1/tasks", headers=read).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]


def test_tick_seconds_zero_turns_the_in_process_scheduler_off(sqlite_url: str) -> None:
    """SHADOWPLANE_TICK_SECONDS: 0 turns the in-process scheduler off; without Redis any
    other value runs it (`api` does the periodic work itself)."""
    app = create_app(Settings(database_url=sqlite_url, tick_seconds=0))
    from fastapi.testclient import TestClient

    with TestClient(app):
        assert app.state.scheduler is None
    app = create_app(Settings(database_url=sqlite_url, tick_seconds=3600))
    with TestClient(app):
        assert app.state.scheduler is not None


def test_log_level_is_the_level_of_the_api_logs(sqlite_url: str) -> None:
    import logging

    logger = logging.getLogger("shadowplane")
    before = logger.level
    try:
        create_app(Settings(database_url=sqlite_url, tick_seconds=0, log_level="WARNING"))
        assert logger.getEffectiveLevel() == logging.WARNING
        create_app(Settings(database_url=sqlite_url, tick_seconds=0))
        assert logger.getEffectiveLevel() == logging.INFO
    finally:
        logger.setLevel(before)

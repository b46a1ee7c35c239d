"""Which text reader runs: chosen by SHADOWPLANE_TEXT_READER, logged at startup, exported on
/metrics. That a package built where no C compiler exists installs and reads with the Python
reader, and a wheel built with one has the compiled reader, is tests/packaging/test_wheel.py's."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.compare import native
from tests.conftest import Api, make_api

ROOT = Path(__file__).resolve().parent.parent


# Marked text_reader: runs once with each reader (the `text_reader` parameter).
@pytest.mark.text_reader
def test_the_reader_the_suite_asked_for_is_the_one_that_runs(text_reader: str) -> None:
    # Each run must really use the reader it names, here and in the processes it starts.
    assert os.environ.get(native.ENV) == text_reader
    if text_reader == "native":
        assert native.ACTIVE and native.READER is not None
    else:
        assert not native.ACTIVE and native.READER is None


def test_an_unknown_choice_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV, "fast")
    with pytest.raises(ValueError, match="SHADOWPLANE_TEXT_READER='fast': must be one of"):
        native._load()


def test_python_is_chosen_even_where_the_compiled_reader_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(native.ENV, "python")
    assert native._load() is None


def test_without_the_build_auto_falls_back_and_native_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A module set to None in sys.modules cannot be imported: as if it were never built.
    monkeypatch.setitem(sys.modules, "controlplane.compare._numbers", None)
    monkeypatch.setenv(native.ENV, "auto")
    assert native._load() is None
    monkeypatch.setenv(native.ENV, "native")
    with pytest.raises(ImportError, match="SHADOWPLANE_TEXT_READER=native but the compiled"):
        native._load()


@pytest.fixture
def reader_logs(db_url: str) -> Iterator[tuple[Api, list[str]]]:
    """An app started with a handler on the `shadowplane` logger; the messages logged."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Keep()
    logger = logging.getLogger("shadowplane")
    logger.addHandler(handler)
    try:
        for api in make_api(db_url):
            yield api, messages
    finally:
        logger.removeHandler(handler)


# Marked text_reader: runs once with each reader.
@pytest.mark.text_reader
def test_startup_logs_which_reader_runs(reader_logs: tuple[Api, list[str]]) -> None:
    _, messages = reader_logs
    which = "native" if native.ACTIVE else "python"
    started = [m for m in messages if '"event": "startup"' in m]
    assert len(started) == 1, messages
    assert f'"text_reader": "{which}"' in started[0]
    assert native.reader_name() in started[0]


def _gauge(api: Api) -> float:
    response = api.client.get("/metrics", headers=api.headers("read"))
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    [sample] = families["shadowplane_native_reader"].samples
    return sample.value


# Marked text_reader: runs once with each reader.
@pytest.mark.text_reader
def test_metrics_export_which_reader_runs(
    reader_logs: tuple[Api, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, _ = reader_logs
    assert _gauge(api) == (1 if native.ACTIVE else 0)
    monkeypatch.setattr(native, "ACTIVE", False)
    assert _gauge(api) == 0
    monkeypatch.setattr(native, "ACTIVE", True)
    assert _gauge(api) == 1

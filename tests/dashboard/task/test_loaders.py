"""shadowplane_dashboard.task.loaders: the page's reads hand their rows to the same plain functions the
views tests cover (no second copy of a rule inside a loader)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shadowplane_dashboard.formats import line
from shadowplane_dashboard.task import loaders, views
from tests.conftest import Api, make_result


def test_task_names_are_ordered_by_rolled_back_first(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [
        {"task": "b", "stage": "shadow"},
        {"task": "z", "stage": "rolled_back"},
        {"task": "a", "stage": "canary"},
    ]
    monkeypatch.setattr(loaders, "list_task_views", lambda session: found)
    ordered_by: list[Any] = []
    rule = views.rolled_back_first

    def spy(rows: Any) -> list[str]:
        ordered_by.append(rows)
        return rule(rows)

    monkeypatch.setattr(views, "rolled_back_first", spy)
    loaders.load_task_names.clear()
    try:
        assert loaders.load_task_names("sqlite://") == ["z", "a", "b"]
    finally:
        loaders.load_task_names.clear()
    assert ordered_by == [found]


def test_an_example_result_read_back_from_storage_names_its_skipped_side(api: Api) -> None:
    """The Task page's example results (`load_examples`) of a result posted with `skipped`:
    stored, read back and said."""
    # A conflict (an example the page shows) whose cloud repeat the router did not ask for.
    posted = make_result(
        request_id="skipped-1",
        cloud={"output": "exchange", "latency_ms": 380.0, "model": "large@7"},
        skipped={"cloud_repeat": "outside the repeat sample"},
    )
    answer = api.client.post("/v1/results", json=posted, headers=api.headers("ingest"))
    assert answer.status_code == 200 and answer.json()["accepted"] == 1, answer.text
    ts = datetime(2026, 11, 30, 2, tzinfo=UTC)
    loaders.load_examples.clear()
    try:
        found = loaders.load_examples(
            api.url, "ticket_classify", ts - timedelta(hours=1), ts + timedelta(hours=1), "all", ()
        )
    finally:
        loaders.load_examples.clear()
    assert [r["request_id"] for r in found] == ["skipped-1"]
    said = views.example_line(found[0])
    assert "outcome **conflict**" in said, said
    reason = line("outside the repeat sample")
    assert said.endswith(f", the cloud's repeat not run ({reason})"), said

"""shadowplane_dashboard.task.loaders: the page's reads hand their rows to the same plain functions the
views tests cover (no second copy of a rule inside a loader)."""

from __future__ import annotations

from typing import Any

import pytest

from shadowplane_dashboard.task import loaders, views


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

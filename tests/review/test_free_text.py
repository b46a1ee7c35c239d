"""A reviewer's free text (a label's note, a skip's reason) is checked by the action layer,
so the API, the CLI and the dashboard refuse the same text the same way (422 naming the
field) before the database sees it: too long, or holding a control character (PostgreSQL
refuses a NUL in text, which would otherwise surface as a storage error)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from controlplane.db import get_engine, session_scope
from controlplane.errors import ActionError
from controlplane.models import ReviewItem, ReviewLabel, ReviewSkip
from controlplane.review import actions
from controlplane.review.queue import MAX_NOTE, MAX_REASON
from controlplane.rollout.configs import apply_config
from tests.conftest import TICKET_TASK, make_api
from tests.review.queuedata import T0, add_items


def _engine(url: str) -> Engine:
    engine = get_engine(url)
    with session_scope(engine) as session:
        apply_config(session, TICKET_TASK, actor="test")
    return engine


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _claimed(engine: Engine) -> int:
    (item,) = add_items(engine, "ticket_classify", 1)
    got: Any = actions.claim(engine, "ticket_classify", "ann", _at(0), lease_seconds=600.0)
    assert got["id"] == item
    return item


def _count(engine: Engine, model: Any) -> int:
    with session_scope(engine) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


HOSTILE = ["a\x00b", "bell\x07", "escape \x1b[31mred", "form\x0cfeed", "\x1f"]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_note_with_a_control_character_is_refused_naming_the_field(
    db_url: str, text: str
) -> None:
    engine = _engine(db_url)
    item = _claimed(engine)
    with pytest.raises(ActionError) as refused:
        actions.label(engine, item, "ann", verdict="a_correct", note=text, now=_at(1))
    assert refused.value.status == 422
    assert str(refused.value.detail).startswith("note: holds the control character U+")
    assert _count(engine, ReviewLabel) == 0
    # Nothing was changed: the reviewer still holds the item and may label it.
    actions.label(engine, item, "ann", verdict="a_correct", note="fine", now=_at(2))
    assert _count(engine, ReviewLabel) == 1


@pytest.mark.parametrize("text", HOSTILE)
def test_a_skip_reason_with_a_control_character_is_refused_naming_the_field(
    db_url: str, text: str
) -> None:
    engine = _engine(db_url)
    item = _claimed(engine)
    with pytest.raises(ActionError) as refused:
        actions.release(engine, item, "ann", skip=True, reason=text, now=_at(1))
    assert refused.value.status == 422
    assert str(refused.value.detail).startswith("reason: holds the control character U+")
    assert _count(engine, ReviewSkip) == 0
    with session_scope(engine) as session:
        assert session.get(ReviewItem, item).claimed_by == "ann"


def test_tabs_and_line_breaks_are_kept(db_url: str) -> None:
    engine = _engine(db_url)
    item = _claimed(engine)
    note = "first line\r\nsecond\tcolumn\n"
    actions.label(engine, item, "ann", verdict="a_correct", note=note, now=_at(1))
    with session_scope(engine) as session:
        assert session.scalar(select(ReviewLabel.note)) == note


def test_the_bounds_are_the_apis(sqlite_url: str) -> None:
    engine = _engine(sqlite_url)
    item = _claimed(engine)
    with pytest.raises(ActionError, match=f"note: at most {MAX_NOTE} characters"):
        actions.label(engine, item, "ann", verdict="a_correct", note="x" * (MAX_NOTE + 1))
    with pytest.raises(ActionError, match=f"reason: at most {MAX_REASON} characters"):
        actions.release(engine, item, "ann", reason="x" * (MAX_REASON + 1), now=_at(1))


def test_the_api_refuses_them_as_the_action_layer_does(db_url: str) -> None:
    for api in make_api(db_url):
        (item,) = add_items(api.engine, "ticket_classify", 1)
        headers = {**api.headers("review"), "Content-Type": "application/json"}
        assert api.client.get("/v1/review/next", headers=headers).json()["item"]["id"] == item
        # (A NUL the API's body reader refuses already, for any field.)
        answer = api.client.post(
            f"/v1/review/{item}/label",
            content=json.dumps({"verdict": "a_correct", "note": "a\x07b"}),
            headers=headers,
        )
        assert answer.status_code == 422, answer.text
        assert "note: holds the control character U+0007" in answer.text
        answer = api.client.post(
            f"/v1/review/{item}/release",
            content=json.dumps({"skip": True, "reason": "a\x1bb"}),
            headers=headers,
        )
        assert answer.status_code == 422, answer.text
        assert "reason: holds the control character U+001B" in answer.text
        assert _count(api.engine, ReviewLabel) == 0 and _count(api.engine, ReviewSkip) == 0

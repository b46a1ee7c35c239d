"""`resolve` (both sides on the serving path) and the Server-Sent Events reader."""

from __future__ import annotations

from typing import Any

from controlplane.client import resolve
from controlplane.client.sse import COMMENT, Event, events


def test_equal_answers_resolve_to_the_edge() -> None:
    got = resolve({"label": "refund"}, {"label": "refund"})
    assert (got.output, got.served, got.conflict, got.need_confirm) == (
        {"label": "refund"},
        "edge",
        False,
        False,
    )


def test_different_answers_resolve_to_the_cloud_as_a_conflict() -> None:
    got = resolve("exchange", "refund")
    assert (got.output, got.served, got.conflict, got.need_confirm) == (
        "refund",
        "cloud",
        True,
        False,
    )


def test_same_decides_agreement_and_a_same_that_raises_means_conflict() -> None:
    def same(a: Any, b: Any) -> bool:
        return str(a).strip().lower() == str(b).strip().lower()

    assert resolve(" Refund ", "refund", same=same).served == "edge"
    assert resolve(" Refund ", "refund", same=same).output == " Refund "

    def broken(a: Any, b: Any) -> bool:
        raise RuntimeError("comparator bug")

    got = resolve("refund", "refund", same=broken)
    assert (got.served, got.conflict, got.output) == ("cloud", True, "refund")


def test_an_irreversible_action_always_needs_confirmation() -> None:
    agreed = resolve({"refund": 120}, {"refund": 120}, irreversible=True)
    differed = resolve({"refund": 1200}, {"refund": 120}, irreversible=True)
    assert agreed.need_confirm and differed.need_confirm
    assert (agreed.served, differed.served, differed.output) == ("edge", "cloud", {"refund": 120})
    assert differed.as_dict() == {
        "output": {"refund": 120},
        "served": "cloud",
        "conflict": True,
        "need_confirm": True,
    }


def test_sse_events_comments_and_multi_line_data() -> None:
    lines = [
        ": heartbeat",
        "",
        "id: 42",
        "event: flags",
        'data: {"revision":42,',
        'data:"flags":{}}',
        "",
        "event: flags",  # no data: never dispatched
        "",
        "retry: 1000",
        "data: plain",
        "",
    ]
    assert list(events(lines)) == [
        Event(COMMENT, "heartbeat", None),
        Event("flags", '{"revision":42,\n"flags":{}}', "42"),
        Event("message", "plain", "42"),
    ]


def test_sse_unfinished_event_is_not_dispatched() -> None:
    assert list(events(["id: 1", "event: flags", 'data: {"rev'])) == []

"""`resolve` (both sides on the serving path) and the Server-Sent Events reader."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.client import resolve
from controlplane.client.sse import COMMENT, Event, EventReader, StreamTooLarge, events


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


def _read(chunks: list[bytes], **caps: int) -> tuple[list[Event], EventReader]:
    reader = EventReader(max_line=caps.get("max_line", 1 << 20), max_event=caps.get("max_event"))
    got: list[Event] = []
    for chunk in chunks:
        got += reader.feed(chunk)
    return got, reader


STREAM = (
    b"\xef\xbb\xbf: heartbeat\r\n\r\n"  # a byte order mark first, CRLF line ends
    b'retry: 1500\rid: 7\revent: flags\rdata: {"revision":7}\r\r'  # CR line ends
    b'event: heartbeat\ndata: {"revision": 7, "stale_seconds": null}\n\n'  # LF
    b"retry: soon\r\ndata: a\r\ndata: b\n\r\n"  # mixed; a retry that is not digits
)
EXPECTED = [
    Event(COMMENT, "heartbeat", None),
    Event("flags", '{"revision":7}', "7"),
    Event("heartbeat", '{"revision": 7, "stale_seconds": null}', "7"),
    Event("message", "a\nb", "7"),
]


def test_sse_reader_takes_crlf_cr_and_lf_line_ends_and_the_retry_field() -> None:
    got, reader = _read([STREAM])
    assert got == EXPECTED and reader.retry == 1500


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_sse_reader_gives_the_same_events_however_the_bytes_are_cut(size: int) -> None:
    # A CR at the end of one chunk and the LF starting the next are one line end.
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    got, reader = _read(chunks)
    assert got == EXPECTED and reader.retry == 1500


def test_sse_reader_refuses_a_line_or_an_event_over_its_cap() -> None:
    with pytest.raises(StreamTooLarge, match="a line over 1024 bytes"):
        _read([b"id: 1\nevent: flags\n", *[b"x" * 100] * 11], max_line=1024)
    with pytest.raises(StreamTooLarge, match="a line over 1024 bytes"):
        _read([b"data: " + b"x" * 2000 + b"\n\n"], max_line=1024)
    with pytest.raises(StreamTooLarge, match="an event over 1500 bytes"):
        _read([b"data: " + b"x" * 1000 + b"\n"] * 2, max_line=1024, max_event=1500)
    # Under the caps, many lines and events are fine.
    got, _ = _read([b"data: " + b"x" * 1000 + b"\n\n"] * 50, max_line=1024, max_event=1500)
    assert len(got) == 50

"""Reading Server-Sent Events line by line (the part of the WHATWG rules the flag stream uses).

id: <revision>
event: flags
data: <the flags document on one line>
<blank line: the event is dispatched>
: heartbeat          <a comment: yielded as event "comment", so the reader knows the
                      connection is alive>
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    event: str
    data: str
    id: str | None = None


COMMENT = "comment"


def events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of a stream given as lines without their line ends (httpx `iter_lines`)."""
    name = ""
    data: list[str] = []
    last_id: str | None = None
    for line in lines:
        if line == "":
            if data:
                yield Event(name or "message", "\n".join(data), last_id)
            name, data = "", []
            continue
        if line.startswith(":"):
            yield Event(COMMENT, line[1:].strip(), None)
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field == "id" and "\0" not in value:
            last_id = value
        # `retry` and unknown fields are ignored: the client keeps its own schedule.

"""Reading Server-Sent Events (the WHATWG rules the flag stream needs), with size caps.

Lines end with CRLF, LF or CR; a comment line (the heartbeat of older servers) is yielded
as event "comment", so the reader knows the connection is alive. `EventReader` refuses a
line over `max_line` or an event's data over `max_event` (`StreamTooLarge`), so a server
that never ends a line cannot fill the memory. The events: docs/http-api.md, "Streaming".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    event: str
    data: str
    id: str | None = None


COMMENT = "comment"
_EOL = re.compile(rb"\r\n|\r|\n")


class StreamTooLarge(ValueError):
    """A line or an event over the reader's cap."""


class _Fields:
    """The field rules of the spec, one decoded line at a time."""

    def __init__(self, max_event: int | None) -> None:
        self.max_event = max_event
        self.name = ""
        self.data: list[str] = []
        self.size = 0
        self.last_id: str | None = None
        self.retry: int | None = None

    def line(self, line: str) -> Event | None:
        if line == "":
            data, name = self.data, self.name
            self.name, self.data, self.size = "", [], 0
            return Event(name or "message", "\n".join(data), self.last_id) if data else None
        if line.startswith(":"):
            return Event(COMMENT, line[1:].strip(), None)
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self.name = value
        elif field == "data":
            self.size += len(value) + 1
            if self.max_event is not None and self.size > self.max_event:
                raise StreamTooLarge(f"an event over {self.max_event} bytes")
            self.data.append(value)
        elif field == "id" and "\0" not in value:
            self.last_id = value
        elif field == "retry" and value.isascii() and value.isdigit() and len(value) <= 9:
            self.retry = int(value)
        # Unknown fields are ignored.
        return None


class EventReader:
    """``for event in reader.feed(chunk)``: the events completed by each chunk of bytes."""

    def __init__(self, *, max_line: int, max_event: int | None = None) -> None:
        self.max_line = max_line
        self._fields = _Fields(max_event if max_event is not None else max_line)
        self._buffer = bytearray()
        self._scanned = 0  # the buffer holds no line end before this offset
        self._after_cr = False  # the last chunk ended with CR: a LF next is the same end
        self._first = True

    @property
    def retry(self) -> int | None:
        """The last `retry:` the server sent, in milliseconds."""
        return self._fields.retry

    @property
    def last_id(self) -> str | None:
        return self._fields.last_id

    def feed(self, chunk: bytes) -> list[Event]:
        if not chunk:
            return []
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = False
        buffer = self._buffer
        buffer += chunk
        out: list[Event] = []
        start = 0
        while (match := _EOL.search(buffer, self._scanned)) is not None:
            end = match.start()
            if end - start > self.max_line:
                raise StreamTooLarge(f"a line over {self.max_line} bytes")
            line = bytes(buffer[start:end])
            if match.end() == len(buffer) and match.group() == b"\r":
                self._after_cr = True
            start = self._scanned = match.end()
            event = self._fields.line(self._decode(line))
            if event is not None:
                out.append(event)
        del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) > self.max_line:
            raise StreamTooLarge(f"a line over {self.max_line} bytes")
        return out

    def _decode(self, line: bytes) -> str:
        text = line.decode("utf-8", "replace")
        if self._first:
            self._first = False
            text = text.removeprefix("\ufeff")
        return text


def events(lines: Iterable[str], *, max_event: int | None = None) -> Iterator[Event]:
    """The events of a stream given as lines without their line ends."""
    fields = _Fields(max_event)
    for line in lines:
        event = fields.line(line)
        if event is not None:
            yield event

"""An incremental ``text/event-stream`` parser (the WHATWG server-sent events rules).

Bytes go in as the network delivers them, split anywhere (inside a UTF-8 character,
between ``\\r`` and ``\\n``); complete events come out. Comments (``: keep-alive``) are
skipped, ``data:`` lines of one event are joined with ``\\n``, ``\\r\\n``, ``\\r`` and
``\\n`` all end a line. Unlike a browser, :meth:`SSEDecoder.flush` also returns a last
event that the server did not terminate with a blank line.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent"]

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed chunks with :meth:`feed`, call :meth:`flush` at the end of the stream."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line = ""
        self._skip_lf = False
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        """Parse ``chunk``; return the events it completed (maybe none)."""
        text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        return self._text(text)

    def flush(self) -> list[SSEEvent]:
        """End of stream: parse what is left, including an unterminated last event."""
        events = self._text(self._utf8.decode(b"", final=True))
        if self._line:
            line, self._line = self._line, ""
            self._field(line)
        last = self._dispatch()
        return [*events, last] if last is not None else events

    def _text(self, text: str) -> list[SSEEvent]:
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._skip_lf:
            self._skip_lf = False
            text = text.removeprefix("\n")
        if text.endswith("\r"):  # may be the first half of a \r\n split across chunks
            self._skip_lf = True
        *lines, self._line = _LINE_END.split(self._line + text)
        events: list[SSEEvent] = []
        for line in lines:
            if line:
                self._field(line)
            elif (ev := self._dispatch()) is not None:
                events.append(ev)
        return events

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return  # a comment
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)

    def _dispatch(self) -> SSEEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SSEEvent(
            data="\n".join(data), event=event or "message", id=self._last_id, retry=self._retry
        )

"""Stop sequences on a stream of text deltas.

A stop string can arrive split across deltas ("\\nCust" + "omer:"), so the filter holds back
the shortest tail that could still begin a stop and releases it as soon as it cannot.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopFilter", "looping"]


class StopFilter:
    """Feed deltas in, get the text to emit out; ``done`` once a stop string was seen."""

    __slots__ = ("_buf", "done", "stops")

    def __init__(self, stops: Sequence[str] = ()) -> None:
        self.stops = tuple(s for s in stops if s)
        self._buf = ""
        self.done = False

    def feed(self, delta: str) -> str:
        """Return the part of ``delta`` (plus held-back text) that is safe to emit."""
        if self.done:
            return ""
        if not self.stops:
            return delta
        buf = self._buf + delta
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self._buf = ""
            self.done = True
            return buf[:cut]
        hold = self._held_tail(buf)
        self._buf = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold]

    def flush(self) -> str:
        """The held-back text, at the end of the stream."""
        out, self._buf = self._buf, ""
        return "" if self.done else out

    def _held_tail(self, buf: str) -> int:
        best = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:k]):
                    best = k
                    break
        return best


def looping(
    text: str, min_unit: int = 4, max_unit: int = 32, repeats: int = 2, run: int = 6
) -> bool:
    """True when ``text`` ends with a phrase repeated ``repeats`` times or more, or with one
    letter or character (not a digit) ``run`` times in a row.

    Small models fall into loops ("请问您是…，请问您是…，", "我的宽带卡卡卡卡卡卡…"); a caller
    stops generating when this turns true. Other phrases shorter than ``min_unit``
    characters or made of one character ("0000", "!!!!") never count, so numbers and
    emphasis pass.
    """
    n = len(text)
    if n >= run and text[-1].isalpha() and text.endswith(text[-1] * run):
        return True
    for unit in range(min_unit, min(max_unit, n // repeats) + 1):
        tail = text[n - unit :]
        if len(set(tail.replace(" ", ""))) >= 2 and text.endswith(tail * repeats):
            return True
    return False

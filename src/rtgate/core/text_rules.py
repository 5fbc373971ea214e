"""The rules every text that enters rtgate must meet, whatever the entry point.

One function, :func:`check_text`, is called by every route and WebSocket that takes text
(the gate, chat completions, ``/v1/ws``, the autocomplete routes) before anything else sees
it, so bad text gets the same error everywhere and never reaches a tier or a backend: a lone
surrogate (``"\\ud800"`` in JSON) cannot be encoded as UTF-8, and a model backend that
failed on it would count the failure against its circuit breaker, a fault of the caller
charged to the backend.

Refused: lone surrogates, NUL and the other C0/C1 control characters except tab, newline
and carriage return. Allowed: any other Unicode, including right-to-left text, marks and
joiners.
"""

from __future__ import annotations

import re

from rtgate.core.errors import InvalidRequest

__all__ = ["check_text"]

_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def check_text(value: str, field: str) -> str:
    """``value`` if it meets the rules, else ``InvalidRequest`` naming ``field`` and the
    first offending character's position (never the text itself)."""
    bad = _BAD.search(value)
    if bad is not None:
        ch = bad.group()
        kind = "a lone surrogate" if "\ud800" <= ch <= "\udfff" else "a control character"
        raise InvalidRequest(
            f"{field}: {kind} (U+{ord(ch):04X}) at position {bad.start()} is not allowed"
        )
    return value

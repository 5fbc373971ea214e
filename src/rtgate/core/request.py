"""What a caller asks and what an answer is made of: :class:`Request`, :class:`Message`,
:class:`Piece`.

These are the words every floor above shares (tiers, backends, the gate, the server), so
they live at the bottom, with no dependency but the standard library.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Message", "Piece", "Request"]

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message, as in the OpenAI chat API."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class Request:
    """What a caller asks the gate.

    ``input`` is the text that fast tiers look at (the last user turn, or a typed prefix);
    ``messages`` is the full conversation for model tiers (empty means ``[user: input]``).
    ``delegate``: ``None`` lets the gate decide, ``True`` always runs the best tier in the
    background when it could not answer in budget, ``False`` never does.
    """

    input: str
    messages: Sequence[Message] = ()
    max_tokens: int = 128
    temperature: float = 0.0
    stop: Sequence[str] = ()
    delegate: bool | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: f"req-{next(_ids)}")

    def chat(self) -> list[Message]:
        """The conversation to send to a chat model."""
        return list(self.messages) if self.messages else [Message("user", self.input)]


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of an answer with structured data beside the text (candidates, intent…)."""

    text: str
    data: Mapping[str, Any] | None = None

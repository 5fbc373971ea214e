"""The one interface every tier implements.

A tier answers a :class:`Request` within a :class:`~rtgate.budget.Budget` by yielding
pieces of text (a token, a word, a whole answer). A tier that has nothing to say raises
:class:`~rtgate.errors.Declined` before its first piece. The gate, not the tier, times
the pieces, keeps the budget and decides what runs; a tier only answers.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgate.budget import Budget

__all__ = ["Message", "Piece", "Request", "Tier"]

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


class Tier(ABC):
    """A way to answer: a template table, a cache, a classifier, a model.

    Attributes:
        name: unique within a gate; appears in routes, traces and metrics.
        quality: rank used by the gate; a higher rank is preferred when it fits the budget.
        delegable: the gate may run this tier in the background when it cannot fit.
    """

    name: str = "tier"
    quality: int = 0
    delegable: bool = False

    @abstractmethod
    def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        """Yield the answer piece by piece; raise ``Declined`` before the first for a miss."""

    async def warmup(self) -> None:  # noqa: B027 - optional hook
        """Load and exercise whatever the tier needs, once, before traffic."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} q={self.quality}>"

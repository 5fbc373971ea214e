"""The one interface every model backend implements.

A backend turns a generation request into a stream of text deltas. It knows nothing of
tiers or of the gate's policy; the budget is passed so it can set its own timeouts, and the
gate cancels it (``CancelledError``) when the budget is spent: a backend must release its
connection or its inference slot when cancelled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from rtgate.core.budget import Budget
from rtgate.core.request import Message

__all__ = ["Backend", "Generation"]


@dataclass(frozen=True, slots=True)
class Generation:
    """What to generate: a chat (``messages``) or a raw completion (``prompt``)."""

    messages: Sequence[Message] = ()
    prompt: str | None = None
    max_tokens: int = 128
    temperature: float = 0.0
    stop: Sequence[str] = ()


class Backend(ABC):
    """A model behind one async method."""

    name: str = "backend"

    @abstractmethod
    def generate(self, gen: Generation, budget: Budget | None = None) -> AsyncIterator[str]:
        """Yield text deltas as the model produces them."""

    async def warmup(self) -> None:  # noqa: B027 - optional hook
        """Load weights and run one inference so the first real request is not cold."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Close connections, free the model."""

"""The one interface every tier implements.

A tier answers a :class:`Request` within a :class:`~rtgate.core.budget.Budget` by yielding
pieces of text (a token, a word, a whole answer). A tier that has nothing to say raises
:class:`~rtgate.core.errors.Declined` before its first piece. The gate, not the tier, times
the pieces, keeps the budget and decides what runs; a tier only answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from rtgate.core.budget import Budget
from rtgate.core.request import Piece, Request

__all__ = ["Tier"]


class Tier(ABC):
    """A way to answer: a template table, a cache, a classifier, a model.

    Attributes:
        name: unique within a gate; appears in routes, traces and metrics.
        quality: rank used by the gate; a higher rank is preferred when it fits the budget.
        delegable: the gate may run this tier in the background when it cannot fit.
        instant: the tier answers without waiting on anything (a lookup in memory, pure
            CPU, well under a millisecond): the gate calls :meth:`answer_now` in place of
            :meth:`stream`, with no task, timer or generator around it.
    """

    name: str = "tier"
    quality: int = 0
    delegable: bool = False
    instant: bool = False

    @abstractmethod
    def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        """Yield the answer piece by piece; raise ``Declined`` before the first for a miss."""

    def answer_now(self, request: Request) -> Piece:
        """An ``instant`` tier's whole answer, computed at once; ``Declined`` for a miss.
        It must not block: nothing can cut it off."""
        raise NotImplementedError(f"{self.name} is not an instant tier")

    async def warmup(self) -> None:  # noqa: B027 - optional hook
        """Load and exercise whatever the tier needs, once, before traffic."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} q={self.quality}>"

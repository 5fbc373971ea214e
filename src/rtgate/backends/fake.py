"""A scripted backend for tests, yours and ours (like httpx's ``MockTransport``).

Delays are ``asyncio.sleep`` calls, so on a virtual clock (``looptime``) a test of a
two-second stream takes no real time. It can hang forever, fail at token *k*, honour
``max_tokens`` and stop strings, and it records what it was asked and how it ended.

    backend = FakeBackend(["Hel", "lo"], ttft_ms=80, tpot_ms=20)
    backend = FakeBackend(lambda gen: ["echo: ", gen.messages[-1].content])
    backend = FakeBackend(hang_at=0)                 # never answers
    backend = FakeBackend(["a", "b", "c"], fail_at=2, error=BackendUnavailable("down"))
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from rtgate.backends.base import Backend, Generation
from rtgate.backends.stops import StopFilter
from rtgate.core.budget import Budget
from rtgate.core.errors import BackendUnavailable

__all__ = ["FakeBackend"]

Script = Sequence[str] | Callable[[Generation], Sequence[str]]


class FakeBackend(Backend):
    """Yields scripted tokens with scripted delays.

    Args:
        tokens: the tokens, or a function from the generation to its tokens.
        ttft_ms: delay before the first token; ``tpot_ms``: before each later one.
        delays_ms: a delay per token instead (missing entries fall back to ``tpot_ms``).
        hang_at: wait forever before token ``hang_at`` (0: before the first).
        fail_at: raise ``error`` before token ``fail_at`` (``len(tokens)``: after the last).
        scorer: ``(prefix, candidate) -> float`` for :meth:`score`; default prefers
            candidates that appear among the scripted tokens, then shorter ones.
    """

    def __init__(
        self,
        tokens: Script = ("Hello", ",", " world", "."),
        *,
        ttft_ms: float = 0.0,
        tpot_ms: float = 0.0,
        delays_ms: Sequence[float] | None = None,
        hang_at: int | None = None,
        fail_at: int | None = None,
        error: BaseException | None = None,
        scorer: Callable[[str, str], float] | None = None,
        name: str = "fake",
    ) -> None:
        self.name = name
        self._script = tokens
        self.ttft_ms = ttft_ms
        self.tpot_ms = tpot_ms
        self.delays_ms = list(delays_ms) if delays_ms is not None else None
        self.hang_at = hang_at
        self.fail_at = fail_at
        self.error = error if error is not None else BackendUnavailable("fake backend failure")
        self._scorer = scorer
        self.calls: list[Generation] = []
        self.active = 0
        self.completed = 0
        self.cancelled = 0
        self.failed = 0
        self.warmed = False
        self.closed = False

    def tokens_for(self, gen: Generation) -> list[str]:
        return list(self._script(gen) if callable(self._script) else self._script)

    def _delay_s(self, i: int) -> float:
        if self.delays_ms is not None and i < len(self.delays_ms):
            return self.delays_ms[i] / 1000.0
        return (self.ttft_ms if i == 0 else self.tpot_ms) / 1000.0

    async def generate(self, gen: Generation, budget: Budget | None = None) -> AsyncIterator[str]:
        self.calls.append(gen)
        self.active += 1
        tokens = self.tokens_for(gen)[: gen.max_tokens]
        stops = StopFilter(gen.stop)
        try:
            for i, tok in enumerate(tokens):
                await self._before(i)
                if delay := self._delay_s(i):
                    await asyncio.sleep(delay)
                out = stops.feed(tok)
                if out:
                    yield out
                if stops.done:
                    break
            else:
                await self._before(len(tokens))
            if tail := stops.flush():
                yield tail
            self.completed += 1
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def _before(self, i: int) -> None:
        if self.fail_at == i:
            self.failed += 1
            raise self.error
        if self.hang_at == i:
            await asyncio.get_running_loop().create_future()  # never set: hangs until cancelled

    async def score(
        self,
        prefix: str,
        candidates: Sequence[str],
        budget: Budget | None = None,
        *,
        normalize: bool = False,
        urgent: bool = False,
    ) -> list[float]:
        """Deterministic scores with the same signature as ``LlamaCppBackend.score``
        (``urgent`` changes nothing here: there is no queue)."""
        if self._scorer is not None:
            return [self._scorer(prefix, c) for c in candidates]
        known = "".join(self.tokens_for(Generation(prompt=prefix)))
        return [(10.0 if c and c in known else 0.0) - len(c) * 0.01 for c in candidates]

    async def warmup(self) -> None:
        self.warmed = True

    async def aclose(self) -> None:
        self.closed = True

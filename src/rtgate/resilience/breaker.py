"""A circuit breaker per backend, as a tier wrapper.

States::

    closed ──(failure rate >= threshold over the window)──▶ open
    open ──(cool-down passed, or a health probe succeeded)──▶ half-open
    half-open ──(trial call succeeded)──▶ closed
    half-open ──(trial call failed)──▶ open (cool-down doubled, up to max_open_s)

While open, :class:`BreakerTier` raises ``Declined("… circuit open")`` before doing any
work, so the gate moves to the next tier at once. With a ``probe``, an open breaker is
re-tested in the background (never on a user's request) and only a successful probe lets
trial traffic through.

What counts: an error raised by the inner tier is a failure; a ``Declined`` (a miss) or
``InvalidRequest`` or a ``UnicodeError`` (the caller's fault: text a backend cannot
encode) is neutral; a call that produced a first piece and
was then closed by its consumer is a success. A call cancelled or timed out before its
first piece is a failure only when it had waited ``slow_ms`` or more (a slow call); a
short cut-off is the budget's doing, not the backend's, so it is neutral.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from rtgate.core.budget import Budget, Clock
from rtgate.core.errors import Declined, InvalidRequest
from rtgate.core.request import Piece, Request
from rtgate.resilience.wrap import TierWrapper, aclose_quietly
from rtgate.tiers.base import Tier

__all__ = ["BreakerConfig", "BreakerTier", "CircuitBreaker", "Permit", "Probe", "tier_probe"]

log = logging.getLogger("rtgate.resilience")

State = Literal["closed", "open", "half_open"]
Outcome = Literal["success", "failure", "neutral"]
Probe = Callable[[], Awaitable[bool]]
"""A health check: ``True`` when the backend looks healthy again."""


def _loop_clock() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """When to open, and for how long.

    window_s / max_samples: outcomes kept (the older of the two limits wins; bounded memory).
    min_calls: no decision on fewer outcomes than this.
    failure_rate: open at or above this share of failures in the window.
    open_s: first cool-down; each failed trial or probe doubles it, up to ``max_open_s``.
    half_open_calls: trial calls allowed at once when half-open.
    slow_ms: a call with no first piece after this long counts as a failure (None: never).
    """

    window_s: float = 30.0
    max_samples: int = 100
    min_calls: int = 5
    failure_rate: float = 0.5
    open_s: float = 5.0
    max_open_s: float = 60.0
    half_open_calls: int = 1
    slow_ms: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be in (0, 1], got {self.failure_rate}")
        if self.min_calls < 1 or self.max_samples < self.min_calls:
            raise ValueError("need 1 <= min_calls <= max_samples")
        if self.open_s <= 0 or self.max_open_s < self.open_s or self.window_s <= 0:
            raise ValueError("need 0 < open_s <= max_open_s and window_s > 0")
        if self.half_open_calls < 1:
            raise ValueError("half_open_calls must be >= 1")


@dataclass(frozen=True, slots=True)
class Permit:
    """Leave to make one call; ``trial`` when it was let through half-open."""

    trial: bool


class CircuitBreaker:
    """The state machine alone (no I/O, no tasks): ``allow()`` then one ``record()``.

    ``clock`` returns monotonic seconds (default: the running loop's time, so tests on
    virtual time control it). ``probe_gated``: an open breaker stays open until
    :meth:`probe_result` reports success, instead of after a cool-down.
    """

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        clock: Clock | None = None,
        probe_gated: bool = False,
        name: str = "breaker",
    ) -> None:
        self.config = config or BreakerConfig()
        self.clock: Clock = clock or _loop_clock
        self.probe_gated = probe_gated
        self.name = name
        self._state: State = "closed"
        self._window: deque[tuple[float, bool]] = deque(maxlen=self.config.max_samples)
        self._open_until = 0.0
        self._backoff = 0
        self._trials = 0
        self.opened = 0
        self.rejected = 0
        self.listeners: list[Callable[[State, State], None]] = []

    @property
    def state(self) -> State:
        if self._state == "open" and not self.probe_gated and self.clock() >= self._open_until:
            self._move("half_open")
        return self._state

    @property
    def open_until(self) -> float:
        return self._open_until

    def failure_rate(self) -> float:
        self._prune()
        n = len(self._window)
        return sum(1 for _, ok in self._window if not ok) / n if n else 0.0

    def allow(self) -> Permit | None:
        """A permit for one call, or ``None`` (counted as rejected) when it must not run."""
        state = self.state
        if state == "closed":
            return Permit(trial=False)
        if state == "half_open" and self._trials < self.config.half_open_calls:
            self._trials += 1
            return Permit(trial=True)
        self.rejected += 1
        return None

    def record(self, permit: Permit, outcome: Outcome) -> None:
        """How the call behind ``permit`` ended."""
        if permit.trial:
            self._trials = max(0, self._trials - 1)
            if self._state != "half_open":
                return
            if outcome == "success":
                self._window.clear()
                self._backoff = 0
                self._move("closed")
            elif outcome == "failure":
                self._backoff += 1
                self._trip()
            return
        if outcome == "neutral" or self._state != "closed":
            return  # late results of calls admitted before the breaker opened
        self._window.append((self.clock(), outcome == "success"))
        self._prune()
        cfg = self.config
        if len(self._window) >= cfg.min_calls and self.failure_rate() >= cfg.failure_rate:
            self._trip()

    def probe_result(self, healthy: bool) -> None:
        """A background health check's verdict while open."""
        if self._state != "open":
            return
        if healthy:
            self._move("half_open")
        else:
            self._backoff += 1
            self._open_until = self.clock() + self.cooldown_s()

    def cooldown_s(self) -> float:
        cfg = self.config
        return float(min(cfg.max_open_s, cfg.open_s * 2 ** min(self._backoff, 30)))

    def _trip(self) -> None:
        self._open_until = self.clock() + self.cooldown_s()
        self.opened += 1
        self._move("open")

    def _move(self, new: State) -> None:
        old, self._state = self._state, new
        if new == "closed":
            self._trials = 0
        if old != new:
            for fn in self.listeners:
                fn(old, new)

    def _prune(self) -> None:
        horizon = self.clock() - self.config.window_s
        while self._window and self._window[0][0] < horizon:
            self._window.popleft()

    def snapshot(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "failure_rate": round(self.failure_rate(), 4),
            "samples": len(self._window),
            "opened": self.opened,
            "rejected": self.rejected,
            "cooldown_s": self.cooldown_s(),
        }


def tier_probe(tier: Tier, request: Request | None = None, budget_ms: float = 2_000.0) -> Probe:
    """A probe that asks ``tier`` a one-token question: healthy if it answers (or declines)
    within ``budget_ms``."""
    req = request or Request(input="ping", max_tokens=1, delegate=False)

    async def probe() -> bool:
        budget = Budget(budget_ms)
        agen = tier.stream(req, budget)
        try:
            async with asyncio.timeout_at(budget.deadline):
                await anext(agen)
            return True
        except (Declined, StopAsyncIteration):
            return True
        except Exception:
            return False
        finally:
            await aclose_quietly(agen)

    return probe


class BreakerTier(TierWrapper):
    """``inner`` behind a :class:`CircuitBreaker`.

    Args:
        inner: the tier (usually one remote backend's ``LLMTier``).
        config: thresholds; ``clock``: monotonic seconds for tests.
        probe: checked every cool-down while open (``tier_probe(inner)`` is a good one);
            without it, the first requests after the cool-down are the trial.
    """

    def __init__(
        self,
        inner: Tier,
        config: BreakerConfig | None = None,
        *,
        probe: Probe | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(inner)
        self.breaker = CircuitBreaker(
            config, clock=clock, probe_gated=probe is not None, name=inner.name
        )
        self.breaker.listeners.append(self._changed)
        self.probe = probe
        self.probes_ok = 0
        self.probes_failed = 0
        self._probe_task: asyncio.Task[None] | None = None

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        permit = self.breaker.allow()
        if permit is None:
            raise Declined(f"{self.name}: circuit open")
        clock = self.breaker.clock
        started = clock()
        first = False
        outcome: Outcome = "neutral"
        agen = self.inner.stream(request, budget)
        try:
            async for piece in agen:
                first = True
                yield piece
            outcome = "success"
        except (Declined, InvalidRequest, UnicodeError):  # a miss, or the caller's text
            raise
        except (asyncio.CancelledError, GeneratorExit, TimeoutError):
            outcome = "success" if first else self._slow(clock() - started)
            raise
        except Exception:
            outcome = "failure"
            raise
        finally:
            self.breaker.record(permit, outcome)
            await aclose_quietly(agen)

    def _slow(self, waited_s: float) -> Outcome:
        slow = self.breaker.config.slow_ms
        return "failure" if slow is not None and waited_s * 1000.0 >= slow else "neutral"

    def _changed(self, old: State, new: State) -> None:
        level = logging.WARNING if new == "open" else logging.INFO
        log.log(level, "circuit %s: %s -> %s", self.name, old, new)
        if new == "open" and self.probe is not None:
            self._start_probing()

    def _start_probing(self) -> None:
        if self._probe_task is not None and not self._probe_task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous test): the cool-down still applies
        self._probe_task = loop.create_task(self._probe_loop(), name=f"probe:{self.name}")

    async def _probe_loop(self) -> None:
        assert self.probe is not None
        b = self.breaker
        while b.state == "open":
            await asyncio.sleep(max(0.0, b.open_until - b.clock()))
            try:
                healthy = await self.probe()
            except Exception:
                healthy = False
            if healthy:
                self.probes_ok += 1
            else:
                self.probes_failed += 1
            b.probe_result(healthy)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self.breaker.snapshot(),
            "probes_ok": self.probes_ok,
            "probes_failed": self.probes_failed,
        }

    async def aclose(self) -> None:
        if self._probe_task is not None:
            self._probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe_task
        await super().aclose()

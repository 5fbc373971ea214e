"""A request's latency budget: a deadline on a monotonic clock, carried to every stage.

The clock is the running event loop's ``time()`` when there is one (so tests can run on
virtual loop time), else ``time.monotonic``. The budget that applies to the code running
now is kept in a context variable: ``current_budget()``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from rtgate.core.errors import InvalidBudget

__all__ = ["MAX_BUDGET_MS", "Budget", "Clock", "current_budget", "default_clock", "use_budget"]

Clock = Callable[[], float]
"""A function returning monotonic seconds."""

MAX_BUDGET_MS = 3_600_000.0


def default_clock() -> Clock:
    """The running loop's clock inside async code, ``time.monotonic`` outside it."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:
        return time.monotonic


class Budget:
    """A deadline ``budget_ms`` after ``start`` on ``clock``.

    Raises :class:`InvalidBudget` unless ``0 < budget_ms <= MAX_BUDGET_MS``.
    """

    __slots__ = ("budget_ms", "clock", "deadline", "start")

    def __init__(
        self, budget_ms: float, *, clock: Clock | None = None, start: float | None = None
    ) -> None:
        if isinstance(budget_ms, bool) or not isinstance(budget_ms, int | float):
            raise InvalidBudget(f"budget_ms must be a number, got {type(budget_ms).__name__}")
        if not math.isfinite(budget_ms) or not 0 < budget_ms <= MAX_BUDGET_MS:
            raise InvalidBudget(f"budget_ms must be in (0, {MAX_BUDGET_MS:.0f}], got {budget_ms}")
        self.clock: Clock = clock or default_clock()
        self.budget_ms = float(budget_ms)
        self.start = self.clock() if start is None else start
        self.deadline = self.start + self.budget_ms / 1000.0

    def left_s(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.deadline - self.clock())

    def left_ms(self) -> float:
        return self.left_s() * 1000.0

    def elapsed_ms(self) -> float:
        return (self.clock() - self.start) * 1000.0

    @property
    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def sub(self, ms: float) -> Budget:
        """A budget for one stage: ``ms`` from now, never past this budget's deadline."""
        now = self.clock()
        left = max(0.0, self.deadline - now) * 1000.0
        child = Budget.__new__(Budget)
        child.clock = self.clock
        child.start = now
        child.budget_ms = min(ms, left)
        child.deadline = now + child.budget_ms / 1000.0
        return child

    def __repr__(self) -> str:
        return f"Budget({self.budget_ms:g} ms, {self.left_ms():.1f} ms left)"


_current: ContextVar[Budget | None] = ContextVar("rtgate_budget", default=None)


def current_budget() -> Budget | None:
    """The budget of the request this code runs for, if any."""
    return _current.get()


@contextmanager
def use_budget(budget: Budget) -> Iterator[Budget]:
    """Make ``budget`` the current one for the code in the ``with`` block."""
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)

from __future__ import annotations

import asyncio
import math

import pytest

from rtgate.core.budget import Budget, current_budget, use_budget
from rtgate.core.errors import InvalidBudget


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_left_and_expired_follow_the_clock() -> None:
    clock = FakeClock()
    b = Budget(150, clock=clock)
    assert b.left_ms() == pytest.approx(150)
    clock.t += 0.1
    assert b.left_ms() == pytest.approx(50)
    assert b.elapsed_ms() == pytest.approx(100)
    assert not b.expired
    clock.t += 0.06
    assert b.expired
    assert b.left_ms() == 0.0


def test_sub_budget_never_outlives_parent() -> None:
    clock = FakeClock()
    b = Budget(100, clock=clock)
    clock.t += 0.07
    child = b.sub(80)
    assert child.budget_ms == pytest.approx(30)
    assert child.deadline == pytest.approx(b.deadline)
    assert b.sub(10).budget_ms == pytest.approx(10)


@pytest.mark.parametrize("bad", [0, -5, math.inf, math.nan, 10**9, "150", None, True])
def test_bad_budgets_are_refused(bad: object) -> None:
    with pytest.raises(InvalidBudget):
        Budget(bad)  # type: ignore[arg-type]


async def test_budget_uses_loop_clock_and_context() -> None:
    b = Budget(50)
    assert b.clock == asyncio.get_running_loop().time
    assert current_budget() is None
    with use_budget(b):
        assert current_budget() is b

        async def inner() -> Budget | None:
            return current_budget()

        assert await asyncio.create_task(inner()) is b
    assert current_budget() is None

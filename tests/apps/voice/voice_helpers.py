"""Helpers shared by the voice tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(cond: Callable[[], bool], turns: int = 2000) -> None:
    """Let the pipeline's tasks run until ``cond`` holds (loop turns, no wall-clock wait)."""
    for _ in range(turns):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")

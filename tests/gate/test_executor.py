"""What an attempt leaves behind runs in the gate's background owner, never on the
request's path, and a failure there never reaches the request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest

from rtgate.core.budget import Budget
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import Gate, TokenEvent
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier


class CloseFails(Tier):
    """Answers two pieces; closing it before the end raises."""

    name, quality = "local", 50

    def __init__(self) -> None:
        self.closing = asyncio.Event()

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        try:
            yield "first"
            yield " second"
        except GeneratorExit:
            self.closing.set()
            raise RuntimeError("close failed") from None


async def test_a_failing_background_close_never_fails_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "rtgate.background")
    tier = CloseFails()
    async with Gate([tier], priors={"local": Prior(5, 5)}) as gate:
        seen: list[str] = []
        async with contextlib.aclosing(gate.stream(Request("q"), 100)) as events:
            async for ev in events:
                assert isinstance(ev, TokenEvent)
                seen.append(ev.text)
                break  # the caller stops after the first piece: the tier is closed later
        assert seen == ["first"]
        await tier.closing.wait()
        res = await gate.answer(Request("again"), 100)
        assert res.route == "local" and res.text == "first second"
    assert "close failed" in caplog.text


async def test_closing_the_gate_cancels_and_awaits_what_a_cut_off_abandoned() -> None:
    hang = FakeTier("cloud", 80, hang=True)
    local = FakeTier("local", 50, ["quick"])
    async with Gate([hang, local], priors={"cloud": Prior(40, 40), "local": Prior(5, 5)}) as gate:
        res = await gate.answer(Request("q"), 100)
        assert res.route == "local"
        assert [a.outcome for a in res.trace.attempts] == ["cut_off", "answered"]
    await asyncio.sleep(0)  # the cancelled stream's own bookkeeping
    assert hang.cancelled == 1

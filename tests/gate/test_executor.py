"""What an attempt leaves behind runs in the gate's background owner, never on the
request's path, and a failure there never reaches the request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
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


class _Instant(Tier):
    """An instant tier whose stream must never be used."""

    instant = True

    def __init__(self, name: str, quality: int, answer: str | None, fail: bool = False) -> None:
        self.name, self.quality, self.answer, self.fail = name, quality, answer, fail
        self.calls = 0

    def answer_now(self, request: Request) -> Piece:
        self.calls += 1
        if self.fail:
            raise RuntimeError("broken table")
        if self.answer is None:
            raise Declined(f"{self.name}: no entry")
        return Piece(self.answer, {"entry": 1})

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        raise AssertionError("an instant tier is called, not streamed")
        yield ""


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_instant_tier_is_called_in_place_and_learned(streamed: bool) -> None:
    miss = _Instant("miss", 30, None)
    broken = _Instant("broken", 20, "x", fail=True)
    hit = _Instant("hit", 10, "hello")
    gate = Gate([miss, broken, hit], priors={t.name: Prior(0.1, 0.1) for t in (miss, broken, hit)})
    async with gate:
        if streamed:
            events = [e async for e in gate.stream(Request("hi", delegate=False), 100)]
            result = events[-1].result  # type: ignore[union-attr]
        else:
            result = await gate.answer(Request("hi", delegate=False), 100)
    assert result.route == "hit" and result.text == "hello"
    assert result.pieces[0].data == {"entry": 1}
    outcomes = [(a.tier, a.outcome) for a in result.trace.attempts]
    assert outcomes == [("miss", "declined"), ("broken", "error"), ("hit", "answered")]
    assert result.trace.attempts[0].detail == "miss: no entry"
    assert (miss.calls, broken.calls, hit.calls) == (1, 1, 1)
    assert gate.models["hit"].ttft.count == 1 and gate.models["miss"].ttft.count == 0

from __future__ import annotations

import asyncio

import pytest

from rtgate.backends.base import Generation
from rtgate.backends.fake import FakeBackend
from rtgate.core.errors import RateLimited
from rtgate.core.request import Message

GEN = Generation(messages=[Message("user", "hi")], max_tokens=16)


async def collect(backend: FakeBackend, gen: Generation = GEN) -> list[tuple[float, str]]:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    return [(round(loop.time() - t0, 6), d) async for d in backend.generate(gen)]


@pytest.mark.looptime
async def test_tokens_arrive_on_the_scripted_virtual_schedule() -> None:
    backend = FakeBackend(["a", "b", "c"], ttft_ms=80, tpot_ms=20)
    assert await collect(backend) == [(0.08, "a"), (0.1, "b"), (0.12, "c")]
    assert (backend.completed, backend.active, len(backend.calls)) == (1, 0, 1)


@pytest.mark.looptime
async def test_per_token_delays() -> None:
    backend = FakeBackend(["a", "b"], delays_ms=[5, 500])
    assert await collect(backend) == [(0.005, "a"), (0.505, "b")]


@pytest.mark.looptime
async def test_hang_forever_until_cancelled() -> None:
    backend = FakeBackend(["a", "b"], hang_at=1)
    got: list[str] = []

    async def consume() -> None:
        async for d in backend.generate(GEN):
            got.append(d)

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(consume(), timeout=3600)
    assert got == ["a"]
    assert (backend.cancelled, backend.active, backend.completed) == (1, 0, 0)


async def test_error_at_token_k() -> None:
    backend = FakeBackend(["a", "b", "c"], fail_at=2, error=RateLimited("slow down"))
    got: list[str] = []
    with pytest.raises(RateLimited):
        async for d in backend.generate(GEN):
            got.append(d)
    assert got == ["a", "b"]
    assert backend.failed == 1


async def test_error_after_last_token() -> None:
    backend = FakeBackend(["a"], fail_at=1)
    with pytest.raises(Exception, match="fake backend failure"):
        async for _ in backend.generate(GEN):
            pass


async def test_script_function_max_tokens_and_stop() -> None:
    backend = FakeBackend(lambda g: ["echo:", " ", g.messages[-1].content, "\n", "more"])
    gen = Generation(messages=[Message("user", "hi")], stop=["\n"])
    assert [d async for d in backend.generate(gen)] == ["echo:", " ", "hi"]
    short = Generation(messages=[Message("user", "hi")], max_tokens=2)
    assert [d async for d in backend.generate(short)] == ["echo:", " "]


async def test_break_counts_as_cancelled() -> None:
    backend = FakeBackend(["a", "b", "c"])
    agen = backend.generate(GEN)
    async for _ in agen:
        break
    await agen.aclose()  # type: ignore[attr-defined]
    assert (backend.cancelled, backend.active) == (1, 0)


async def test_score_and_lifecycle() -> None:
    backend = FakeBackend(["Hello", " world"])
    scores = await backend.score("", [" world", " moon"])
    assert scores[0] > scores[1]
    await backend.warmup()
    await backend.aclose()
    assert backend.warmed and backend.closed

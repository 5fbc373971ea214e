"""The fake server's faults, seen through the real OpenAI-compatible client and SDK."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from typer.testing import CliRunner

from rtgate.backends.base import Generation
from rtgate.backends.openai_compat import OpenAICompatBackend
from rtgate.cli.fakellm import app as cli_app
from rtgate.core.budget import Budget
from rtgate.core.errors import (
    BackendProtocolError,
    BackendUnavailable,
    InvalidRequest,
    RateLimited,
)
from rtgate.core.latency import Prior
from rtgate.core.request import Message, Request
from rtgate.fakellm import FakeLLMConfig, FakeLLMServer, Timing, create_app, parse_plan
from rtgate.gate import Gate, GateConfig
from rtgate.tiers.fake import FakeTier
from rtgate.tiers.llm import LLMTier

CHAT = Generation(messages=[Message("user", "hi")], max_tokens=6)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLMServer]:
    cfg = FakeLLMConfig(timing=Timing(ttft_ms=2, tpot_ms=1, slow_ms=400, trickle_ms=30))
    with FakeLLMServer(cfg) as server:
        yield server


def backend(fake: FakeLLMServer, mode: str, **headers: str) -> OpenAICompatBackend:
    hdrs = {"X-Fake-Mode": mode, **{f"X-Fake-{k.replace('_', '-')}": v for k, v in headers.items()}}
    return OpenAICompatBackend(fake.base_url, "fake", headers=hdrs)


async def run(b: OpenAICompatBackend, budget_ms: float = 2000) -> list[str]:
    out: list[str] = []
    try:
        async for delta in b.generate(CHAT, Budget(budget_ms)):
            out.append(delta)
    finally:
        await b.aclose()
    return out


# -- plans ---------------------------------------------------------------------------------


def test_plan_parsing_and_seeded_draws() -> None:
    plan = parse_plan("ok=3, hang:1,500=0,ok=1")
    assert plan.weights == (("ok", 4.0), ("hang", 1.0))
    draws = [plan.pick(random.Random(7)) for _ in range(3)]
    assert len(set(draws)) == 1  # the same seed draws the same mode
    rng = random.Random(1)
    picks = [plan.pick(rng) for _ in range(4000)]
    assert 0.75 < picks.count("ok") / 4000 < 0.85
    for bad in ("", "boom", "ok=-1", "ok=0", "ok=x", "ok=1e999", "a" * 600):
        with pytest.raises(InvalidRequest):
            parse_plan(bad)
    with pytest.raises(InvalidRequest):
        Timing(tokens=0)
    with pytest.raises(InvalidRequest, match="x-fake-ttft-ms"):
        Timing().with_headers({"x-fake-ttft-ms": "soon"})


async def test_same_seed_same_sequence_of_faults() -> None:
    async def modes(seed: int) -> dict[str, int]:
        cfg = FakeLLMConfig(plan=parse_plan("ok=1,429=1,500=1"), seed=seed)
        app = create_app(cfg)
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://f") as c:
            codes = [(await c.post("/v1/chat/completions", json=body)).status_code
                     for _ in range(12)]  # fmt: skip
            stats = (await c.get("/fake/stats")).json()
        assert stats["requests"] == 12
        return {"codes": hash(tuple(codes)), **stats["by_mode"]}

    a, b = await modes(3), await modes(3)
    assert a == b and len(a) == 4  # all three modes were drawn
    assert await modes(4) != a


# -- every mode through the real client ------------------------------------------------------


@pytest.mark.slow
async def test_ok_streams_words_and_honours_max_tokens(fake: FakeLLMServer) -> None:
    out = await run(backend(fake, "ok"))
    assert out == ["This", " is", " a", " fake", " reply", " from"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "error", "seen"),
    [
        ("429", RateLimited, 0),
        ("500", BackendUnavailable, 0),
        ("reset", BackendUnavailable, 1),
        ("malformed", BackendProtocolError, 1),
        ("truncate", BackendProtocolError, 1),
    ],
)
async def test_faults_map_to_clear_errors(
    fake: FakeLLMServer, mode: str, error: type[Exception], seen: int
) -> None:
    out: list[str] = []
    b = backend(fake, mode)
    with pytest.raises(error):
        async for delta in b.generate(CHAT, Budget(2000)):
            out.append(delta)
    await b.aclose()
    assert len(out) == seen


@pytest.mark.slow
async def test_fault_position_is_configurable(fake: FakeLLMServer) -> None:
    b = backend(fake, "reset", fault_at="0")
    with pytest.raises(BackendUnavailable):
        await run(b)
    b = backend(fake, "reset", fault_at="4")
    with pytest.raises(BackendUnavailable):
        async for i, _ in aenumerate(b.generate(CHAT, Budget(2000))):
            assert i < 4
    await b.aclose()


async def aenumerate(agen: AsyncIterator[str]) -> AsyncIterator[tuple[int, str]]:
    i = 0
    async for x in agen:
        yield i, x
        i += 1


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "seen"), [("hang", 0), ("stall", 1), ("slow", 0)])
async def test_hang_stall_and_slow_run_out_the_budget(
    fake: FakeLLMServer, mode: str, seen: int
) -> None:
    out: list[str] = []
    b = backend(fake, mode)
    with pytest.raises(TimeoutError):
        async for delta in b.generate(CHAT, Budget(150)):
            out.append(delta)
    await b.aclose()
    assert len(out) == seen


@pytest.mark.slow
async def test_slow_and_trickle_answer_fully_with_enough_budget(fake: FakeLLMServer) -> None:
    assert len(await run(backend(fake, "slow", slow_ms="60"), budget_ms=5000)) == 6
    assert len(await run(backend(fake, "trickle", trickle_ms="10"), budget_ms=5000)) == 6


@pytest.mark.slow
async def test_a_client_leaving_a_hang_frees_the_server(fake: FakeLLMServer) -> None:
    b = backend(fake, "hang")
    for _ in range(3):
        with pytest.raises(TimeoutError):
            await run(b, budget_ms=50)
        b = backend(fake, "hang")
    await b.aclose()
    for _ in range(200):  # the server notices the disconnects on its own thread
        if fake.stats()["in_flight"] == 0:
            break
        await asyncio.sleep(0.01)
    assert fake.stats()["in_flight"] == 0


@pytest.mark.slow
async def test_official_sdk_streams_and_sees_errors(fake: FakeLLMServer) -> None:
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="unused", max_retries=0)
    msgs: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    whole = await client.chat.completions.create(model="fake", messages=msgs, max_tokens=3)
    assert whole.choices[0].message.content == "This is a"
    stream = await client.chat.completions.create(
        model="fake",
        messages=msgs,
        max_tokens=3,
        stream=True,
    )
    assert isinstance(stream, openai.AsyncStream)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "This is a"
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(
            model="fake",
            messages=msgs,
            extra_headers={"X-Fake-Mode": "429"},
        )
    models = await client.models.list()
    assert [m.id for m in models.data] == ["fake"]
    await client.close()


async def test_bad_bodies_get_openai_style_400s() -> None:
    app = create_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://f") as c:
        r = await c.post("/v1/chat/completions", content=b"{nope")
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        r = await c.post("/v1/chat/completions", json={"messages": []})
        assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
        r = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": True})
        assert r.status_code == 400
        r = await c.post("/v1/completions", content=b"x" * 2_000_000)
        assert r.status_code == 413
        r = await c.post("/fake/mode", json={"mode": "bogus"})
        assert r.status_code == 400
        r = await c.post("/fake/mode", json={"mode": "hang=1,ok=1"})
        assert r.json()["plan"] == "hang=1,ok=1"


# -- the gate over a misbehaving cloud --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hang", "500", "reset", "malformed", "slow"])
async def test_gate_answers_in_budget_when_the_cloud_misbehaves(
    fake: FakeLLMServer, mode: str
) -> None:
    cloud = LLMTier(backend(fake, mode), name="cloud", quality=80, style="chat")
    local = FakeTier("local", 50, ["quick"], ttft_ms=5)
    priors = {"cloud": Prior(100, 100), "local": Prior(20, 20)}
    # real time on a shared machine: a safety margin that absorbs scheduling delays
    async with Gate([cloud, local], priors=priors, config=GateConfig(safety_ms=25)) as gate:
        res = await gate.answer(Request("hi", delegate=False), budget_ms=300)
    assert res.route == "local" and res.text == "quick", json.dumps(res.trace.to_dict())
    assert res.trace.elapsed_ms <= 300 + 25
    assert res.trace.attempts[0].tier == "cloud"
    assert res.trace.attempts[0].outcome in ("cut_off", "error", "too_slow")


def test_cli_refuses_a_bad_mode_before_serving() -> None:
    result = CliRunner().invoke(cli_app, ["--mode", "explode"])
    assert result.exit_code == 2 and "unknown fault mode" in result.output

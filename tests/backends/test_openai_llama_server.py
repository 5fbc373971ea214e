"""The OpenAI-compatible client against a real ``llama_cpp.server`` serving SmolLM2."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from rtgate.backends.base import Generation
from rtgate.backends.openai_compat import OpenAICompatBackend
from rtgate.core.budget import Budget
from rtgate.core.request import Message

pytestmark = pytest.mark.slow

CHAT = Generation(messages=[Message("user", "Name three colours.")], max_tokens=16, temperature=0.0)


async def _sdk_stream(base_url: str) -> str:
    sdk = AsyncOpenAI(base_url=base_url, api_key="unused")
    try:
        stream = await sdk.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Name three colours."}],
            max_tokens=16,
            temperature=0.0,
            stream=True,
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    finally:
        await sdk.close()


async def test_chat_stream_matches_the_official_sdk(llama_server: str) -> None:
    # The server reuses its cache for a prompt it has just seen, and on CPUs without
    # AVX-512 a prompt read from that cache can give slightly other logits than one read
    # whole (greedy decoding then takes another word, seen on an AMD EPYC). So both
    # clients are compared from the same state: the prompt seen once before each.
    await _sdk_stream(llama_server)
    backend = OpenAICompatBackend(llama_server, "smollm2")
    try:
        deltas = [d async for d in backend.generate(CHAT, Budget(30_000))]
    finally:
        await backend.aclose()
    assert len(deltas) > 1  # streamed, not one blob
    reference = await _sdk_stream(llama_server)
    assert "".join(deltas) == reference != ""


async def test_raw_completion_with_stop(llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server.removesuffix("/v1"), "smollm2")  # bare host
    gen = Generation(prompt="1, 2, 3, 4,", max_tokens=12, stop=["7"])
    try:
        text = "".join([d async for d in backend.generate(gen)])
    finally:
        await backend.aclose()
    assert text.strip().startswith("5") and "7" not in text


async def test_cancel_mid_stream_then_serve_again(llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server, "smollm2")
    long = Generation(messages=[Message("user", "Write a long story.")], max_tokens=60)
    try:
        agen = backend.generate(long)
        first = await agen.__anext__()
        await agen.aclose()  # type: ignore[attr-defined]
        again = "".join([d async for d in backend.generate(CHAT)])
    finally:
        await backend.aclose()
    assert first and again

"""The embedded llama.cpp backend on real packaged weights."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llama_cpp import Llama

from rtgate.backends.base import Generation
from rtgate.backends.llamacpp import LlamaCppBackend
from rtgate.core.budget import Budget
from rtgate.core.errors import BackendUnavailable, InvalidRequest, QueueFull
from rtgate.core.request import Message

pytestmark = pytest.mark.slow

STORY = Generation(prompt="Once upon a time,", max_tokens=200)  # long enough to cancel


async def test_stream_equals_llama_cpp_python_completion(smollm2: LlamaCppBackend) -> None:
    gen = Generation(prompt="The three primary colours are", max_tokens=12)
    stream = smollm2.submit(gen)
    deltas = [d async for d in stream]
    await stream.finished()
    assert len(deltas) > 1 and stream.tokens == 12
    ref = Llama(model_path=str(smollm2.path), n_ctx=256, n_threads=2, verbose=False)
    expected = ref.create_completion(gen.prompt or "", max_tokens=12, temperature=0.0)
    ref.close()
    assert "".join(deltas) == expected["choices"][0]["text"]  # type: ignore[index]


async def test_chat_uses_the_model_template(smollm2: LlamaCppBackend) -> None:
    gen = Generation(messages=[Message("user", "Say hello.")], max_tokens=16)
    text = "".join([d async for d in smollm2.generate(gen)])
    assert text.strip() and "<|im_end|>" not in text and "<|im_start|>" not in text


async def test_stop_sequence_cuts_the_output(smollm2: LlamaCppBackend) -> None:
    gen = Generation(prompt="1, 2, 3, 4,", max_tokens=16, stop=["7"])
    text = "".join([d async for d in smollm2.generate(gen)])
    assert "5" in text and "7" not in text


async def test_breaking_out_stops_the_worker_promptly(smollm2: LlamaCppBackend) -> None:
    stream = smollm2.submit(STORY)
    async for _ in stream:
        break
    stream.cancel()
    await stream.finished()
    assert 1 <= stream.tokens < 30  # far from the 200 asked for
    await smollm2.idle()
    assert smollm2.queued == 0


async def test_cancelled_task_stops_the_worker(smollm2: LlamaCppBackend) -> None:
    first = asyncio.Event()
    before = smollm2.engine_stats.generated_tokens

    async def consume() -> None:
        async for _ in smollm2.generate(STORY):
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await smollm2.idle()
    assert smollm2.engine_stats.generated_tokens - before < 30


async def test_bounded_queue_rejects_the_newcomer() -> None:
    backend = LlamaCppBackend("smollm2", n_ctx=512, queue_size=1)
    try:
        running = backend.submit(STORY)
        await running.__anext__()  # the worker is busy with it now
        waiting = backend.submit(Generation(prompt="Hi", max_tokens=4))
        with pytest.raises(QueueFull):
            backend.submit(Generation(prompt="Hi", max_tokens=4))
        assert backend.rejected == 1
        waiting.cancel()  # leaves the queue at once, freeing the slot
        await waiting.finished()
        assert waiting.tokens == 0
        third = backend.submit(Generation(prompt="Hi", max_tokens=2))
        running.cancel()
        assert "".join([d async for d in third])
    finally:
        await backend.aclose()


async def test_an_urgent_score_overtakes_queued_generations() -> None:
    backend = LlamaCppBackend("smollm2", n_ctx=512, queue_size=4)
    try:
        running = backend.submit(STORY)
        await running.__anext__()  # the worker is busy with it now
        queued = backend.submit(Generation(prompt="Hi", max_tokens=4))
        scored = asyncio.create_task(backend.score("The cat sat on the", [" mat"], urgent=True))
        await asyncio.sleep(0)  # the score is queued now, behind `queued` unless urgent
        running.cancel()
        order: list[str] = []
        first_token = asyncio.create_task(queued.__anext__())
        done, _ = await asyncio.wait({scored, first_token}, return_when=asyncio.FIRST_COMPLETED)
        order.append("score" if scored in done else "generation")
        assert order == ["score"]
        assert (await scored)[0] < 0.0
        await first_token
        queued.cancel()
    finally:
        await backend.aclose()


async def test_budget_spent_while_queued_is_a_timeout(smollm2: LlamaCppBackend) -> None:
    with pytest.raises(TimeoutError):
        async for _ in smollm2.generate(STORY, Budget(0.001)):
            pass


async def test_bad_input_is_rejected(smollm2: LlamaCppBackend) -> None:
    with pytest.raises(InvalidRequest):
        smollm2.submit(Generation(prompt="x", max_tokens=0))
    with pytest.raises(InvalidRequest, match="messages or a prompt"):
        async for _ in smollm2.generate(Generation()):
            pass
    with pytest.raises(InvalidRequest, match="at most"):
        await smollm2.score("x", ["a"] * 1000)


async def test_unloadable_model_fails_requests_clearly(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    backend = LlamaCppBackend(bogus)
    try:
        with pytest.raises(BackendUnavailable, match=r"cannot load bogus\.gguf"):
            async for _ in backend.generate(Generation(prompt="x")):
                pass
    finally:
        await backend.aclose()


async def test_score_ranks_likely_continuations(smollm2: LlamaCppBackend) -> None:
    prefix = "The capital of France is"
    cands = [" Paris", " London", " banana bread"]
    scores = await smollm2.score(prefix, cands)
    assert scores[0] > scores[1] > scores[2]
    assert all(s < 0 for s in scores)
    again = await smollm2.score(prefix, list(reversed(cands)))
    assert again == pytest.approx(list(reversed(scores)), abs=1e-3)  # order-independent
    norm = await smollm2.score(prefix, cands, normalize=True)
    assert norm[0] == pytest.approx(scores[0], abs=1e-3)  # " Paris" is one token
    assert await smollm2.score(prefix, [""]) == [0.0]


async def test_prefix_cache_gives_the_same_text_as_a_cold_start() -> None:
    """Gemma 3 (sliding-window attention) with alternating prefixes: restored == recomputed."""
    zh = "以下是客服的回复。\n顾客：几点开门？\n客服：早上九点。\n"
    zh += "顾客：能退货吗？\n客服：七天内可以。\n"
    en = "Support replies.\nCustomer: When do you open?\nAgent: At 9am.\nCustomer: Returns?\n"
    en += "Agent: Within 7 days.\n"
    prompts = [zh + "顾客：发货快吗？\n客服：", en + "Customer: Is shipping fast?\nAgent:"]
    prompts += [zh + "顾客：有发票吗？\n客服：", en + "Customer: Can I get an invoice?\nAgent:"]
    prompts += prompts[:2]
    cached = LlamaCppBackend("gemma3-270m", n_ctx=512)
    cold = LlamaCppBackend("gemma3-270m", n_ctx=512, prefix_cache=False)
    try:
        for p in prompts:
            gen = Generation(prompt=p, max_tokens=8, stop=["\n"])
            warm_text = "".join([d async for d in cached.generate(gen)])
            cold_text = "".join([d async for d in cold.generate(gen)])
            assert warm_text == cold_text
        stats = cached.engine_stats
        assert stats.prefix_saves >= 2 and stats.prefix_restores >= 2
        assert stats.prompt_tokens_reused >= 2 * 20  # the last two reused their ~30-token prefix
        assert cold.engine_stats.prompt_tokens_reused == 0
    finally:
        await cached.aclose()
        await cold.aclose()


async def test_prime_makes_the_first_request_reuse_the_prefix(smollm2: LlamaCppBackend) -> None:
    system = [Message("system", "You are a terse assistant for a bike shop in Utrecht.")]
    n = await smollm2.prime(Generation(messages=system))
    assert n > 10
    reused = smollm2.engine_stats.prompt_tokens_reused
    gen = Generation(messages=[*system, Message("user", "Open on Sunday?")], max_tokens=4)
    assert "".join([d async for d in smollm2.generate(gen)])
    assert smollm2.engine_stats.prompt_tokens_reused - reused >= n

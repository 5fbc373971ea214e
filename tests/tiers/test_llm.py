from __future__ import annotations

import pytest

from rtgate.backends.base import Generation
from rtgate.backends.fake import FakeBackend
from rtgate.core.budget import Budget
from rtgate.core.errors import Declined, InvalidRequest
from rtgate.core.request import Message, Piece, Request
from rtgate.tiers.llm import DEFAULT_FEW_SHOT, LLMTier, detect_lang


class BaseModelFake(FakeBackend):
    """A fake that says it is a base (non-chat) model and records primed prefixes."""

    chat_model = False

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.primed: list[Generation] = []

    async def prime(self, gen: Generation) -> int:
        self.primed.append(gen)
        return 1


async def answer(tier: LLMTier, req: Request) -> str:
    # what is said, not how fast: a roomy budget, so a busy machine cannot fail the test
    parts = [p async for p in tier.stream(req, Budget(30_000))]
    return "".join(p.text if isinstance(p, Piece) else p for p in parts)


def test_detect_lang() -> None:
    assert detect_lang("可以退货吗") == "zh"
    assert detect_lang("Can I return it? 谢谢") == "zh"
    assert detect_lang("Can I return it?") == "en"


async def test_base_model_gets_a_chinese_few_shot_transcript_with_stops() -> None:
    backend = BaseModelFake([" 可以", "的。"])
    tier = LLMTier(backend)
    assert tier.style == "completion"
    assert await answer(tier, Request(input="能换货吗？")) == "可以的。"  # leading space gone
    gen = backend.calls[0]
    assert gen.prompt is not None and gen.messages == ()
    assert gen.prompt.startswith(DEFAULT_FEW_SHOT["zh"].system)
    assert gen.prompt.endswith("顾客：能换货吗？\n客服：")
    assert "\n" in gen.stop and "顾客：" in gen.stop


async def test_english_input_uses_english_examples_and_history() -> None:
    backend = BaseModelFake(["Sure."])
    tier = LLMTier(backend, max_tokens=20)
    history = [Message("user", "Hi"), Message("assistant", "Hello!"), Message("user", "Refund?")]
    await answer(tier, Request(input="Refund?", messages=history, max_tokens=64))
    gen = backend.calls[0]
    assert gen.prompt is not None
    assert gen.prompt.endswith("Customer: Hi\nAgent: Hello!\nCustomer: Refund?\nAgent:")
    assert "Customer: Where is my package?" in gen.prompt
    assert gen.max_tokens == 20  # the tier's cap wins over the request's larger one


async def test_chat_model_gets_system_and_examples_as_turns() -> None:
    backend = FakeBackend(["OK"])
    tier = LLMTier(backend, system_prompt="Be brief.", few_shot={"en": DEFAULT_FEW_SHOT["en"]})
    assert tier.style == "chat"
    await answer(tier, Request(input="Open today?", stop=("###",), temperature=0.3))
    gen = backend.calls[0]
    roles = [m.role for m in gen.messages]
    assert roles[0] == "system" and gen.messages[0].content == "Be brief."
    assert roles[1:17] == ["user", "assistant"] * 8
    assert gen.messages[-1] == Message("user", "Open today?")
    assert list(gen.stop) == ["###"] and gen.temperature == 0.3


async def test_empty_reply_is_declined_before_any_piece() -> None:
    tier = LLMTier(FakeBackend([" ", "\n"]))
    with pytest.raises(Declined):
        await answer(tier, Request(input="hi"))


async def test_backend_error_propagates_and_the_stream_is_closed() -> None:
    backend = FakeBackend(["a", "b"], fail_at=1)
    tier = LLMTier(backend)
    with pytest.raises(Exception, match="fake backend failure"):
        await answer(tier, Request(input="hi"))
    assert backend.active == 0


async def test_warmup_primes_each_language_prefix() -> None:
    backend = BaseModelFake()
    tier = LLMTier(backend)
    await tier.warmup()
    assert backend.warmed
    prompts = [g.prompt or "" for g in backend.primed]
    assert len(prompts) == 2
    zh_req = tier.generation(Request(input="发货了吗？"))
    assert zh_req.prompt is not None and zh_req.prompt.startswith(prompts[0])


def test_completion_style_needs_examples() -> None:
    tier = LLMTier(BaseModelFake(), few_shot={})
    with pytest.raises(InvalidRequest):
        tier.generation(Request(input="hi"))
    with pytest.raises(InvalidRequest):
        LLMTier(FakeBackend(), max_tokens=0)


@pytest.mark.slow
async def test_gemma_answers_a_chinese_customer_in_one_line() -> None:
    from rtgate.backends.llamacpp import LlamaCppBackend

    tier = LLMTier(LlamaCppBackend("gemma3-270m", n_ctx=1024))
    try:
        await tier.warmup()
        text = await answer(tier, Request(input="你们支持货到付款吗？"))
    finally:
        await tier.aclose()
    assert detect_lang(text) == "zh" and "\n" not in text and "顾客" not in text

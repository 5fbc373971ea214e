"""A language model as a tier: turns a :class:`Request` into a :class:`Generation`.

Small local models need help to be useful. A base model (Gemma 3 270M) does not follow
instructions, but it continues a pattern well: given a few customer/agent exchanges and a
new customer line, it writes one agent line, and the stop string ``"\\n"`` ends it there.
So the tier has two prompt styles:

- ``"completion"``: a few-shot transcript (``顾客：… / 客服：…`` or ``Customer: … / Agent: …``)
  ending with the agent's cue, stopped at the end of the line. For base models.
- ``"chat"``: system prompt + the same examples as user/assistant turns. For chat models.

``"auto"`` picks completion when the backend says it is not a chat model
(``backend.chat_model is False``), else chat. The examples are chosen by the language of
the input (any CJK character: Chinese). Defaults are short customer-service replies.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rtgate.backends.base import Backend, Generation
from rtgate.core.budget import Budget
from rtgate.core.errors import Declined, InvalidRequest
from rtgate.core.latency import Prior
from rtgate.core.request import Message, Piece, Request
from rtgate.tiers.base import Tier

__all__ = ["DEFAULT_FEW_SHOT", "FewShot", "LLMTier", "detect_lang"]

Style = Literal["auto", "chat", "completion"]
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True, slots=True)
class FewShot:
    """Examples in one language, and how the transcript labels the two sides."""

    system: str
    examples: tuple[tuple[str, str], ...]
    user_label: str = "Customer"
    agent_label: str = "Agent"
    sep: str = ": "

    def prefix(self, preamble: str | None = None) -> str:
        """The part every completion prompt shares: preamble and examples."""
        lines = [preamble if preamble is not None else self.system]
        for q, a in self.examples:
            lines += [self._line(self.user_label, q), self._line(self.agent_label, a)]
        return "\n".join(lines) + "\n"

    def transcript(self, turns: Sequence[Message], preamble: str | None = None) -> str:
        """A completion prompt: the shared prefix, the conversation, the agent's cue."""
        lines = []
        for m in turns:
            if m.role != "system":
                label = self.user_label if m.role == "user" else self.agent_label
                lines.append(self._line(label, m.content) + "\n")
        return self.prefix(preamble) + "".join(lines) + self.agent_label + self.sep.rstrip(" ")

    def _line(self, label: str, text: str) -> str:
        return f"{label}{self.sep}{' '.join(text.split())}"


DEFAULT_FEW_SHOT: Mapping[str, FewShot] = {
    "zh": FewShot(
        system="以下是网店客服的回复，每条一句话，礼貌、具体。",
        user_label="顾客",
        agent_label="客服",
        sep="：",
        examples=(
            ("你们几点上班？", "我们每天早上9点到晚上9点在线，节假日也不休息。"),
            ("我的快递到哪了？", "请把订单号发给我，我马上帮您查物流。"),
            ("可以退货吗？", "收货后7天内、商品未使用，都可以无理由退货。"),
            ("怎么开发票？", "在订单详情页点击“申请发票”，填好抬头就可以了。"),
            ("东西坏了怎么办？", "非常抱歉，请拍照发给我，我们给您补发或退款。"),
            ("能便宜点吗？", "现在下单可以领取满100减10的优惠券。"),
            ("你们发什么快递？", "默认发顺丰，偏远地区发邮政。"),
            ("客服怎么不回消息？", "抱歉让您久等了，请问有什么可以帮您？"),
        ),
    ),
    "en": FewShot(
        system="Below are replies from an online shop's support agent: one polite, "
        "specific sentence each.",
        examples=(
            ("What are your opening hours?", "We're online from 9am to 9pm every day."),
            ("Where is my package?", "Please send me your order number and I'll check it."),
            ("Can I return an item?", "Yes, unused items can be returned within 7 days."),
            ("How do I get an invoice?", "Click 'Request invoice' on your order page."),
            ("The product is damaged.", "I'm sorry! Please send a photo and we'll replace it."),
            ("Can I get a discount?", "You can use the coupon SAVE10 for 10% off today."),
            ("Which courier do you use?", "We ship with DHL; remote areas go by post."),
            ("Why is nobody answering?", "Sorry for the wait! How can I help you?"),
        ),
    ),
}


def detect_lang(text: str) -> str:
    """``"zh"`` if the text has a CJK ideograph, else ``"en"``."""
    return "zh" if _CJK.search(text) else "en"


class LLMTier(Tier):
    """Answers with a model backend (local or remote), streaming its deltas.

    Args:
        backend: where tokens come from.
        system_prompt: overrides the few-shot block's system line / preamble.
        few_shot: examples per language (``{}`` for none).
        max_tokens: cap on the reply (the request's own ``max_tokens`` may lower it).
        style: ``"auto"``, ``"chat"`` or ``"completion"`` (see the module docstring).
        latency_prior: what the gate assumes before this tier has answered (else it is
            cold until its first answer, e.g. at warm-up).
    """

    def __init__(
        self,
        backend: Backend,
        name: str = "local",
        quality: int = 50,
        delegable: bool = False,
        *,
        system_prompt: str | None = None,
        few_shot: Mapping[str, FewShot] = DEFAULT_FEW_SHOT,
        max_tokens: int = 48,
        style: Style = "auto",
        latency_prior: Prior | None = None,
    ) -> None:
        if max_tokens < 1:
            raise InvalidRequest("max_tokens must be >= 1")
        self.backend = backend
        self.name = name
        self.quality = quality
        self.delegable = delegable
        self.system_prompt = system_prompt
        self.few_shot = dict(few_shot)
        self.max_tokens = max_tokens
        self.latency_prior = latency_prior
        if style == "auto":
            style = "completion" if getattr(backend, "chat_model", True) is False else "chat"
        self.style: Style = style

    def _shots(self, text: str) -> FewShot | None:
        lang = detect_lang(text)
        return self.few_shot.get(lang) or next(iter(self.few_shot.values()), None)

    def generation(self, request: Request) -> Generation:
        """The generation request for ``request`` in this tier's style."""
        shots = self._shots(request.input)
        turns = request.chat()
        max_tokens = min(request.max_tokens, self.max_tokens)
        if self.style == "completion":
            if shots is None:
                raise InvalidRequest("completion style needs few-shot examples")
            prompt = shots.transcript(turns, self.system_prompt)
            stops = ["\n", f"{shots.user_label}{shots.sep.rstrip(' ')}", *request.stop]
            return Generation(
                prompt=prompt, max_tokens=max_tokens, temperature=request.temperature, stop=stops
            )
        messages = self._chat_prefix(shots) + [m for m in turns if m.role != "system"]
        return Generation(
            messages=messages,
            max_tokens=max_tokens,
            temperature=request.temperature,
            stop=list(request.stop),
        )

    def _chat_prefix(self, shots: FewShot | None) -> list[Message]:
        system = self.system_prompt or (shots.system if shots else None)
        msgs = [Message("system", system)] if system else []
        for q, a in shots.examples if shots else ():
            msgs += [Message("user", q), Message("assistant", a)]
        return msgs

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        gen = self.generation(request)
        started = False
        agen = self.backend.generate(gen, budget)
        try:
            async for delta in agen:
                if not started:
                    delta = delta.lstrip()
                    if not delta:
                        continue
                    started = True
                yield delta
        finally:
            closer = getattr(agen, "aclose", None)
            if closer is not None:
                await closer()
        if not started:
            raise Declined(f"{self.name}: the model produced an empty reply")

    async def warmup(self) -> None:
        """Warm the backend and, when it can, cache each language's shared prompt prefix."""
        await self.backend.warmup()
        prime = getattr(self.backend, "prime", None)
        if prime is None:
            return
        for shots in self.few_shot.values():
            if self.style == "completion":
                await prime(Generation(prompt=shots.prefix(self.system_prompt)))
            else:
                await prime(Generation(messages=self._chat_prefix(shots)))

    async def aclose(self) -> None:
        """Close the backend (idempotent for rtgate's backends; tiers sharing one backend
        should be closed together, as a gate does)."""
        await self.backend.aclose()

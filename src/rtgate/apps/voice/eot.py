"""Semantic end of turn: how likely is the caller's sentence finished, by the local model.

Rules on the transcript's last words (:func:`rtgate.apps.voice.turns.cue`) tell a question
or a trailing-off fragment apart, but not a finished statement ("等一下，我换个问题") from
a complete-looking clause the caller is about to continue ("我家里的信号最近特别差，…").
A language model has read millions of such turns: put the transcript as the caller's line
of a phone dialogue and read the probability that the line ends here (the next token is a
full stop, a question mark or a newline). That is the idea of the text-based turn
detectors in production voice agents; here it reuses the local model already loaded for
acknowledgements (Gemma 3 270M), in the same bounded queue, one forward pass per partial
transcript with the dialogue prefix cached.

Turn-taking only uses the score to *shorten* the silence after a complete clause; a
missing or late score leaves the rule's wait as it is. The score is computed while the
caller is still speaking or pausing, never after the turn has ended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rtgate.budget import Budget
from rtgate.errors import RtgateError

__all__ = ["DEFAULT_PROMPTS", "EndOfTurn", "EndPrompt", "LMEndOfTurn", "Scorer"]


class Scorer(Protocol):
    """What :class:`~rtgate.backends.llamacpp.LlamaCppBackend` offers: log-likelihoods of
    continuations."""

    async def score(
        self,
        prefix: str,
        candidates: Sequence[str],
        budget: Budget | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]: ...


class EndOfTurn(Protocol):
    """Probability in [0, 1] that ``text`` is a finished turn; ``None`` when unknown."""

    async def p_end(self, text: str, lang: str) -> float | None: ...


@dataclass(frozen=True, slots=True)
class EndPrompt:
    """A dialogue prefix that ends with the caller's label, and the tokens that end a line."""

    prefix: str
    enders: tuple[str, ...]


DEFAULT_PROMPTS: dict[str, EndPrompt] = {
    "zh": EndPrompt(
        "以下是电话客服和顾客的对话。\n"
        "顾客：我的宽带装好了吗？\n客服：好的，我帮您查。\n"
        "顾客：我想改一下我的地址。\n客服：好的，马上处理。\n顾客：",
        ("。", "？", "！", "\n"),
    ),
    "en": EndPrompt(
        "A phone call between a caller and a support agent.\n"
        "Caller: Is my broadband installed yet?\nAgent: Sure, let me check.\n"
        "Caller: I need to change my address.\nAgent: Okay, one moment.\nCaller: ",
        (".", "?", "!", "\n"),
    ),
}

_STRIP = "。！？!?.…,，、；;：: "


class LMEndOfTurn:
    """:class:`EndOfTurn` from a language model's next-token probabilities.

    Args:
        scorer: the backend (its ``score`` runs in the backend's bounded queue).
        prompts: a dialogue prefix and line enders per language.
        budget_ms: a score later than this is dropped (the rule's wait applies).
    """

    def __init__(
        self,
        scorer: Scorer,
        prompts: dict[str, EndPrompt] | None = None,
        *,
        budget_ms: float = 300.0,
    ) -> None:
        self.scorer = scorer
        self.prompts = prompts or DEFAULT_PROMPTS
        self.budget_ms = budget_ms

    async def p_end(self, text: str, lang: str) -> float | None:
        prompt = self.prompts.get(lang)
        core = text.strip().rstrip(_STRIP)
        if prompt is None or not core:
            return None
        # the transcript's own final punctuation is dropped: the model decides how it ends
        sep = " " if lang == "en" and not prompt.prefix.endswith(" ") else ""
        try:
            scores = await self.scorer.score(
                prompt.prefix + sep + core, prompt.enders, Budget(self.budget_ms), urgent=True
            )
        except (RtgateError, TimeoutError):
            return None  # busy or late: no opinion
        return min(1.0, sum(math.exp(s) for s in scores))

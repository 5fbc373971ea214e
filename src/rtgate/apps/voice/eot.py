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
from typing import Any, Protocol

from rtgate.core.budget import Budget
from rtgate.core.errors import InvalidRequest, RtgateError

__all__ = [
    "DEFAULT_PROMPTS",
    "EndOfTurn",
    "EndPrompt",
    "LMEndOfTurn",
    "Labelled",
    "Scorer",
    "auc",
    "evaluate",
    "load_eval",
    "operating_points",
]


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


# Lines that go on after a complete-looking clause ("…特别慢，能帮我看看吗？") teach the model
# that a background clause is usually followed by more; short finished requests teach it
# that a request ends the line. With only short one-clause lines (the first prompt), 34% of
# the English clauses that go on scored >= 0.6 on ``eot_eval.json``; with these, none did
# (docs/voice.md). None of these lines is in the evaluation set.
DEFAULT_PROMPTS: dict[str, EndPrompt] = {
    "zh": EndPrompt(
        "以下是电话客服和顾客的对话。\n"
        "顾客：我家的网这几天特别慢，能帮我看看吗？\n客服：好的，我帮您查。\n"
        "顾客：帮我把流量包退掉。\n客服：好的，马上处理。\n"
        "顾客：我上个月去了一趟日本，回来发现话费多了两百块，这是怎么回事？\n"
        "客服：我帮您看一下账单。\n"
        "顾客：我要办理携号转网。\n客服：好的，您请说。\n"
        "顾客：我在你们这儿交了五年宽带费了，续约有没有优惠？\n客服：我帮您查一下。\n"
        "顾客：好的，谢谢。\n客服：不客气。\n顾客：",
        ("。", "？", "！", "\n"),
    ),
    "en": EndPrompt(
        "A phone call between a caller and a support agent.\n"
        "Caller: My internet has been really slow this week, can you check it?\n"
        "Agent: Sure, let me check.\n"
        "Caller: Please remove the data add-on.\nAgent: Okay, one moment.\n"
        "Caller: I was in Japan last month and my bill went up by two hundred dollars, "
        "why is that?\nAgent: Let me look at your bill.\n"
        "Caller: I'd like to port my number out.\nAgent: Sure, go ahead.\n"
        "Caller: I've paid for broadband with you for five years, is there a renewal "
        "discount?\nAgent: Let me check.\n"
        "Caller: Okay, thanks.\nAgent: You're welcome.\nCaller: ",
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

    async def prime(self) -> int:
        """Keep each dialogue prefix, up to its last line, in the backend's prefix cache
        (scores do not save states, and the generations between them evict the KV cache:
        without this every score would evaluate the whole dialogue again). The caller's
        label is left out: it tokenises together with the caller's first word. Returns how
        many prefixes were primed (0 when the scorer keeps no cache)."""
        from rtgate.backends.base import Generation

        prime = getattr(self.scorer, "prime", None)
        if prime is None:
            return 0
        done = 0
        for prompt in self.prompts.values():
            head = prompt.prefix[: prompt.prefix.rfind("\n") + 1]
            if head:
                await prime(Generation(prompt=head, max_tokens=1))
                done += 1
        return done

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


@dataclass(frozen=True, slots=True)
class Labelled:
    """A complete-looking clause and whether the caller's turn was over there."""

    text: str
    lang: str
    done: bool


def load_eval(path: str | None = None) -> list[Labelled]:
    """The labelled clauses of ``eot_eval.json`` (the packaged set by default)."""
    import json
    from pathlib import Path

    if path is None:
        from rtgate.apps.voice.packaged import data_path

        path = str(data_path("eot_eval.json"))
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        out = [
            Labelled(str(t), lang, label == "done")
            for lang in ("zh", "en")
            for label in ("done", "more")
            for t in raw.get(lang, {}).get(label, [])
        ]
    except (OSError, ValueError, AttributeError, TypeError) as e:
        raise InvalidRequest(f"{path}: not a labelled-clause file ({e})") from e
    if not out:
        raise InvalidRequest(f"{path}: no labelled clauses under zh/en done/more")
    return out


def auc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """ROC AUC: the chance a positive scores above a negative (ties count half)."""
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def operating_points(
    scored: Sequence[tuple[Labelled, float]], thresholds: Sequence[float]
) -> dict[str, Any]:
    """AUC and, per threshold, the share of finished turns at or above it (answered
    sooner) and of unfinished ones (cut into, should the caller pause that long)."""
    report: dict[str, Any] = {}
    for lang in ("zh", "en", "all"):
        mine = [(x, p) for x, p in scored if lang in ("all", x.lang)]
        pos = [p for x, p in mine if x.done]
        neg = [p for x, p in mine if not x.done]
        report[lang] = {
            "done": len(pos),
            "more": len(neg),
            "auc": None if (a := auc(pos, neg)) is None else round(a, 4),
            "at": {
                f"{t:g}": {
                    "done_share": round(sum(p >= t for p in pos) / max(1, len(pos)), 3),
                    "more_share": round(sum(p >= t for p in neg) / max(1, len(neg)), 3),
                }
                for t in thresholds
            },
        }
    return report


async def evaluate(
    eot: EndOfTurn, items: Sequence[Labelled], thresholds: Sequence[float]
) -> dict[str, Any]:
    """Score every clause (one at a time) and report :func:`operating_points` plus the
    scores themselves; a clause the model had no opinion on counts as 0."""
    scored = [(x, await eot.p_end(x.text, x.lang) or 0.0) for x in items]
    report = operating_points(scored, thresholds)
    report["scores"] = [
        {"lang": x.lang, "text": x.text, "done": x.done, "p": round(p, 4)} for x, p in scored
    ]
    return report

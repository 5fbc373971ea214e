"""The autocomplete tiers. Each answers with one :class:`Piece` whose data holds the
suggestions (``candidates``: text, intent, source) or declines.

- :class:`TemplateSuggestTier` (``template``): a curated prefix or keyword template hit,
  topped up with classified suggestions so the first three cover three intents.
- :class:`LocalSuggestTier` (``local``): the n-gram classifier (tens of microseconds) and
  the corpus; when the classifier is unsure and the model's learned p99 fits what is left
  of the budget, the local model re-ranks the candidates. Declines ``complex`` asks and
  long asks it does not recognise, which go to the cloud.
- :class:`CloudSuggestTier` (``cloud``): the deeper answer for a long ask: the past asks it
  most resembles and one question per intent it mentions, ranked by a model when there is
  one. The engine wraps it in an emulated 70B latency.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtgate.apps.autocomplete.pool import CandidatePool, Entry, Suggestion, fuse, units
from rtgate.apps.autocomplete.scoring import Scorer
from rtgate.core.budget import Budget
from rtgate.core.errors import Declined, NotYet
from rtgate.core.latency import LatencyModel, Prior
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier
from rtgate.tiers.classifier import IntentRanker
from rtgate.tiers.templates import TemplateTable
from rtgate.tiers.textnorm import lang_of

__all__ = [
    "BackgroundOnly",
    "CloudSuggestTier",
    "LocalSuggestTier",
    "Reader",
    "Reading",
    "TemplateSuggestTier",
    "distinct_first",
    "piece_of",
]

COMPLEX = "complex"
_TYPING = ", still being typed"  # a NotYet's detail: the big model waits for the pause


@dataclass(slots=True)
class Reading:
    """What the classifier and the corpus say about a typed prefix."""

    top: str
    p: float
    order: list[tuple[str, float]]  # fused (intent, log score), best first
    extending: list[Entry] = field(default_factory=list)
    proba: dict[str, float] = field(default_factory=dict)  # the classifier's own

    def intents(self, k: int = 5) -> list[str]:
        return [i for i, _ in self.order][:k]


class Reader:
    """The classifier's ranking fused with the corpus queries that continue the prefix."""

    def __init__(self, classifier: IntentRanker, pool: CandidatePool, weight: float = 1.0) -> None:
        self.classifier = classifier
        self.pool = pool
        self.weight = weight

    def read(self, text: str) -> Reading:
        ranked = self.classifier.rank(text)
        ext = self.pool.extensions(text)
        top, p = ranked[0]
        return Reading(top, p, fuse(ranked, ext, self.weight), ext, dict(ranked))


def distinct_first(items: Sequence[Suggestion]) -> list[Suggestion]:
    """The first suggestion of each intent, in order, then the rest in order."""
    seen: set[str] = set()
    head: list[Suggestion] = []
    tail: list[Suggestion] = []
    for s in items:
        (tail if s.intent in seen else head).append(s)
        seen.add(s.intent)
    return head + tail


def piece_of(suggestions: Sequence[Suggestion], **data: Any) -> Piece:
    """A tier's answer: the first suggestion as text, all of them in ``candidates``."""
    body = {"candidates": [s.to_dict() for s in suggestions], **data}
    return Piece(suggestions[0].text if suggestions else "", body)


class TemplateSuggestTier(Tier):
    """A template hit, its candidates first (one per intent), then classified ones."""

    latency_prior = Prior(1.0, 1.0)

    def __init__(
        self,
        table: TemplateTable,
        reader: Reader,
        *,
        limit: int = 5,
        quality: int = 40,
        window: int | None = None,
    ) -> None:
        self.name = "template"
        self.quality = quality
        self.table = table
        self.reader = reader
        self.limit = limit
        self.window = window  # longer texts are not read (``None``: any length)

    def suggest(self, text: str) -> list[Suggestion] | None:
        """The hit's candidates in the classifier's order of their intents (one per
        intent first), topped up with classified suggestions to cover three intents;
        ``None`` for no hit, or a text longer than ``window``."""
        if self.window is not None and len(text) > self.window:
            return None
        hit = self.table.match(text)
        if hit is None:
            return None
        reading = self.reader.read(text)
        rank = {i: n for n, (i, _) in enumerate(reading.order)}
        own = sorted(
            (Suggestion(c.text, c.intent, "template") for c in hit.candidates),
            key=lambda s: rank.get(s.intent, len(rank)),
        )
        own = distinct_first(own)
        intents = {s.intent for s in own}
        if len(intents) < 3 or len(own) < self.limit:
            more = [i for i in reading.intents(5) if i not in intents]
            fill = self.reader.pool.suggest(text, more, source="classifier", limit=self.limit)
            keys = {s.text for s in own}
            fill = [s for s in fill if s.text not in keys]
            heads = own[: len(intents)]
            need = max(0, 3 - len(heads))
            own = heads + fill[:need] + own[len(intents) :] + fill[need:]
        return own[: self.limit]

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        if self.window is not None and len(request.input) > self.window:
            raise Declined(f"template: beyond the fast window ({self.window} characters)")
        found = self.suggest(request.input)
        if not found:
            raise Declined("template: no template for this prefix")
        yield piece_of(found, route="template")


class LocalSuggestTier(Tier):
    """Classifier + corpus suggestions, re-ranked by the local model when it fits.

    Args:
        scorer: the local model (``None``: the classifier alone).
        ambiguous_p: below this top-intent probability the model is asked to re-rank.
        complex_p: a prefix of at least ``long_units`` whose ``complex`` probability
            reaches this is a complex ask: declined (the cloud takes it). Below, a likely
            complex ask is offered the most similar past ask among the suggestions.
            ``None``: never declined as complex (a judge fitted on such prefixes decides).
        complex_langs: the languages whose prefixes are declined as complex (the others
            are left to the judge). Chinese only: in English the classifier's ``complex``
            class (20 long corpus asks) reads length, not parts (``P(complex) >= 0.7`` on
            9-18% of long simple asks' prefixes of 13+ words, 18-34% of complex ones),
            and the judge delegates the complex asks it declined (session 14).
        unknown_p: below this top probability, a prefix of at least ``long_units`` that
            no known query continues is an unknown ask: declined too.
        window: a prefix longer than this many characters is not read: declined (the
            big model takes a long message); ``None``: any length.
        complex_view: what of a long prefix the complex decline reads (``None``: all of
            it), e.g. its request view (:func:`~rtgate.tiers.clause_reader.request_view`).
        margin_ms: time kept to answer without the model when its call runs late (and for
            the scheduling jitter of a busy machine).
        on_skip: called with the prefix when the model did not fit (background refinement).
    """

    latency_prior = Prior(120.0, 120.0)

    def __init__(
        self,
        reader: Reader,
        scorer: Scorer | None = None,
        *,
        min_units: int = 2,
        ambiguous_p: float = 0.6,
        complex_p: float | None = 0.7,
        complex_langs: Sequence[str] = ("zh",),
        unknown_p: float = 0.2,
        long_units: tuple[int, int] = (16, 9),
        model_weight: float = 1.0,
        margin_ms: float = 20.0,
        scorer_prior_ms: float = 120.0,
        limit: int = 5,
        quality: int = 20,
        on_skip: Callable[[str], None] | None = None,
        window: int | None = None,
        complex_view: Callable[[str], str] | None = None,
    ) -> None:
        self.name = "local"
        self.window = window
        self.complex_view = complex_view
        self.quality = quality
        self.reader = reader
        self.scorer = scorer
        self.min_units = min_units
        self.ambiguous_p = ambiguous_p
        self.complex_p = complex_p
        self.complex_langs = tuple(complex_langs)
        self.unknown_p = unknown_p
        self.long_units = long_units
        self.model_weight = model_weight
        self.margin_ms = margin_ms
        self.limit = limit
        self.on_skip = on_skip
        self.scoring = LatencyModel(Prior(scorer_prior_ms, scorer_prior_ms))
        self.in_flight = 0
        self.model_calls = 0
        self.model_timeouts = 0

    def read(
        self, text: str, cloud: bool = True, whole: bool = True
    ) -> tuple[Reading, list[Suggestion]]:
        """The classifier's reading and its suggestions; ``Declined`` for the cloud's asks
        (unless ``cloud`` is false: nobody would take them, so the best guesses are
        offered, a similar past ask among them). A prefix still being typed (not
        ``whole``) that reads as complex or unknown is :class:`NotYet`: the rest of the
        ask may make it one the fast tiers answer (a story first, the ask last), so the
        big model waits for the whole ask (session 28)."""
        if self.window is not None and len(text) > self.window:
            raise Declined(f"local: beyond the fast window ({len(text)} > {self.window})")
        n = units(text)
        if n < self.min_units:
            raise Declined(f"local: {n} characters/words is too little to suggest")
        r = self.reader.read(text)
        lang = lang_of(text)
        no, why = (Declined, "") if whole else (NotYet, _TYPING)  # a typed prefix: not yet
        long = cloud and n >= self.long_units[0 if lang == "zh" else 1]
        declines = self.complex_p is not None and lang in self.complex_langs
        if long and declines:
            seen = r if self.complex_view is None else self.reader.read(self.complex_view(text))
            p_complex = seen.proba.get(COMPLEX, 0.0)
            if p_complex >= (self.complex_p or 0.0):
                raise no(f"local: a complex ask (p={p_complex:.2f}){why}")
        if long and r.p < self.unknown_p and not r.extending:
            raise no(f"local: unknown ask (p={r.p:.2f}){why}")
        found = self.reader.pool.suggest(
            text, r.intents(), source="classifier", limit=self.limit, extending=r.extending
        )
        if not found:
            raise Declined("local: no candidates")
        return r, found

    def model_fits(self, budget: Budget) -> bool:
        need = self.scoring.predict_total("p99") * (1 + self.in_flight)
        return need <= budget.left_ms() - self.margin_ms

    async def rerank(
        self, text: str, reading: Reading, found: list[Suggestion], budget: Budget
    ) -> list[Suggestion]:
        """``found`` re-ordered by fused intent score + model score (raises on timeout)."""
        assert self.scorer is not None
        t0 = budget.clock()
        self.in_flight += 1
        self.model_calls += 1
        try:
            scores = await self.scorer.score(text, [s.text for s in found], budget)
        finally:
            self.in_flight -= 1
        self.scoring.observe((budget.clock() - t0) * 1000.0, (budget.clock() - t0) * 1000.0)
        base = dict(reading.order)
        ranked = sorted(
            zip(found, scores, strict=True),
            key=lambda fs: -(base.get(fs[0].intent, -10.0) + self.model_weight * fs[1]),
        )
        return distinct_first([Suggestion(s.text, s.intent, "local") for s, _ in ranked])

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        text = request.input
        whole = bool(request.meta.get("pause"))
        reading, found = self.read(text, cloud=request.delegate is not False, whole=whole)
        model = False
        if self.scorer is not None and reading.p < self.ambiguous_p:
            if self.model_fits(budget):
                # the model gets what is left minus a margin; late, the classifier answers
                sub = budget.sub(budget.left_ms() - self.margin_ms)
                try:
                    async with asyncio.timeout_at(sub.deadline):
                        found = await self.rerank(text, reading, found, sub)
                    model = True
                except TimeoutError:
                    self.model_timeouts += 1
                    self.scoring.observe_cutoff(sub.budget_ms)
            elif self.on_skip is not None:
                self.on_skip(text)
        yield piece_of(
            found, route="local", intent=reading.top, confidence=round(reading.p, 4), model=model
        )


class BackgroundOnly(Tier):
    """``inner`` for background jobs only: declines at once when handed less than
    ``min_budget_ms`` (an inline request), so a gate never spends a keystroke's budget
    waiting for it. Same name, rank and latency prior as ``inner``."""

    def __init__(self, inner: Tier, min_budget_ms: float = 1_000.0) -> None:
        self.inner = inner
        self.min_budget_ms = min_budget_ms
        self.name = inner.name
        self.quality = inner.quality
        self.delegable = inner.delegable
        self.latency_prior = getattr(inner, "latency_prior", None)
        self.label = getattr(inner, "label", inner.name)

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        if budget.left_ms() < self.min_budget_ms:
            raise Declined(f"{self.name}: background only ({budget.left_ms():.0f} ms left)")
        agen = self.inner.stream(request, budget)
        try:
            async for piece in agen:
                yield piece
        finally:
            closer = getattr(agen, "aclose", None)
            if closer is not None:
                await closer()

    async def warmup(self) -> None:
        await self.inner.warmup()

    async def aclose(self) -> None:
        await self.inner.aclose()


class CloudSuggestTier(Tier):
    """The deeper answer for a long or complex ask (run in the background by the gate).

    Suggestions: the past asks of the corpus it most resembles, then one question for each
    intent the ask mentions; a scorer (the real model in ``--mode real``) orders them.
    """

    def __init__(
        self, reader: Reader, scorer: Scorer | None = None, *, limit: int = 5, quality: int = 10
    ) -> None:
        self.name = "cloud"
        self.quality = quality
        self.delegable = True
        self.reader = reader
        self.scorer = scorer
        self.limit = limit

    async def suggestions(self, text: str, budget: Budget) -> list[Suggestion]:
        pool = self.reader.pool
        reading = self.reader.read(text)
        similar = [e for _, e in pool.similar(text)]
        out = [Suggestion(e.text, e.intent, "cloud") for e in similar if e.intent == COMPLEX][:2]
        best: dict[str, Entry] = {}
        for e in similar:
            best.setdefault(e.intent, e)
        for intent, _ in reading.order:
            if len(out) >= self.limit + 2:
                break
            if intent == COMPLEX:
                continue
            near = best.get(intent) or next(iter(pool.typical(intent, lang_of(text), 1)), None)
            if near is not None:
                out.append(Suggestion(near.text, near.intent, "cloud"))
        if self.scorer is not None and out:
            with contextlib.suppress(TimeoutError):
                scores = await self.scorer.score(text, [s.text for s in out], budget)
                pairs = sorted(zip(out, scores, strict=True), key=lambda p: -p[1])
                out = [s for s, _ in pairs]
        return out[: self.limit]

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        found = await self.suggestions(request.input, budget)
        if not found:
            raise Declined("cloud: nothing to suggest")
        yield piece_of(found, route="cloud")

    async def aclose(self) -> None:
        if self.scorer is not None:
            await self.scorer.aclose()

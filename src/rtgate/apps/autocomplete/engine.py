"""The autocomplete engine: a typed prefix in, up to five suggestions out, within budget.

Every request goes through the real :class:`~rtgate.gate.Gate`, with the tiers ranked by
what a suggestion box prefers (the gate tries higher ranks first)::

    template (curated, µs) > cache (an earlier model or cloud answer) > local (classifier,
    then the local model when it fits) > cloud (delegable; never fits 150 ms)

Nothing answers a complex or unknown long ask inline. While it is still being typed the
answer is silent and the cloud waits (the local tier says
:class:`~rtgate.core.errors.NotYet`: a story often comes first and the ask last, and the
whole ask may be one the fast tiers answer). At the pause (``complete(…, pause=True)``:
the typist stopped, or submitted), the gate skips the cloud, answers silently and
delegates the whole ask to the cloud in the background: the engine turns that into route
``cloud_async`` with a placeholder suggestion, and the cloud's suggestions later
(:meth:`AutocompleteEngine.followup`; they are also cached for the next user who types
the same prefix). A fast answer the domain's judge does not trust (a multi-part or
out-of-domain ask that still matched a keyword, :mod:`rtgate.tiers.answerability`) is
route ``cloud_async`` too: its fast suggestions are shown, marked partial, with the
placeholder after them, and the cloud is asked in the background all the same.
A prefix of a session (``complete(…, session=, on_late=)``) that may reach the cloud and
was answered fast is then read by the semantic scope model in a worker thread
(:mod:`rtgate.apps.autocomplete.semantic`); if it reads as multi-part or out-of-domain, the
cloud job starts late and ``on_late(prefix, job_id)`` says so (the placeholder and the
cloud's suggestions follow, as for a delegated ask). The keystroke never waits for it.
The cloud is a model wrapped in the ``CLOUD_70B`` latency profile, a
named emulation.

Modes: ``emulated`` ranks with a bigram scorer behind the ``LOCAL_8B`` profile (no model
is loaded); ``real`` loads the packaged Gemma 3 270M GGUF twice (local ranking, and the
cloud's ranking behind the emulated latency).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from rtgate.apps.autocomplete.pool import CandidatePool, Suggestion, units
from rtgate.apps.autocomplete.scoring import EmulatedScorer, LlamaScorer, Scorer
from rtgate.apps.autocomplete.semantic import SemanticVeto, SemanticWatch
from rtgate.apps.autocomplete.tiers import (
    BackgroundOnly,
    CloudSuggestTier,
    LocalSuggestTier,
    Reader,
    TemplateSuggestTier,
)
from rtgate.core.budget import Budget
from rtgate.core.errors import ConfigError, InvalidBudget, InvalidRequest, JobNotFound
from rtgate.core.request import Request
from rtgate.core.text_rules import check_text
from rtgate.core.trace import why_of
from rtgate.domains.loader import (
    INTENTS,
    READER_PARAMS,
    judge_path,
    lead_in_variants,
    load_corpus,
    load_judge,
    load_reader_classifier,
    load_semantic_scope,
    load_templates,
)
from rtgate.gate import Gate, GateConfig
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.models.embeddings import Embedder
from rtgate.tiers.base import Tier
from rtgate.tiers.cache import CacheTier, ExactCache
from rtgate.tiers.classifier import IntentClassifier
from rtgate.tiers.clause_reader import request_view
from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency
from rtgate.tiers.intents import Example
from rtgate.tiers.textnorm import lang_of

__all__ = [
    "FAST_WINDOW_CHARS",
    "LATE_WHY",
    "MAXMIN_POINT",
    "MAX_PREFIX_CHARS",
    "PLACEHOLDER",
    "ROUTES",
    "AutocompleteEngine",
    "CompleteResult",
    "EngineConfig",
    "Mode",
    "at_boundary",
    "beyond_window",
    "build_reader",
    "check_budget",
    "check_prefix",
    "may_delegate",
    "reading",
]

Mode = Literal["emulated", "real"]
ViewName = Literal["text", "view", "view_whole"]
# the fast tiers read a prefix of at most this many characters; a longer one (a user
# typing a long message) is the big model's: delegated, never an error
FAST_WINDOW_CHARS = 256
MAXMIN_POINT: dict[str, tuple[float, float]] = {
    "judge_thresholds": (0.02, 0.05),
    "semantic_bars": (1.01, 0.99),
}
"""Session 15's operating point (an option, not the default): the one that maximises the
lower of complex delegated and simple kept fast over the validation ask sets pooled; it
keeps about twice as many long simple asks fast and delegates 5-12 points fewer complex
ones (docs/architecture.md)."""
# a prefix longer than this is refused (``InvalidRequest``): no box sends one
MAX_PREFIX_CHARS = 4096
LATE_WHY = 256  # the late jobs whose reason the engine keeps (``late_why``)
MIN_BUDGET_MS, MAX_BUDGET_MS = 5.0, 10_000.0
PLACEHOLDER = {"zh": "正在为你生成建议…", "en": "Finding suggestions…"}
ROUTES = ("template", "cache", "local", "cloud_async", "silent")


@dataclass(slots=True)
class EngineConfig:
    """How to build an engine. ``cloud_min_units``: shorter prefixes never go to the cloud
    (characters for Chinese; ``cloud_min_words`` words for English, ``cloud_min_units``
    when unset); nor does an English prefix that ends inside a word (:func:`at_boundary`).
    Four English words, so that a short out-of-domain ask ("what's the weather like
    tomorrow") can reach the big model: the judge decides which of them do. When the
    user pauses (or submits), the whole text may reach it from ``pause_min_units``
    characters / ``pause_min_words`` words, wherever it ends (``complete(…, pause=True)``)."""

    mode: Mode = "emulated"
    templates: bool = True
    model: str = "gemma3-270m"
    cloud_min_units: int = 6
    cloud_min_words: int | None = 4
    pause_min_units: int = 3
    pause_min_words: int = 2
    refine_queue: int = 32
    cloud_workers: int = 16
    cloud_queue: int = 128
    seed: int = 0
    local: dict[str, Any] = field(default_factory=dict)  # LocalSuggestTier keyword args
    judge: bool = True  # the domain's judge decides whether a fast answer can stand alone
    semantic: bool = True  # with the judge: the semantic scope check, in the background
    semantic_sessions: int = 64  # sessions whose prefix may wait for it (then: dropped)
    # a fast answer the judge trusts at least this much (and more than the semantic check
    # distrusts it) stands against the semantic check
    semantic_overrule: float | None = 0.99
    semantic_threads: int = 1  # the embedding engine's threads (one core left to the loop)
    # the clause reader reads the check's vetoes again: one request is not multi-part
    semantic_parts: bool = False
    # what the judge, the semantic check and the local tier's complex decline read of a
    # prefix, each: "text" (all of it), or its request view (the clauses that ask,
    # :func:`~rtgate.tiers.clause_reader.request_view`; a situation still being typed
    # gives its last clause, "view", or all of it, "view_whole")
    # (session 15: measured, not shipped; the view ties with the text at the shipped
    # operating point and loses complex asks elsewhere, docs/architecture.md)
    judge_reads: ViewName = "text"
    semantic_reads: ViewName = "text"
    decline_reads: ViewName = "text"
    # an operating point in place of the files': the judge's (typed, pause) thresholds
    # and the semantic check's (typed, pause) bars (``None``: the ones the files were
    # fitted with; a bar over 1 never vetoes). The default is the files' point, which
    # sends multi-part and out-of-domain asks on first (a wrong inline answer costs the
    # user more than a late right one); :data:`MAXMIN_POINT` is session 15's max-min
    # point, an option (docs/architecture.md)
    judge_thresholds: tuple[float, float] | None = None
    semantic_bars: tuple[float, float] | None = None


@dataclass(slots=True)
class CompleteResult:
    """The answer to one prefix, in the shape of ``POST /v1/complete``."""

    prefix: str
    candidates: list[Suggestion]
    route: str
    elapsed_ms: float
    job_id: str | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    partial: bool = False  # fast suggestions shown while the cloud works on the whole ask

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "candidates": [c.to_dict() for c in self.candidates],
            "route": self.route,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "partial": self.partial,
        }
        if self.job_id is not None:
            out["job_id"] = self.job_id
        out["trace"] = self.trace
        return out


def check_prefix(prefix: Any) -> str:
    """The prefix, or ``InvalidRequest`` saying what is wrong with it."""
    if not isinstance(prefix, str):
        raise InvalidRequest(f"prefix must be a string, got {type(prefix).__name__}")
    if len(prefix) > MAX_PREFIX_CHARS:
        raise InvalidRequest(f"prefix is {len(prefix)} characters; at most {MAX_PREFIX_CHARS}")
    return check_text(prefix, "prefix")


def build_reader(examples: Sequence[Example] | None = None) -> Reader:
    """The classifier and the candidate pool of the domain. Without ``examples``: the
    shipped reader classifier (:func:`~rtgate.domains.loader.load_reader_classifier`: the
    corpus, its lead-in variants and the simple asks of the learned ask sets) over the
    corpus's pool; with them, one trained now (~1-2 s) on the examples and lead-in
    variants of a third of them. The pool (what is suggested) is only ever the examples
    or the corpus: a learned ask is evidence of its intent, not a suggestion."""
    rows = list(examples) if examples is not None else load_corpus()
    table = load_templates()
    extra = [(c.text, c.intent) for t in table.templates for c in t.candidates]
    if examples is None:
        classifier = load_reader_classifier()
    else:
        classifier = IntentClassifier.train(rows + lead_in_variants(rows), **READER_PARAMS)
    return Reader(classifier, CandidatePool(rows, extra))


def beyond_window(text: str) -> bool:
    """Whether ``text`` is longer than the fast tiers read (:data:`FAST_WINDOW_CHARS`)."""
    return len(text) > FAST_WINDOW_CHARS


def reading(name: ViewName) -> Callable[[str], str] | None:
    """What a part of the engine reads of a prefix (:attr:`EngineConfig.judge_reads`):
    ``None`` for all of it, else its request view."""
    if name == "text":
        return None
    if name not in ("view", "view_whole"):
        raise ConfigError(f"unknown reading {name!r}: text, view or view_whole")
    unasked = "last" if name == "view" else "whole"
    return functools.partial(request_view, unasked=unasked)


def at_boundary(text: str) -> bool:
    """Worth a cloud call: Chinese arrives in IME commits (whole words); English only once
    a word is finished (a space or punctuation), not on every keystroke inside it."""
    return lang_of(text) == "zh" or not text[-1:].isalnum()


def may_delegate(text: str, cfg: EngineConfig, *, pause: bool = False) -> bool:
    """Whether ``text`` is worth a cloud call at all: long enough, at a word's end; or,
    at a ``pause`` (the whole ask), ``pause_min_units`` / ``pause_min_words`` of it.
    Beyond the fast tiers' window (:func:`beyond_window`) any text at a word's end (or at
    the pause) is: no fast tier reads it, so only the big model can answer it."""
    if beyond_window(text):
        return pause or at_boundary(text)
    en = lang_of(text) == "en"
    if pause:
        return units(text) >= (cfg.pause_min_words if en else cfg.pause_min_units)
    least = cfg.cloud_min_units
    if en and cfg.cloud_min_words is not None:
        least = cfg.cloud_min_words
    return units(text) >= least and at_boundary(text)


def check_budget(budget_ms: Any) -> float:
    if isinstance(budget_ms, bool) or not isinstance(budget_ms, int | float):
        raise InvalidBudget(f"budget_ms must be a number, got {type(budget_ms).__name__}")
    if not MIN_BUDGET_MS <= budget_ms <= MAX_BUDGET_MS:
        raise InvalidBudget(f"budget_ms must be in [{MIN_BUDGET_MS:g}, {MAX_BUDGET_MS:g}]")
    return float(budget_ms)


class AutocompleteEngine:
    """Suggestions for typed prefixes (see the module docstring). An async context manager:
    it owns the gate, the cloud watchers and the background refinement worker."""

    def __init__(
        self,
        gate: Gate,
        *,
        local: LocalSuggestTier,
        cache: CacheTier,
        reader: Reader,
        config: EngineConfig | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.gate = gate
        self.local = local
        self.cache = cache
        self.reader = reader
        self.config = config or EngineConfig()
        self.labels = labels or {}
        self._refine: asyncio.Queue[str] = asyncio.Queue(self.config.refine_queue)
        self._refining: set[str] = set()
        self.refine_dropped = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._worker: asyncio.Task[None] | None = None
        local.on_skip = self._queue_refine
        self.watch: SemanticWatch | None = None
        self._on_late: OrderedDict[str, Callable[[str, str], None]] = OrderedDict()
        self.late_jobs = 0
        # why each late job started (the judge's line in its trace), newest LATE_WHY kept
        self.late_why: OrderedDict[str, str] = OrderedDict()
        if isinstance(gate.judge, SemanticVeto):
            # a judge that weighs the check's reading is handed every one it can act on
            # (only the pause's, when its typed threshold is 0), else the vetoes
            every: Callable[[float, bool], bool] | None = None
            typed: bool | None = None
            if gate.judge.weighs:
                part = getattr(gate.judge.inner, "semantic", None)
                typed = part is None or part.threshold > 0.0
                every = (lambda p, pause: True) if typed else (lambda p, pause: pause)
            self.watch = SemanticWatch(
                gate.judge.scope,
                self._start_late,
                max_sessions=self.config.semantic_sessions,
                relays=every,
                reads_typed=typed,
            )

    # -- building ----------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        config: EngineConfig | None = None,
        *,
        examples: Sequence[Example] | None = None,
        local_scorer: Scorer | None = None,
        cloud: Tier | None = None,
        reader: Reader | None = None,
    ) -> AutocompleteEngine:
        """An engine on the shipped domain (or ``examples``, e.g. a training split).

        ``local_scorer``, ``cloud`` and a prebuilt ``reader`` (see :func:`build_reader`)
        replace what ``config.mode`` and ``examples`` would build (tests share one).
        """
        cfg = config or EngineConfig()
        table = load_templates()
        reader = reader or build_reader(examples)
        cloud_scorer: Scorer | None = None
        labels: dict[str, str] = {}
        if local_scorer is None:
            if cfg.mode == "real":
                from rtgate.backends.llamacpp import LlamaCppBackend

                local_scorer = LlamaScorer(
                    LlamaCppBackend(cfg.model, n_ctx=512, n_threads=1, queue_size=4)
                )
                cloud_scorer = LlamaScorer(
                    LlamaCppBackend(cfg.model, n_ctx=512, n_threads=1, queue_size=8)
                )
            else:
                local_scorer = EmulatedScorer(seed=cfg.seed)
        judge: Any = load_judge() if cfg.judge and judge_path().exists() else None
        if judge is not None:
            judge.view = reading(cfg.judge_reads)
            if cfg.judge_thresholds is not None:
                judge.threshold, judge.pause_threshold = cfg.judge_thresholds
        # a judge fitted through a local tier built otherwise (rtgate intents judge
        # --single: e.g. one that leaves long complex prefixes to it) has it built so
        fitted_with = judge.meta.get("local", {}) if judge is not None else {}
        if not isinstance(fitted_with, dict) or set(fitted_with) - {"complex_p"}:
            raise ConfigError(
                f"{judge_path()}: meta.local may only set complex_p (how the judge's local "
                f"tier was built), got {fitted_with!r}; refit it (rtgate intents judge)"
            )
        built = {"window": FAST_WINDOW_CHARS, "complex_view": reading(cfg.decline_reads)}
        local = LocalSuggestTier(reader, local_scorer, **{**built, **fitted_with, **cfg.local})
        if cloud is None:
            inner = CloudSuggestTier(reader, cloud_scorer)
            seed = cfg.seed
            cloud = BackgroundOnly(
                EmulatedLatency(inner, CLOUD_70B, name="cloud", delegable=True, seed=seed)
            )
        labels["local"] = local_scorer.label
        labels["cloud"] = getattr(cloud, "label", cloud.name)
        cache = CacheTier(ExactCache(max_entries=8192), name="cache", quality=30)
        tiers: list[Tier] = [cache, local, cloud]
        if cfg.templates:
            tiers.append(TemplateSuggestTier(table, reader, window=FAST_WINDOW_CHARS))
        if cfg.semantic and judge is not None:  # the check is a part of the judge's veto
            scope = load_semantic_scope(
                embedder=Embedder(threads=cfg.semantic_threads), parts=cfg.semantic_parts
            )
            if scope is not None:
                scope.view = reading(cfg.semantic_reads)
                if cfg.semantic_bars is not None:
                    scope.bar, scope.pause_bar = cfg.semantic_bars
                judge = SemanticVeto(judge, scope, overrule=cfg.semantic_overrule)
        gate = Gate(
            tiers,
            config=GateConfig(placeholder="", followup_budget_ms=10_000.0),
            queue=InProcessQueue(maxsize=cfg.cloud_queue, workers=cfg.cloud_workers),
            judge=judge,
        )
        return cls(gate, local=local, cache=cache, reader=reader, config=cfg, labels=labels)

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> AutocompleteEngine:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        await self.gate.start()
        scorer = self.local.scorer
        warm = getattr(scorer, "warmup", None)
        if warm is not None:
            await warm()
        if isinstance(scorer, LlamaScorer):  # learn what one ranking takes on this CPU
            for probe in ("我想把钱", "how do i", "我的卡"):
                with contextlib.suppress(Exception):
                    reading, found = self.local.read(probe)
                    await self.local.rerank(probe, reading, found, Budget(30_000.0))
        if self._worker is None:
            self._worker = asyncio.create_task(self._refine_worker(), name="ac-refine")
        if self.watch is not None:
            embedder = getattr(self.watch.scope, "embedder", None)
            if embedder is not None:  # load the engine now, not on a user's first check
                await asyncio.to_thread(embedder.warmup)
            self.watch.start()

    async def aclose(self) -> None:
        tasks = [*self._tasks, *([self._worker] if self._worker else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._worker = None
        if self.watch is not None:
            await self.watch.aclose()
        await self.gate.aclose()  # closes every tier, the local scorer's model included
        if self.local.scorer is not None:
            await self.local.scorer.aclose()

    # -- serving -----------------------------------------------------------------------

    async def complete(
        self,
        prefix: Any,
        budget_ms: Any = 150.0,
        *,
        session: str | None = None,
        on_late: Callable[[str, str], None] | None = None,
        pause: bool = False,
    ) -> CompleteResult:
        """Suggestions for ``prefix`` within ``budget_ms``; ``InvalidRequest`` on bad input.

        With ``session`` and ``on_late``, a fast answer may be followed by a cloud job
        the semantic check starts later: ``on_late(prefix, job_id)`` (see the module
        docstring); a newer prefix of the session makes an older one's check moot.
        ``pause``: the user stopped typing (or submitted), so ``prefix`` is the whole ask:
        it is judged, and may be delegated, even when short or inside a word
        (:meth:`may_delegate`). A prefix longer than the fast tiers' window
        (:data:`FAST_WINDOW_CHARS`) is not read by them: it goes to the big model (route
        ``cloud_async``, at a word's end or the pause); one longer than
        :data:`MAX_PREFIX_CHARS` is an ``InvalidRequest``."""
        text = check_prefix(prefix)
        budget = check_budget(budget_ms)
        t0 = time.perf_counter()
        if not text.strip():
            return CompleteResult(text, [], "silent", (time.perf_counter() - t0) * 1000.0)
        delegate = self.may_delegate(text, pause=pause)
        meta: dict[str, Any] = {"pause": True} if pause else {}
        if beyond_window(text):
            meta["beyond_window"] = True
        watch = self.watch
        if watch is not None and delegate:
            seen = watch.cached(text)  # read before: judged now, at no cost
            if seen is not None and watch.relays(seen, pause):
                meta["semantic_out"] = seen
        res = await self.gate.answer(Request(input=text, delegate=delegate, meta=meta), budget)
        if watch is not None and session is not None and on_late is not None:
            self._on_late[session] = on_late
            self._on_late.move_to_end(session)
            while len(self._on_late) > 4 * self.config.semantic_sessions:
                self._on_late.popitem(last=False)
            if delegate and res.job_id is None and res.route in ("template", "cache", "local"):
                watch.submit(session, text, pause=pause)
            else:
                watch.seen(session, text)
        data = res.data[0] if res.data else {}
        candidates = [Suggestion.from_dict(c) for c in data.get("candidates", [])]
        route, partial = res.route, False
        if route == "cache":
            candidates = [Suggestion(c.text, c.intent, "cache") for c in candidates]
        if res.job_id is not None and (route == "silent" or res.trace.partial):
            # the cloud works on the whole ask; what the fast tiers found for its simple
            # part is still shown, before the placeholder
            partial = bool(candidates)
            placeholder = Suggestion(PLACEHOLDER[lang_of(text)], "complex", "cloud")
            candidates = [*candidates[:4], placeholder]
            route = "cloud_async"
            self._spawn(self._remember(res.job_id, text))
        elif route == "local" and data.get("model"):
            await self.cache.put(text, res.text, data)
        elapsed = (time.perf_counter() - t0) * 1000.0
        trace = res.trace.to_dict()
        return CompleteResult(text, candidates, route, elapsed, res.job_id, trace, partial)

    def may_delegate(self, text: str, *, pause: bool = False) -> bool:
        """Whether ``text`` is worth a cloud call at all (:func:`may_delegate`)."""
        return may_delegate(text, self.config, pause=pause)

    async def followup(self, job_id: str) -> CompleteResult:
        """The cloud's suggestions for a ``cloud_async`` answer (waits for the job).

        Route ``cloud`` when it succeeded, ``silent`` with no candidates when it failed
        or was cancelled; ``JobNotFound`` for an unknown id."""
        job = await self.gate.wait_job(job_id)
        prefix = getattr(job.request, "input", "")
        found = job.data[0].get("candidates", []) if job.status == "done" and job.data else []
        cands = [Suggestion.from_dict(c, "cloud") for c in found]
        trace = {"job": job.to_dict()}
        return CompleteResult(prefix, cands, "cloud" if cands else "silent",
                              job.elapsed_ms or 0.0, job_id, trace)  # fmt: skip

    def cancel(self, job_id: str) -> bool:
        """Stop a cloud job nobody waits for any more (a newer prefix arrived)."""
        try:
            return self.gate.cancel_job(job_id)
        except JobNotFound:
            return False

    # -- background work ---------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remember(self, job_id: str, prefix: str) -> None:
        """Cache the cloud's answer so the next user typing ``prefix`` gets it at once."""
        job = await self.gate.wait_job(job_id)
        if job.status == "done" and job.data:
            # ``deep``: the big model's answer; served again from the cache, it is not judged
            await self.cache.put(prefix, job.text, {**job.data[0], "deep": True})

    async def _start_late(self, session: str, prefix: str, p_out: float, pause: bool) -> None:
        """The semantic check read ``prefix`` after its fast answer (vetoed it, or, for a
        judge that weighs the reading, read it at all): the fast tiers answer again (~1 ms)
        and the judge decides with the reading; when it delegates, start the cloud job and
        tell the session. ``pause``: ``prefix`` is the whole ask."""
        tell = self._on_late.get(session)
        if tell is None:
            return
        meta: dict[str, Any] = {"semantic_out": p_out, **({"pause": True} if pause else {})}
        request = Request(input=prefix, delegate=True, meta=meta)
        res = await self.gate.answer(request, 150.0)
        if res.job_id is None:
            return
        self.late_jobs += 1
        self.late_why[res.job_id] = why_of(res.trace.to_dict())
        while len(self.late_why) > LATE_WHY:  # policy when full: the oldest line goes
            self.late_why.popitem(last=False)
        self._spawn(self._remember(res.job_id, prefix))
        tell(prefix, res.job_id)

    def forget(self, session: str) -> None:
        """A session ended: no late job is started for it any more."""
        self._on_late.pop(session, None)

    async def settle(self) -> None:
        """Wait for the semantic check of every waiting prefix (replays, tests)."""
        if self.watch is not None:
            await self.watch.settle()

    def _queue_refine(self, prefix: str) -> None:
        """Policy when full: drop the newcomer (it is still answered by the classifier)."""
        if prefix in self._refining:
            return
        try:
            self._refine.put_nowait(prefix)
            self._refining.add(prefix)
        except asyncio.QueueFull:
            self.refine_dropped += 1

    async def _refine_worker(self) -> None:
        """Rank prefixes the model could not rank in time, off the request path; the next
        request for the same prefix is a cache hit with the model's order."""
        while True:
            prefix = await self._refine.get()
            try:
                if await self.cache.lookup(prefix) is None:
                    reading, found = self.local.read(prefix)
                    ranked = await self.local.rerank(prefix, reading, found, Budget(10_000.0))
                    data = {"candidates": [s.to_dict() for s in ranked], "model": True}
                    await self.cache.put(prefix, ranked[0].text, data)
            except Exception:  # a failed refinement only loses an optimisation
                pass
            finally:
                self._refining.discard(prefix)

    def snapshot(self) -> dict[str, Any]:
        """Gate metrics plus the engine's own counters."""
        return {
            "gate": self.gate.snapshot(),
            "labels": self.labels,
            "intents": list(INTENTS),
            "local_model_calls": self.local.model_calls,
            "local_model_timeouts": self.local.model_timeouts,
            "refine_dropped": self.refine_dropped,
            "semantic": None
            if self.watch is None
            else {**self.watch.snapshot(), "late_jobs": self.late_jobs},
        }

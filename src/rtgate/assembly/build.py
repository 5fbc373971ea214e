"""Build a :class:`~rtgate.gate.Gate` from a :class:`~rtgate.config.loader.Config`.

Every tier the configuration declares (:meth:`Config.declared_tiers`: the shorthand
sections and the ``[tiers.NAME]`` tables) is built by its kind, found in the registry of
tier kinds (:mod:`rtgate.kinds`); nothing here names a kind or a tier. The default chain,
best first: the ``cloud`` tier (a remote OpenAI-compatible model, or, with none
configured, the local model wrapped in the ``cloud-70b`` latency profile: an *emulation*,
labelled as such), the ``local`` model (llama.cpp, in process), then the ``template`` table.

Once every tier is built, the tiers that asked to wrap the others do (a cache remembering
their answers); then, unless ``[resilience] enabled = false``, each tier is wrapped in the
policy its kind gives it, adjusted by its overrides (a concurrency cap, a circuit breaker
with a background health probe, a budget-aware retry), and only then is the gate built.

:func:`warm_up` loads and probes every tier once at start-up and reports how each went.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgate.config.loader import Config
from rtgate.config.tiers import TierDecl
from rtgate.core.errors import ConfigError
from rtgate.core.request import Request
from rtgate.delegate.factory import make_queue
from rtgate.gate import Gate
from rtgate.gate.jobs import JobStore
from rtgate.kinds import BuildContext, Built, Registry, TierInfo, TierKind
from rtgate.resilience.admission import ConcurrencyLimiter
from rtgate.resilience.settings import ResilienceConfig
from rtgate.resilience.wire import with_policy
from rtgate.resilience.wrap import TierWrapper
from rtgate.tiers.answerability import Judge
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import EmulatedLatency
from rtgate.tiers.remember import RememberAnswers

__all__ = ["Assembly", "TierInfo", "assemble", "build_gate", "warm_up"]

log = logging.getLogger("rtgate.assembly.build")

CloudMode = Literal["remote", "emulated", "off"]


@dataclass(slots=True)
class Assembly:
    """A gate and what it is made of."""

    gate: Gate
    cloud_mode: CloudMode
    tiers: list[TierInfo]
    notes: list[str] = field(default_factory=list)
    warm: dict[str, str] = field(default_factory=dict)
    warmup_ms: float | None = None
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose_resources(self) -> None:
        """Close what the tiers share but do not own (e.g. the cache's Redis clients)."""
        while self.closers:
            close = self.closers.pop()
            try:
                await close()
            except Exception as e:  # shutting down: report, go on
                log.warning("closing %s failed: %s", getattr(close, "__qualname__", close), e)

    @classmethod
    def of(cls, gate: Gate) -> Assembly:
        """Describe a gate built elsewhere (tests, embedding applications)."""
        infos = [_describe(t) for t in gate.tiers]
        return cls(gate, cloud_mode(infos), infos)

    def describe(self) -> dict[str, Any]:
        return {
            "cloud_mode": self.cloud_mode,
            "tiers": [t.to_dict() for t in self.tiers],
            "notes": list(self.notes),
            "warm": dict(self.warm),
            "warmup_ms": self.warmup_ms,
        }


def cloud_mode(infos: list[TierInfo]) -> CloudMode:
    """``remote`` with a remote model tier, else ``emulated`` with an emulated one."""
    kinds = {i.kind for i in infos}
    return "remote" if "remote" in kinds else "emulated" if "emulated" in kinds else "off"


def _describe(tier: Tier) -> TierInfo:
    from rtgate.backends.openai_compat import OpenAICompatBackend
    from rtgate.tiers.llm import LLMTier

    t = tier
    while isinstance(t, TierWrapper | RememberAnswers):
        t = t.inner
    kind, label = "custom", type(t).__name__
    if isinstance(t, EmulatedLatency):
        kind, label = "emulated", f"{type(t.inner).__name__} as {t.profile.name}"
    elif isinstance(t, LLMTier):
        kind = "remote" if isinstance(t.backend, OpenAICompatBackend) else "local"
    return TierInfo(tier.name, kind, tier.quality, tier.delegable, label)


def build_gate(config: Config) -> Gate:
    """The gate for ``config`` (not started, not warm)."""
    return assemble(config).gate


def assemble(config: Config) -> Assembly:
    """Build every declared tier, wrap it in its policy, and the gate over them."""
    decls = config.declared_tiers()
    if not decls:
        raise ConfigError(
            "no tier is enabled: enable at least one of templates, classifier, cache, local, "
            "cloud, or declare one as [tiers.NAME]"
        )
    registry = Registry.discover()
    kinds = {d.name: registry.get(d.kind) for d in decls}
    context = BuildContext(delegation=config.delegation)
    built = {d.name: _build(kinds[d.name], d, context) for d in decls}
    tiers = {name: b.tier for name, b in built.items()}
    for owner, wrap in context.wrappers:
        tiers = {n: t if n == owner else wrap(t) for n, t in tiers.items()}
    if config.resilience.enabled:
        tiers = _with_policies(tiers, decls, kinds, config.resilience)
    store = JobStore(config.gate.max_jobs)
    gate = Gate(
        tiers.values(),
        config=config.gate_config(),
        queue=make_queue(config.delegation, store),
        store=store,
        priors={n: b.prior for n, b in built.items() if b.prior is not None},
        judge=_judge(config.gate.judge),
    )
    infos = sorted((b.info for b in built.values()), key=lambda i: -i.quality)
    return Assembly(gate, cloud_mode(infos), infos, context.notes, closers=context.closers)


def _judge(name: str) -> Judge | None:
    """The ``[gate] judge``: none, the packaged domain's, or a domain folder's."""
    if not name:
        return None
    from pathlib import Path

    from rtgate.domains.loader import DATA_DIR, load_judge

    return load_judge(DATA_DIR if name == "cards" else Path(name).expanduser())


def _build(kind: TierKind[Any], decl: TierDecl, context: BuildContext) -> Built:
    out = kind.build(decl.section, context.for_tier(decl.name))
    if out.tier.name != decl.name:
        raise ConfigError(
            f"{decl.where}: the {kind.name!r} kind built a tier named {out.tier.name!r}, not "
            f"{decl.name!r} (a kind names its tier context.name)"
        )
    return out


def _with_policies(
    tiers: dict[str, Tier],
    decls: list[TierDecl],
    kinds: dict[str, TierKind[Any]],
    r: ResilienceConfig,
) -> dict[str, Tier]:
    """Each tier in the policy its kind gives it, with its overrides; tiers whose policies
    share a group (one loaded model) share one limiter."""
    limiters: dict[str, ConcurrencyLimiter] = {}
    out = dict(tiers)
    for d in decls:
        policy = d.overrides.apply(kinds[d.name].policy(d.section, r), r)
        if policy is not None:
            out[d.name] = with_policy(tiers[d.name], policy, limiters)
    return out


async def warm_up(
    assembly: Assembly, budget_ms: float = 60_000.0, max_tokens: int = 16
) -> dict[str, str]:
    """Load and probe every tier (``Gate.warmup``); one bad tier never stops the others.
    Returns each tier's warm-up status ("ok" or what went wrong)."""
    gate = assembly.gate
    t0 = time.perf_counter()
    probe = Request(input="hello", max_tokens=max_tokens, delegate=False)
    await gate.warmup(probe, budget_ms=budget_ms)
    status = dict(gate.warmup_status)
    for name, st in status.items():
        if st != "ok":
            log.warning("warm-up of tier %s: %s", name, st)
    assembly.warm = status
    assembly.warmup_ms = (time.perf_counter() - t0) * 1000.0
    return status

"""Build a :class:`~rtgate.gate.Gate` from a :class:`~rtgate.config.loader.Config`.

The default chain, best first by quality: the cloud tier (a remote OpenAI-compatible model,
or, with none configured, the local model wrapped in the ``cloud-70b`` latency profile:
an *emulation*, labelled as such), the local model (llama.cpp, in process), then the
template table. Optional: an answer cache above the cloud tier (filled with the cloud
tier's answers; in process, or in Redis shared by the replicas) and an intent classifier
above the templates. The builders of each tier are in :mod:`rtgate.assembly.kinds`.

Unless ``[resilience] enabled = false``, the model tiers are wrapped before the gate is
built (:func:`resilience_policies`, :func:`~rtgate.resilience.wire.with_policy`): the local
tier behind a concurrency cap (shed past it), the cloud tier behind its own cap, a circuit
breaker (with a background health probe when it is remote) and a budget-aware retry.

:func:`warm_up` loads and probes every tier once at start-up and reports how each went.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgate.assembly import kinds as build
from rtgate.assembly.kinds import TierInfo, llama_threads
from rtgate.backends.base import Backend
from rtgate.config.loader import Config
from rtgate.core.errors import ConfigError
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.delegate.factory import make_queue
from rtgate.gate import Gate
from rtgate.gate.jobs import JobStore
from rtgate.resilience.admission import ConcurrencyLimiter
from rtgate.resilience.wire import TierPolicy, with_policy
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import EmulatedLatency
from rtgate.tiers.remember import RememberAnswers

__all__ = [
    "Assembly",
    "TierInfo",
    "assemble",
    "build_gate",
    "llama_threads",
    "resilience_policies",
    "warm_up",
]

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
        infos = []
        for t in gate.tiers:
            kind, label = "custom", type(t).__name__
            if isinstance(t, EmulatedLatency):
                kind, label = "emulated", f"{type(t.inner).__name__} as {t.profile.name}"
            infos.append(TierInfo(t.name, kind, t.quality, t.delegable, label))
        mode: CloudMode = "off"
        cloud = gate.by_name.get("cloud")
        if cloud is not None:
            mode = "emulated" if isinstance(cloud, EmulatedLatency) else "remote"
        return cls(gate, mode, infos)

    def describe(self) -> dict[str, Any]:
        return {
            "cloud_mode": self.cloud_mode,
            "tiers": [t.to_dict() for t in self.tiers],
            "notes": list(self.notes),
            "warm": dict(self.warm),
            "warmup_ms": self.warmup_ms,
        }


def build_gate(config: Config) -> Gate:
    """The gate for ``config`` (not started, not warm)."""
    return assemble(config).gate


def assemble(config: Config) -> Assembly:
    """Build every configured tier and the gate over them."""
    tiers: list[tuple[Tier, TierInfo]] = []
    priors: dict[str, Prior] = {}
    notes: list[str] = []
    if config.templates.enabled:
        tiers.append(build.templates(config))
    if config.classifier.enabled:
        tiers.append(build.classifier(config))
    cache = None
    closers: list[Callable[[], Awaitable[None]]] = []
    if config.cache.enabled:
        cache, info, stores = build.cache(config)
        tiers.append((cache, info))
        closers += [s.aclose for s in stores]
    backend: Backend | None = None
    if config.local.enabled or (config.cloud.enabled and not config.cloud.remote):
        backend = build.llama(config)
    if config.local.enabled:
        assert backend is not None
        tiers.append(build.local(config, backend))
    mode: CloudMode = "off"
    if config.cloud.enabled:
        if config.cloud.remote:
            tier, info = build.remote(config)
            mode = "remote"
            if config.cloud.ttft_p99_ms is not None:
                p = config.cloud.ttft_p99_ms
                priors[tier.name] = Prior(p, p + 20.0 * config.cloud.max_tokens)
        else:
            assert backend is not None
            tier, info = build.emulated(config, backend)
            mode = "emulated"
            notes.append(
                f"cloud tier is EMULATED: {info.label}. Configure [cloud] base_url and model "
                "(or RTGATE_CLOUD_BASE_URL / RTGATE_CLOUD_MODEL) for a real remote model."
            )
        if cache is not None:
            tier = RememberAnswers(tier, cache)
        tiers.append((tier, info))
    if not tiers:
        raise ConfigError(
            "no tier is enabled: enable at least one of templates, classifier, cache, local, cloud"
        )
    built = [t for t, _ in tiers]
    if config.resilience.enabled:
        policies = resilience_policies(config, {t.name for t in built}, mode)
        limiters: dict[str, ConcurrencyLimiter] = {}
        built = [
            with_policy(t, policies[t.name], limiters) if t.name in policies else t for t in built
        ]
    store = JobStore(config.gate.max_jobs)
    gate = Gate(
        built,
        config=config.gate_config(),
        queue=make_queue(config.delegation, store),
        store=store,
        priors=priors,
    )
    infos = sorted((i for _, i in tiers), key=lambda i: -i.quality)
    return Assembly(gate, mode, infos, notes, closers=closers)


def resilience_policies(
    config: Config, names: Collection[str], cloud_mode: CloudMode
) -> dict[str, TierPolicy]:
    """The ``[resilience]`` section as policies for the ``local`` and ``cloud`` tiers.

    The local tier has one slot per llama.cpp worker thread (``local_capacity``, default 1).
    The emulated cloud tier runs on the same model but is not in the local tier's group:
    it mostly runs delegated jobs, which should wait their turn in the model's queue rather
    than be shed by an inline request holding the slot. Only a remote cloud is probed.
    """
    r = config.resilience
    out: dict[str, TierPolicy] = {}
    if "local" in names:
        out["local"] = TierPolicy(capacity=r.local_capacity, group="llama")
    if "cloud" in names:
        out["cloud"] = r.cloud_policy(probe=cloud_mode == "remote")
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

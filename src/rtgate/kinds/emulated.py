"""The ``emulated`` kind: an embedded model wrapped in a named latency profile, standing in
for a model that is not there (``cloud-70b``: what a large remote model would feel like).

It is an emulation and says so (a note at start-up and in ``/healthz``). It runs on the
same loaded model as the ``llama`` tiers with the same model settings, but not behind
their limiter: it mostly runs delegated jobs, which should wait their turn in the model's
queue rather than be shed by an inline request holding the slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgate.core.settings import setting
from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind
from rtgate.kinds.llama import LlamaModel
from rtgate.resilience.settings import ResilienceConfig
from rtgate.resilience.wire import TierPolicy

__all__ = ["KIND", "EmulatedSection"]


@dataclass(slots=True)
class EmulatedSection(LlamaModel):
    """The model (as for ``llama``), the latency profile and the tier's settings."""

    profile: str = setting("cloud-70b", choices=("cloud-70b", "local-8b"))
    quality: int = 80
    max_tokens: int = setting(256, ge=1)
    system_prompt: str | None = None


def build(section: EmulatedSection, context: BuildContext) -> Built:
    from rtgate.tiers.emulated import PRESETS, EmulatedLatency
    from rtgate.tiers.llm import LLMTier

    profile = PRESETS[section.profile]
    inner = LLMTier(
        section.backend(context),
        f"{context.name}-inner",
        section.quality,
        delegable=True,
        system_prompt=section.system_prompt,
        max_tokens=section.max_tokens,
        style=section.style,  # type: ignore[arg-type]
    )
    tier = EmulatedLatency(
        inner, profile, name=context.name, quality=section.quality, delegable=True
    )
    ttft = profile.ttft
    label = (
        f"local {section.label} with the emulated {profile.name} latency profile "
        f"(TTFT p50 {ttft.p50:g} ms, p99 {ttft.p99:g} ms)"
    )
    context.note(
        f"{context.name} tier is EMULATED: {label}. For a real remote model, use a tier of "
        'kind "openai" (for the cloud tier: [cloud] base_url and model, or '
        "RTGATE_CLOUD_BASE_URL / RTGATE_CLOUD_MODEL)."
    )
    return Built(tier, TierInfo(tier.name, "emulated", tier.quality, True, label))


def policy(section: EmulatedSection, r: ResilienceConfig) -> TierPolicy:
    """The cloud policy, without a health probe: the model is local."""
    return r.cloud_policy(probe=False)


KIND = TierKind("emulated", EmulatedSection, build, policy)

"""The ``llama`` kind: an embedded GGUF model run by llama.cpp in process.

Tiers on one model (same file, context, threads and queue) share one backend: the model
is loaded once (:meth:`BuildContext.share`), and the tiers of the ``llama`` kind share one
concurrency limiter per model (``[resilience] local_capacity``, default 1 stream).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rtgate.backends.base import Backend
from rtgate.core.settings import setting
from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind
from rtgate.resilience.settings import ResilienceConfig
from rtgate.resilience.wire import TierPolicy

__all__ = ["KIND", "LlamaModel", "LlamaSection"]


@dataclass(slots=True)
class LlamaModel:
    """The model: a packaged one by name, or a GGUF file by ``path``."""

    model: str = setting("gemma3-270m", choices=("gemma3-270m", "smollm2"))
    path: str | None = None
    n_threads: int | None = setting(None, ge=1)  # None: all cores but one (the event loop's)
    n_ctx: int = setting(2048, ge=256)
    queue_size: int = setting(8, ge=1)
    style: str = setting("auto", choices=("auto", "chat", "completion"))

    @property
    def threads(self) -> int:
        """``n_threads``, or every core but one: the event loop needs one, and llama.cpp
        threads that must share a core slow down many times over."""
        if self.n_threads is not None:
            return self.n_threads
        return max(1, (os.cpu_count() or 2) - 1)

    @property
    def key(self) -> str:
        """What tiers on one loaded model have in common."""
        return f"llama:{self.path or self.model}:{self.n_ctx}:{self.threads}:{self.queue_size}"

    @property
    def label(self) -> str:
        return Path(self.path).name if self.path else self.model

    def backend(self, context: BuildContext) -> Backend:
        """The model's backend, shared by every tier on it."""
        from rtgate.backends.llamacpp import LlamaCppBackend

        def make() -> Backend:
            return LlamaCppBackend(
                Path(self.path).expanduser() if self.path else self.model,
                n_ctx=self.n_ctx,
                n_threads=self.threads,
                queue_size=self.queue_size,
            )

        return context.share(self.key, make)


@dataclass(slots=True)
class LlamaSection(LlamaModel):
    """The model and the tier answering with it."""

    max_tokens: int = setting(48, ge=1)
    quality: int = 50


def build(section: LlamaSection, context: BuildContext) -> Built:
    from rtgate.tiers.llm import LLMTier

    tier = LLMTier(
        section.backend(context),
        context.name,
        section.quality,
        max_tokens=section.max_tokens,
        style=section.style,  # type: ignore[arg-type]
    )
    label = f"llama.cpp {section.label} in process ({section.threads} threads)"
    return Built(tier, TierInfo(tier.name, "local", tier.quality, tier.delegable, label))


def policy(section: LlamaSection, r: ResilienceConfig) -> TierPolicy:
    """One stream per worker thread (``local_capacity``), shared by the model's tiers."""
    return TierPolicy(capacity=r.local_capacity, group=section.key)


KIND = TierKind("llama", LlamaSection, build, policy)

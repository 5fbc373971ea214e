"""The NPC game's tiers: templates for common lines, the local model for intents, and a
"cloud" tier (the local model behind an emulated 70B latency) for deeper lines later.

Order in the gate (by ``quality``): templates first (a hand-written reply to "follow me" is
as good as any model's, and a miss declines in microseconds), then the cloud tier (never
fits a frame-sized budget: skipped and run in the background as a delegated follow-up),
then the local model. All of them write the compact intent line ``action target | say``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier
from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency
from rtgate.tiers.llm import FewShot, LLMTier
from rtgate.tiers.templates import TemplateTable, TemplateTier

if TYPE_CHECKING:
    from rtgate.backends.llamacpp import LlamaCppBackend

__all__ = [
    "CLOUD_SHOTS",
    "LOCAL_SHOTS",
    "ModelTiers",
    "WarmLLMTier",
    "build_model_tiers",
    "template_tier",
]

_RULES = (
    "Villagers in a small game town answer the player with one line: "
    "action target | what they say. Actions: walk, talk, follow, work, flee, idle. "
    "Targets: well, market, forge, gate, home, player."
)

LOCAL_SHOTS = FewShot(
    system=_RULES,
    user_label="Player",
    agent_label="NPC",
    examples=(
        ("Meet me by the well at noon.", "walk well | I'll see you at the well."),
        ("Can you fix my sword?", "work forge | Bring it here, I'll heat the forge."),
        ("Come with me, quickly.", "follow player | Lead the way."),
        ("A dragon is over the hills!", "flee gate | Run for the gate!"),
        ("What's the news today?", "talk player | The baker's son is getting married."),
        ("Do you sell bread?", "walk market | Follow me to my stall."),
    ),
)
"""Short lines: the local model must finish an intent in a few frames."""

CLOUD_SHOTS = FewShot(
    system=_RULES + " They speak in two vivid sentences, full of local detail.",
    user_label="Player",
    agent_label="NPC",
    examples=(
        (
            "Meet me by the well at noon.",
            "walk well | Noon at the well, then. Mind the loose stones by the trough, "
            "the miller's boy nearly drowned there last spring.",
        ),
        (
            "What's the news today?",
            "talk player | The baker's son weds on Sunday, and half the town owes him "
            "money. Expect a loud feast and a quiet collection of debts.",
        ),
        (
            "Can you fix my sword?",
            "work forge | That edge has seen orc bone, I'd wager. Give me till sundown "
            "and it will sing again.",
        ),
    ),
)
"""Deeper lines for the follow-up: more tokens, more colour."""


class WarmLLMTier(LLMTier):
    """An :class:`LLMTier` for intents: its warm-up also runs one real generation, and the
    backend may finish a line after a first-piece budget.

    Loading and priming the prompt prefix is not enough: the first generation after them
    still pays for one-off allocations (190-730 ms measured here, against 60-100 ms for
    the next ones). The gate learns a tier's latency from its warm-up probe, so that probe
    must meet a warm model, or the tier predicts itself out of every frame-sized budget.
    """

    warm_line = "Good day to you."
    line_ms = 3_000.0
    """The backend's own deadline for a whole line (see :meth:`stream`)."""

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        """As :meth:`LLMTier.stream`, but the backend may finish the line past ``budget``.

        With ``scope="first_token"`` the budget bounds only the first piece, yet the
        llama.cpp backend stops generating at the budget's deadline, which would cut every
        line short. The gate still cuts this tier off (cancelling the backend) when its
        first piece is late, and limits the gaps between pieces after it.
        """
        own = Budget(max(budget.left_ms(), self.line_ms), clock=budget.clock)
        async for piece in super().stream(request, own):
            yield piece

    async def warmup(self) -> None:
        await super().warmup()
        probe = Request(self.warm_line, max_tokens=self.max_tokens)
        with contextlib.suppress(Declined):
            async for _ in self.stream(probe, Budget(60_000.0)):
                pass


def template_tier(path: str | Path | None = None, quality: int = 90) -> TemplateTier:
    """The common-lines table (``data/templates.json`` by default)."""
    if path is None:
        ref = resources.files("rtgate.apps.npc").joinpath("data/templates.json")
        with resources.as_file(ref) as p:
            table = TemplateTable.from_file(p, max_keyword_chars=60)
    else:
        table = TemplateTable.from_file(path, max_keyword_chars=60)
    return TemplateTier(table, name="template", quality=quality)


@dataclass(slots=True)
class ModelTiers:
    """The model-backed tiers and the backends under them (for stats)."""

    local: Tier
    cloud: Tier
    backends: dict[str, LlamaCppBackend]


def build_model_tiers(
    model: str = "smollm2",
    *,
    local_tokens: int = 20,
    cloud_tokens: int = 40,
    local_threads: int = 1,
    cloud_threads: int = 1,
    seed: int = 0,
) -> ModelTiers:
    """A local tier and an emulated-cloud tier on the same GGUF model.

    Each gets its own :class:`LlamaCppBackend` (its own worker thread and llama threads),
    so a long follow-up never queues the next intent behind it. One llama thread each by
    default: on 2 busy cores, 2 threads per model spin-wait against each other (local
    TTFT p50 312 ms with 2 threads against 59 ms with 1, measured here).
    """
    from rtgate.backends.llamacpp import LlamaCppBackend

    local_be = LlamaCppBackend(model, n_threads=local_threads, n_ctx=1024, name=f"{model}:local")
    cloud_be = LlamaCppBackend(model, n_threads=cloud_threads, n_ctx=1024, name=f"{model}:cloud")
    local = WarmLLMTier(
        local_be,
        name="local",
        quality=50,
        few_shot={"en": LOCAL_SHOTS},
        max_tokens=local_tokens,
        style="completion",
    )
    deep = WarmLLMTier(
        cloud_be,
        name="cloud",
        quality=80,
        delegable=True,
        few_shot={"en": CLOUD_SHOTS},
        max_tokens=cloud_tokens,
        style="completion",
    )
    cloud = EmulatedLatency(deep, CLOUD_70B, name="cloud", seed=seed)
    return ModelTiers(local, cloud, {"local": local_be, "cloud": cloud_be})

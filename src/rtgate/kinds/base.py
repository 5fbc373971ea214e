"""What a tier kind is: its settings, how it builds a tier, and what it gets to build it.

A kind is one :class:`TierKind` object in one module per vendor, found through the
``rtgate.tiers`` entry points (:mod:`rtgate.kinds.registry`)::

    @dataclass(slots=True)
    class FaqSection:                     # the keys of [tiers.NAME] for this kind
        file: str = "faq.json"
        quality: int = setting(70, ge=0)

    def build(section: FaqSection, context: BuildContext) -> Built:
        tier = FaqTier.from_file(section.file, name=context.name, quality=section.quality)
        return Built(tier, TierInfo(tier.name, "faq", tier.quality, False, section.file))

    KIND = TierKind("faq", FaqSection, build)

The gate, the config loader and the assembly never name a kind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from rtgate.core.latency import Prior
from rtgate.delegate.factory import DelegationSettings
from rtgate.resilience.settings import ResilienceConfig
from rtgate.resilience.wire import TierPolicy
from rtgate.tiers.base import Tier

__all__ = ["BuildContext", "Built", "TierInfo", "TierKind", "no_policy"]

S = TypeVar("S")
T = TypeVar("T")
Closer = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TierInfo:
    """How a tier was built, for start-up logs and ``/healthz``."""

    name: str
    kind: str  # for people: template, classifier, cache, local, remote, emulated, ...
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


@dataclass(slots=True)
class Built:
    """A built tier, how to describe it, and the latency to assume before it has answered."""

    tier: Tier
    info: TierInfo
    prior: Prior | None = None


@dataclass(slots=True)
class BuildContext:
    """What a kind's ``build`` gets besides its section: the tier's ``name``, the
    delegation settings (shared services' defaults), and a place to share objects between
    tiers (one model loaded once for two tiers), register closers and notes, and wrap the
    other tiers once all are built (a cache remembering their answers)."""

    name: str = ""
    delegation: DelegationSettings = field(default_factory=DelegationSettings)
    shared: dict[Hashable, Any] = field(default_factory=dict)
    closers: list[Closer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wrappers: list[tuple[str, Callable[[Tier], Tier]]] = field(default_factory=list)

    def for_tier(self, name: str) -> BuildContext:
        """The context of tier ``name``: the same shared state."""
        return replace(self, name=name)

    def share(self, key: Hashable, make: Callable[[], T]) -> T:
        """The object shared under ``key``, made by ``make()`` the first time."""
        if key not in self.shared:
            self.shared[key] = make()
        out: T = self.shared[key]
        return out

    def on_close(self, close: Closer) -> None:
        """Call ``close()`` when the assembly closes (what the tier uses but does not own)."""
        self.closers.append(close)

    def note(self, text: str) -> None:
        """A line for the start-up log and ``/healthz`` notes."""
        self.notes.append(text)

    def wrap_others(self, wrap: Callable[[Tier], Tier]) -> None:
        """Once every tier is built, replace each other tier ``t`` by ``wrap(t)`` (return
        ``t`` to leave it as it is)."""
        self.wrappers.append((self.name, wrap))


def no_policy(section: Any, resilience: ResilienceConfig) -> TierPolicy | None:
    """No resilience wrapper (a tier that answers from memory)."""
    return None


@dataclass(frozen=True, slots=True)
class TierKind(Generic[S]):
    """A kind of tier: its name in ``kind = "..."``, its section type (a dataclass of
    :func:`~rtgate.core.settings.setting` fields), how to build a tier from a section, and
    the resilience policy its tiers get by default (a ``[tiers.NAME]`` table may override
    ``capacity``, ``breaker``, ``probe`` and ``retries``), and the rules that involve
    several keys of a section, checked when the configuration is loaded (raise
    :class:`~rtgate.core.errors.ConfigError`)."""

    name: str
    section: type[S]
    build: Callable[[S, BuildContext], Built]
    policy: Callable[[S, ResilienceConfig], TierPolicy | None] = no_policy
    check: Callable[[S], None] | None = None

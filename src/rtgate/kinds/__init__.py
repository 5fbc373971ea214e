"""Tier kinds: what plugs into the assembly. One module per vendor or kind of tier, each
with one :class:`~rtgate.kinds.base.TierKind` object: its config section (a dataclass of
settings) and how to build a tier from it. Kinds are found through the ``rtgate.tiers``
entry points (:mod:`rtgate.kinds.registry`); the built-in ones are ``templates``,
``classifier``, ``cache``, ``llama``, ``openai`` and ``emulated``.

A new vendor is a new module and an entry point: the gate, the config loader and the
assembly never name a kind (docs/architecture.md, "Adding a tier kind or a vendor").
"""

from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind, no_policy
from rtgate.kinds.registry import GROUP, Registry

__all__ = ["GROUP", "BuildContext", "Built", "Registry", "TierInfo", "TierKind", "no_policy"]

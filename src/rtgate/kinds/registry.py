"""The registry of tier kinds: the ``rtgate.tiers`` entry points of every installed
package (as apps' routers are found through ``rtgate.routers``), over the built-in table.

A kind is registered by an entry point naming its :class:`~rtgate.kinds.base.TierKind`::

    [project.entry-points."rtgate.tiers"]
    faq = "my_package.faq_kind:KIND"

The built-in kinds are registered the same way in rtgate's own ``pyproject.toml``;
:data:`BUILTIN` lists them too, so they are found when the installed metadata is missing
or older than the source (an editable install made before the entry points existed).
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rtgate.core.errors import ConfigError
from rtgate.kinds.base import TierKind

__all__ = ["BUILTIN", "GROUP", "Registry"]

log = logging.getLogger("rtgate.kinds.registry")

GROUP = "rtgate.tiers"

BUILTIN = {
    "cache": "rtgate.kinds.cache:KIND",
    "classifier": "rtgate.kinds.classifier:KIND",
    "emulated": "rtgate.kinds.emulated:KIND",
    "llama": "rtgate.kinds.llama:KIND",
    "openai": "rtgate.kinds.openai:KIND",
    "templates": "rtgate.kinds.templates:KIND",
}


@dataclass(frozen=True, slots=True)
class Registry:
    """The kinds found once (:meth:`discover`): each name with the places it may be
    loaded from, the installed entry point first, the built-in table last."""

    specs: dict[str, tuple[str, ...]]

    @classmethod
    def discover(cls) -> Registry:
        specs: dict[str, list[str]] = {}
        for ep in entry_points(group=GROUP):
            specs.setdefault(ep.name, []).append(ep.value)
        for name, value in BUILTIN.items():
            if value not in specs.setdefault(name, []):
                specs[name].append(value)
        return cls({name: tuple(values) for name, values in specs.items()})

    @property
    def names(self) -> list[str]:
        return sorted(self.specs)

    def get(self, name: str) -> TierKind[Any]:
        """The kind called ``name``; a :class:`ConfigError` naming the known kinds if there
        is none, or saying why it cannot be loaded."""
        values = self.specs.get(name)
        if not values:
            close = difflib.get_close_matches(name, self.names, n=1)
            maybe = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown tier kind {name!r}{maybe}; known kinds: {', '.join(self.names)}"
            )
        errors = []
        for value in values:
            try:
                kind = EntryPoint(name=name, value=value, group=GROUP).load()
            except (ImportError, AttributeError) as e:  # a stale or broken entry point
                errors.append(f"{value}: {type(e).__name__}: {e}")
                continue
            if isinstance(kind, TierKind) and kind.name == name:
                if errors:
                    log.warning("tier kind %s: skipped %s", name, "; ".join(errors))
                return kind
            errors.append(f"{value}: not a TierKind named {name!r}")
        raise ConfigError(f"tier kind {name!r} cannot be loaded: {'; '.join(errors)}")

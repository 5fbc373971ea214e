"""The ``templates`` kind: canned answers matched by prefix and keywords, in microseconds."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind

__all__ = ["KIND", "TemplatesSection"]


@dataclass(slots=True)
class TemplatesSection:
    """A template table (default: the packaged credit-card domain)."""

    file: str | None = None
    quality: int | None = None


def build(section: TemplatesSection, context: BuildContext) -> Built:
    from rtgate.tiers.templates import TemplateTier

    path = section.file or str(files("rtgate.domains").joinpath("cards/templates.json"))
    kwargs: dict[str, Any] = {} if section.quality is None else {"quality": section.quality}
    tier = TemplateTier.from_file(Path(path).expanduser(), name=context.name, **kwargs)
    label = f"{len(tier.table)} templates from {Path(path).name}"
    return Built(tier, TierInfo(tier.name, "template", tier.quality, tier.delegable, label))


KIND = TierKind("templates", TemplatesSection, build)

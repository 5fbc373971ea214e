"""The ``classifier`` kind: an intent classifier answering with canned replies, from a
domain folder (``corpus.jsonl``, ``intents.json``, trained models)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rtgate.core.settings import setting
from rtgate.kinds.base import BuildContext, Built, TierInfo, TierKind

__all__ = ["KIND", "ClassifierSection"]


@dataclass(slots=True)
class ClassifierSection:
    """The domain folder (default: the credit-card domain shipped with the autocomplete
    app), the model (``ngram`` or ``e5``) and the confidence it must reach to answer."""

    data_dir: str | None = None
    model: str = setting("ngram", choices=("ngram", "e5"))
    threshold: float = setting(0.5, ge=0, le=1)
    quality: int = 20


def build(section: ClassifierSection, context: BuildContext) -> Built:
    from rtgate.domains.loader import DATA_DIR, build_answers, load_classifier
    from rtgate.tiers.classifier import ClassifierTier

    data_dir = Path(section.data_dir).expanduser() if section.data_dir else DATA_DIR
    model = load_classifier(section.model, data_dir=data_dir)  # type: ignore[arg-type]
    tier = ClassifierTier(
        model,
        build_answers(data_dir),
        threshold=section.threshold,
        quality=section.quality,
        name=context.name,
    )
    label = f"{section.model} intent classifier on {data_dir.name}/ (p >= {section.threshold:g})"
    return Built(tier, TierInfo(tier.name, "classifier", tier.quality, tier.delegable, label))


KIND = TierKind("classifier", ClassifierSection, build)

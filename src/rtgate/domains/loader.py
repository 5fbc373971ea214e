"""The credit-card domain shipped as package data, and loaders for it.

``cards/`` holds ``corpus.jsonl`` (labelled customer queries, Chinese and English),
``templates.json`` (autocomplete prefixes and keywords), ``intents.json`` (labels and
canned replies) and two trained intent models (``intent-ngram.npz``, ``intent-e5.npz``,
trained on the whole corpus by ``rtgate intents train``). A model whose recorded corpus
digest differs from the corpus is stale: :func:`load_classifier` retrains it in memory.
Another domain is the same four files in another folder (``data_dir=``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from rtgate.core.errors import ConfigError
from rtgate.models.embeddings import Embedder
from rtgate.tiers.classifier import IntentAnswers, IntentClassifier
from rtgate.tiers.embed_classifier import EmbeddingIntentClassifier
from rtgate.tiers.intents import Example, load_examples
from rtgate.tiers.templates import TemplateTable

__all__ = [
    "DATA_DIR",
    "INTENTS",
    "build_answers",
    "corpus_digest",
    "load_classifier",
    "load_corpus",
    "load_replies",
    "load_templates",
    "model_path",
]

DATA_DIR = Path(__file__).parent / "cards"
INTENTS = (
    "points_exchange", "limit_increase", "bill_query", "repayment", "installment",
    "card_loss", "annual_fee", "activation", "dispute", "cross_border", "password",
    "cash_advance", "complex",
)  # fmt: skip
ModelKind = Literal["ngram", "e5"]


def load_corpus(data_dir: Path = DATA_DIR) -> list[Example]:
    return load_examples(data_dir / "corpus.jsonl", intents=INTENTS)


def corpus_digest(data_dir: Path = DATA_DIR) -> str:
    """SHA-256 of the corpus file: a trained model records the corpus it learned from."""
    return hashlib.sha256((data_dir / "corpus.jsonl").read_bytes()).hexdigest()


def load_templates(data_dir: Path = DATA_DIR, **kwargs: Any) -> TemplateTable:
    return TemplateTable.from_file(data_dir / "templates.json", intents=INTENTS, **kwargs)


def load_replies(data_dir: Path = DATA_DIR) -> dict[str, dict[str, str]]:
    """``{intent: {lang: reply}}`` from ``intents.json``."""
    path = data_dir / "intents.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))["intents"]
        return {
            intent: {lang: v["reply"] for lang, v in langs.items() if "reply" in v}
            for intent, langs in raw.items()
        }
    except (OSError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: malformed intents file: {e}") from e


def build_answers(data_dir: Path = DATA_DIR) -> IntentAnswers:
    """Canned replies; template candidates and the corpus as suggestions."""
    suggestions = [c for t in load_templates(data_dir).templates for c in t.candidates]
    return IntentAnswers(load_replies(data_dir), load_corpus(data_dir), suggestions)


def model_path(kind: ModelKind, data_dir: Path = DATA_DIR) -> Path:
    return data_dir / f"intent-{kind}.npz"


def load_classifier(
    kind: ModelKind = "ngram",
    *,
    data_dir: Path = DATA_DIR,
    embedder: Embedder | None = None,
) -> IntentClassifier | EmbeddingIntentClassifier:
    """The shipped model, or one trained now when the file is missing or stale."""
    path, digest = model_path(kind, data_dir), corpus_digest(data_dir)
    model: IntentClassifier | EmbeddingIntentClassifier
    if path.exists():
        model = IntentClassifier.load(path) if kind == "ngram" else (
            EmbeddingIntentClassifier.load(path, embedder))  # fmt: skip
        if model.meta.get("corpus_sha256") == digest:
            return model
    return train_classifier(kind, data_dir=data_dir, embedder=embedder)


def train_classifier(
    kind: ModelKind,
    examples: list[Example] | None = None,
    *,
    data_dir: Path = DATA_DIR,
    embedder: Embedder | None = None,
) -> IntentClassifier | EmbeddingIntentClassifier:
    """Train on ``examples`` (default: the whole corpus, recording its digest)."""
    rows = load_corpus(data_dir) if examples is None else examples
    model: IntentClassifier | EmbeddingIntentClassifier
    if kind == "ngram":
        model = IntentClassifier.train(rows)
    else:
        model = EmbeddingIntentClassifier.train(rows, embedder=embedder)
    if examples is None:
        model.meta["corpus_sha256"] = corpus_digest(data_dir)
    return model

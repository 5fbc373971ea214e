"""A text end-of-turn model trained on how callers go on (#17, session 12).

The local model's next-token end mass (:class:`~rtgate.apps.voice.eot.LMEndOfTurn`) was
never trained for this job: it ranks a statement's end above a pause inside the turn at
ROC AUC 0.66-0.83 and a question's not at all. :class:`TextEndOfTurn` is a logistic
regression on character n-grams, fitted on caller turns split at the places callers pause
(``data/turns_train.json``: every prefix at a part boundary is "goes on", every whole turn
"finished") and on the whole transcripts of the telecom tuning calls (finished). The input
is made to look like what Whisper gives at a pause: all punctuation dropped (tiny.en ends
nearly every partial with "." or "?", base almost never writes a comma, so punctuation
separates nothing), English lower-cased. Features: character 1-3-grams of each word, and
the text's ending (the last 1-4 characters, the last one and two English words) and its
opening, marked apart, since where a clause ends says most. One score is a dictionary
look-up per n-gram and a dot product: tens of microseconds, no thread needed.

The fitted model ships as ``data/eot-text.npz`` with the SHA-256 of its training data;
``python -m rtgate.apps.voice.eot_text`` refits it (needs scikit-learn, the ``ml`` extra).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.eot import EndOfTurn
from rtgate.core.errors import ConfigError, InvalidRequest
from rtgate.tiers._linear import load_npz, save_npz

__all__ = [
    "FORMAT",
    "ByCue",
    "TextEndOfTurn",
    "TurnExample",
    "as_heard",
    "data_digest",
    "features",
    "model_path",
    "train",
    "training_examples",
]

FORMAT = "rtgate.eot-text/1"
_CJK = re.compile(r"[\u3400-\u9fff]")
_PUNCT = re.compile(r"[^\w\s'\u3400-\u9fff]+")  # everything but letters, digits, ' and CJK
_SPACES = re.compile(r"\s+")


def _voice_data() -> Path:
    from rtgate.apps.voice.packaged import data_path

    return data_path("turns_train.json")


def _telecom_dir() -> Path:
    from rtgate.domains.loader import TELECOM_DIR

    return TELECOM_DIR


def model_path() -> Path:
    """Where the fitted model ships."""
    from rtgate.apps.voice.packaged import data_path

    return data_path("eot-text.npz")


def training_files() -> list[Path]:
    """The data the model is fitted on (nothing of an evaluation or validation set)."""
    tel = _telecom_dir()
    return [_voice_data(), tel / "calls-tune.jsonl", tel / "calls-tune2.jsonl"]


def data_digest(files: Sequence[Path] | None = None) -> str:
    """SHA-256 over the training files, in order."""
    h = hashlib.sha256()
    for path in files or training_files():
        h.update(path.read_bytes())
    return h.hexdigest()


def as_heard(text: str, lang: str) -> str:
    """``text`` as the model reads it: NFKC, no punctuation at all, English lower-cased,
    Mandarin without spaces (what Whisper's partial at a pause looks like, minus its
    arbitrary final mark)."""
    t = unicodedata.normalize("NFKC", text).replace("’", "'")
    t = _PUNCT.sub(" ", t)
    t = _SPACES.sub(" ", t).strip().lower()
    return t.replace(" ", "") if lang == "zh" or _CJK.search(t) else t


def features(heard: str) -> list[str]:
    """The n-grams of an :func:`as_heard` text: character 1-3-grams of each word, its
    ending (last 1-4 characters; last word and two words) and opening."""
    if not heard:
        return []
    out: list[str] = []
    words = heard.split(" ")
    for w in words:
        padded = f" {w} "
        for n in (1, 2, 3):
            out.extend("g" + padded[i : i + n] for i in range(len(padded) - n + 1))
    for n in (1, 2, 3, 4):
        if len(heard) >= n:
            out.append("$" + heard[-n:])
    out.append("^" + heard[:2])
    if len(words) > 1:
        out.append("w$" + words[-1])
        out.append("w$" + " ".join(words[-2:]))
        out.append("w^" + words[0])
    units = len(heard) if _CJK.search(heard) else len(words)
    out.append(f"len{min(units // 3, 8) if _CJK.search(heard) else min(units, 12)}")
    return out


@dataclass(frozen=True, slots=True)
class TurnExample:
    """A caller's words so far, and whether the turn was over there."""

    text: str
    lang: str
    done: bool


def _turn_examples(src: dict[str, Any]) -> Iterable[TurnExample]:
    for lang in ("zh", "en"):
        sep = "" if lang == "zh" else " "
        for item in src.get(lang, {}).get("turns", []):
            parts = [str(p) for p in item["parts"]]
            for k in range(1, len(parts)):
                yield TurnExample(sep.join(parts[:k]), lang, False)
            yield TurnExample(sep.join(parts), lang, True)


def training_examples(files: Sequence[Path] | None = None) -> list[TurnExample]:
    """Prefixes at part boundaries (goes on) and whole turns (finished) of the turn files
    (``.json``), and whole transcripts (finished) of the call files (``.jsonl``)."""
    out: list[TurnExample] = []
    for path in files or training_files():
        try:
            raw = path.read_text(encoding="utf-8")
            if path.suffix == ".json":
                out.extend(_turn_examples(json.loads(raw)))
                continue
            for line in raw.splitlines():
                if line.strip() and not line.startswith("#"):
                    row = json.loads(line)
                    out.append(TurnExample(str(row["text"]), str(row["lang"]), True))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise InvalidRequest(f"{path}: not a turn or call file ({e})") from e
    return out


def _noisy(ex: TurnExample, rng: random.Random) -> TurnExample:
    """An ASR-like copy: one unit (a character, an English word) dropped or doubled."""
    heard = as_heard(ex.text, ex.lang)
    units: list[str] = list(heard) if ex.lang == "zh" else heard.split(" ")
    if len(units) < 4:
        return ex
    i = rng.randrange(1, len(units) - 1)  # never the last: the ending is what it reads
    if rng.random() < 0.5:
        del units[i]
    else:
        units.insert(i, units[i])
    return TurnExample(("" if ex.lang == "zh" else " ").join(units), ex.lang, ex.done)


class TextEndOfTurn:
    """:class:`~rtgate.apps.voice.eot.EndOfTurn` from the fitted n-gram logistic model.

    Args:
        vocabulary: the n-grams, in coefficient order.
        coef: one weight per n-gram (of an L2-normalised binary row).
        intercept: the bias.
        meta: what the file says about how it was fitted.
    """

    blocking = False

    def __init__(
        self,
        vocabulary: Sequence[str],
        coef: np.ndarray[Any, np.dtype[np.float64]],
        intercept: float,
        meta: dict[str, Any] | None = None,
    ) -> None:
        if coef.shape != (len(vocabulary),):
            raise ConfigError("eot-text: vocabulary and coefficients disagree in size")
        self._vocab = {g: i for i, g in enumerate(vocabulary)}
        self.coef = coef
        self.intercept = float(intercept)
        self.meta = dict(meta or {})

    def score(self, text: str, lang: str) -> float | None:
        """P(the turn is finished) after ``text``; ``None`` for an empty text."""
        heard = as_heard(text, lang)
        grams = set(features(heard))
        if not grams:
            return None
        get = self._vocab.get
        ids = [j for g in grams if (j := get(g)) is not None]
        z = self.intercept + float(self.coef[ids].sum()) / math.sqrt(len(grams))
        return 1.0 / (1.0 + math.exp(-z))

    async def p_end(self, text: str, lang: str) -> float | None:
        return self.score(text, lang)

    def save(self, path: str | Path) -> None:
        vocab = sorted(self._vocab, key=self._vocab.__getitem__)
        arrays = {
            "vocab": np.asarray(vocab, dtype=np.str_),
            "coef": self.coef,
            "intercept": np.asarray([self.intercept]),
        }
        save_npz(path, FORMAT, arrays, self.meta)

    @classmethod
    def load(cls, path: str | Path | None = None) -> TextEndOfTurn:
        """The shipped model (or the file at ``path``); ``ConfigError`` if not one."""
        path = path or model_path()
        arrays, meta = load_npz(path, FORMAT)
        try:
            vocab = [str(g) for g in arrays["vocab"].tolist()]
            coef = np.asarray(arrays["coef"], dtype=np.float64)
            intercept = float(arrays["intercept"][0])
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError(f"{path}: eot-text model lacks {e}") from e
        return cls(vocab, coef, intercept, meta)


class ByCue:
    """:class:`~rtgate.apps.voice.eot.EndOfTurn` that asks one model about questions and
    another about everything else (by :func:`rtgate.apps.voice.turns.cue`): the trained
    text model on questions, the local model on clauses (``eot="lm+text"``)."""

    def __init__(self, clause: EndOfTurn, question: EndOfTurn) -> None:
        self.clause = clause
        self.question = question

    async def p_end(self, text: str, lang: str) -> float | None:
        from rtgate.apps.voice.turns import cue

        model = self.question if cue(text) == "question" else self.clause
        return await model.p_end(text, lang)


def train(
    examples: Sequence[TurnExample] | None = None,
    *,
    c: float = 1.0,
    noise_copies: int = 1,
    seed: int = 0,
) -> TextEndOfTurn:
    """Fit on ``examples`` (default: :func:`training_examples`, recording their digest);
    ``noise_copies`` ASR-like copies of each. Needs scikit-learn; deterministic."""
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    base = list(examples) if examples is not None else training_examples()
    rng = random.Random(seed)
    rows = base + [_noisy(ex, rng) for _ in range(noise_copies) for ex in base]
    grams = [sorted(set(features(as_heard(ex.text, ex.lang)))) for ex in rows]
    vocab = sorted({g for gs in grams for g in gs})
    index = {g: i for i, g in enumerate(vocab)}
    indptr: list[int] = [0]
    indices: list[int] = []
    data: list[float] = []
    for gs in grams:
        indices.extend(index[g] for g in gs)
        data.extend([1.0 / math.sqrt(len(gs))] * len(gs))
        indptr.append(len(indices))
    x = csr_matrix((data, indices, indptr), shape=(len(rows), len(vocab)))
    y = np.asarray([ex.done for ex in rows], dtype=np.int64)
    clf = LogisticRegression(C=c, class_weight="balanced", max_iter=2000)
    clf.fit(x, y)
    meta: dict[str, Any] = {
        "n_examples": len(base),
        "n_done": sum(ex.done for ex in base),
        "c": c,
        "noise_copies": noise_copies,
        "seed": seed,
    }
    if examples is None:
        meta["data_sha256"] = data_digest()
    coef = np.asarray(clf.coef_[0], dtype=np.float64)
    return TextEndOfTurn(vocab, coef, float(clf.intercept_[0]), meta)


def main() -> None:  # pragma: no cover - refits the shipped file
    model = train()
    model.save(model_path())
    print(f"wrote {model_path()} ({model.meta['n_examples']} examples, "
          f"data {model.meta['data_sha256'][:12]})")  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    main()

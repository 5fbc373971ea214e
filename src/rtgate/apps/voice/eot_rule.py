"""One end-of-turn decision over time: speak at silence ``t`` if ``score(t) >= bar`` (#17,
session 15).

The word rules of :class:`~rtgate.apps.voice.turns.TurnRules` wait 160 ms after a question
(and cut in when the caller goes on after a complete first question) and 1.2 s after a
clause or on the timeout (so half the turns wait 1.2 s). This is one fitted decision in
their place: a logistic model of P(the turn has ended) from what turn-taking knows at a
silence (what the words say, :func:`~rtgate.apps.voice.turns.text_class` of the covering
partial; the trained text model's P(end) of it; the language; how long the silence is),
checked at the silences of :data:`CHECK_MS`, each against one ``bar``. It speaks at the
first check whose score reaches the bar, and at ``timeout_ms`` whatever the score (a turn
the model never finds finished still gets an answer).

The weights are a small JSON file (``data/eot-rule.json``) fitted by
``python -m rtgate.apps.voice.eot_rule_fit FEATURES.json ...`` (:mod:`.eot_rule_fit`) on the rows of
``scripts/voice_eot_features.py`` (pauses inside turns: the caller goes on; turns' ends:
finished); the bar is the one with the shortest median wait at the ends whose pauses cut
are no more than the word rules' on the same rows. Numpy only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import ConfigError

__all__ = [
    "CHECK_MS",
    "FEATURES",
    "FORMAT",
    "EotRule",
    "Place",
    "features",
    "rule_path",
]

FORMAT = "rtgate.eot-rule/1"
CHECK_MS: tuple[float, ...] = (64.0, 150.0, 300.0, 450.0, 600.0, 900.0)
FEATURES: tuple[str, ...] = (
    "ask",  # ends on "?" or a final question particle
    "question",  # a question by its opening or a wh-word
    "clause",  # a complete-looking clause
    "open",  # trailing off, a subordinate clause waiting, or no covering words
    "p_text",  # the trained text model's P(end) of the covering partial (0.5 when none)
    "en",  # English (else Mandarin)
    "log_silence",  # log2(silence / 64 ms)
    "en_log_silence",
    "ask_log_silence",
    "question_p_text",
)
FloatArray = npt.NDArray[np.float64]


def rule_path() -> Path:
    from rtgate.apps.voice.packaged import data_path

    return data_path("eot-rule.json")


@dataclass(frozen=True, slots=True)
class Place:
    """What turn-taking knows at one silence: ``text`` the covering partial's class (one of
    ``ask``, ``question``, ``clause``, ``open``), ``p_text`` the text model's score of it."""

    text: str
    p_text: float | None
    lang: str
    silence_ms: float


def features(place: Place) -> FloatArray:
    """The feature row of :data:`FEATURES` for ``place``."""
    cls = {k: float(place.text == k) for k in ("ask", "question", "clause", "open")}
    if place.text not in cls:  # "sure"/"complete" (the local model's view): a clause
        cls["clause"] = 1.0
    p = 0.5 if place.p_text is None else place.p_text
    en = float(place.lang == "en")
    ls = math.log2(max(place.silence_ms, 1.0) / 64.0)
    row = [cls["ask"], cls["question"], cls["clause"], cls["open"], p, en, ls, en * ls,
           cls["ask"] * ls, cls["question"] * p]  # fmt: skip
    return np.asarray(row, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class EotRule:
    """``P(end) = sigmoid(intercept + coef . features)``; speak at the first of ``checks``
    where it reaches ``bar``, or at ``timeout_ms``."""

    coef: tuple[float, ...]
    intercept: float
    bar: float
    checks: tuple[float, ...] = CHECK_MS
    timeout_ms: float = 1200.0
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.coef) != len(FEATURES):
            raise ConfigError(f"eot-rule: {len(self.coef)} weights for {len(FEATURES)} features")

    def p_end(self, place: Place) -> float:
        z = self.intercept + float(np.dot(np.asarray(self.coef), features(place)))
        return 1.0 / (1.0 + math.exp(-z))

    def speaks(self, place: Place) -> bool:
        """Whether to speak now: the silence has reached a check whose score reaches the
        bar (the score at the latest check passed), or the timeout."""
        if place.silence_ms >= self.timeout_ms:
            return True
        passed = [c for c in self.checks if c <= place.silence_ms]
        if not passed:
            return False
        at = Place(place.text, place.p_text, place.lang, passed[-1])
        return self.p_end(at) >= self.bar

    def wait_ms(self, text: str, p_text: float | None, lang: str) -> float:
        """Silence after which it speaks, the words staying as they are."""
        for c in self.checks:
            if self.p_end(Place(text, p_text, lang, c)) >= self.bar:
                return c
        return self.timeout_ms

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "features": list(FEATURES), "coef": list(self.coef),
                "intercept": self.intercept, "bar": self.bar, "checks": list(self.checks),
                "timeout_ms": self.timeout_ms, "meta": dict(self.meta)}  # fmt: skip

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path | None = None) -> EotRule:
        """The shipped rule (or the file at ``path``); ``ConfigError`` if not one."""
        path = Path(path) if path is not None else rule_path()
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path}: not a readable eot-rule file: {e}") from e
        if d.get("format") != FORMAT or tuple(d.get("features", ())) != FEATURES:
            raise ConfigError(f"{path}: not an {FORMAT} file with these features")
        return cls(tuple(float(x) for x in d["coef"]), float(d["intercept"]), float(d["bar"]),
                   tuple(float(x) for x in d["checks"]), float(d["timeout_ms"]),
                   dict(d.get("meta", {})))  # fmt: skip

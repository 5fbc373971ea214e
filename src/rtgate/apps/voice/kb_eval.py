"""The voice agent's first answers on caller transcripts, and fitting what decides them.

Caller transcripts are JSON Lines ``{"text", "lang", "kind", "topic", "asr"?}``: ``kind``
``simple`` (``topic`` an intent id), ``multi`` (``topic`` a list of them) or ``ood``
(``topic`` null); ``asr`` marks a line written with recogniser-like errors. The telecom
domain ships six sets: ``calls-tune.jsonl``, ``calls-val.jsonl`` and ``calls-tune2.jsonl``
(the judge is fitted on them, and the semantic reader learns them; ``val`` was the first
held-out set, measured once before it was used; ``tune2`` is a second author's) and
``calls-eval.jsonl``, ``calls-eval2.jsonl`` and ``calls-eval3.jsonl`` (never fitted on;
played, then the operating point picked on them: :data:`PICKED_ON`; ``eval2`` and ``eval3``
by authors who never saw the project, ``eval3`` blind until session 18).

:func:`evaluate` runs each line through :meth:`KnowledgeBase.reply` (the decision the
agent makes) and reports, per set and language: the share of first answers on the
caller's topic (:func:`on_topic`), the multi-part and out-of-domain asks that got the big
model's follow-up, and the simple asks answered from the knowledge base without one.

:func:`build` (``rtgate voice kb build``) trains the domain's intent and scope
classifiers on its corpus and fits its judge and thresholds on the tuning calls (out of
fold, 5 folds).

Run: ``python -m rtgate.apps.voice.kb_eval --json out/kb.json`` or ``rtgate voice kb eval``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtgate.core.errors import ConfigError
from rtgate.domains.corrections import Corrections
from rtgate.domains.knowledge import KnowledgeBase, read_entries, shipped, units
from rtgate.domains.loader import (
    TELECOM_DIR,
    domain_intents,
    familiarity,
    json_lines,
    judge_path,
    load_semantic_scope,
    model_path,
    scope_path,
    semantic_scope_path,
    set_file,
    train_classifier,
    train_scope,
    vocabulary,
)
from rtgate.tiers.answerability import (
    CalibratedJudge,
    expected_calibration_error,
    feature_names,
    fit_judge,
    reliability,
)
from rtgate.tiers.classifier import IntentClassifier
from rtgate.tiers.complexity import clauses

__all__ = [
    "CALL_SETS",
    "LABEL_ALIASES",
    "TUNED_ON",
    "Call",
    "build",
    "evaluate",
    "load_calls",
    "main",
    "on_topic",
    "run_sets",
    "topic_ids",
    "unknown_topics",
]

CALL_SETS = {
    "tune": TELECOM_DIR / "calls-tune.jsonl",
    "val": TELECOM_DIR / "calls-val.jsonl",
    "tune2": TELECOM_DIR / "calls-tune2.jsonl",
    "eval": TELECOM_DIR / "calls-eval.jsonl",
    "eval2": TELECOM_DIR / "calls-eval2.jsonl",
    "eval3": TELECOM_DIR / "calls-eval3.jsonl",
    # played blind in session 22; learned since session 23 (corpus-asks.json, scope-e5-asks.json)
    "eval4-zh": TELECOM_DIR / "calls-eval4-zh.jsonl",
    "eval4-en": TELECOM_DIR / "calls-eval4-en.jsonl",
    "eval5-zh": TELECOM_DIR / "calls-eval5-zh.jsonl",
    "eval5-en": TELECOM_DIR / "calls-eval5-en.jsonl",
    # played blind in sessions 23 and 24; learned since session 24
    "eval6-zh": TELECOM_DIR / "calls-eval6-zh.jsonl",
    "eval6-en": TELECOM_DIR / "calls-eval6-en.jsonl",
    "eval7-zh": TELECOM_DIR / "calls-eval7-zh.jsonl",
    "eval7-en": TELECOM_DIR / "calls-eval7-en.jsonl",
}
TUNED_ON = ("tune", "val", "tune2")  # the sets the judge and thresholds are fitted on
# with a semantic reader, which learned the TUNED_ON calls (scope-e5-asks.json), the
# operating point is picked where it and the judge both read out of sample
PICKED_ON = ("eval", "eval2", "eval3")
_BARS = (*(k / 100 for k in range(5, 100, 2)), 1.01)
_KINDS = ("simple", "multi", "ood")


@dataclass(frozen=True, slots=True)
class Call:
    """One caller turn, labelled."""

    text: str
    lang: str
    kind: str
    topics: tuple[str, ...]  # one for simple, several for multi, none for ood
    asr: bool = False

    @property
    def topic(self) -> str | tuple[str, ...] | None:
        if self.kind == "simple":
            return self.topics[0]
        return self.topics or None


def load_calls(path: Path, intents: Sequence[str] | None = None) -> list[Call]:
    """Calls from JSON Lines (module docstring); ``ConfigError`` naming the bad line."""
    known = set(intents or domain_intents(TELECOM_DIR))
    out: list[Call] = []
    for n, row in json_lines(path, "calls"):
        try:
            text, lang, kind, topic = row["text"], row["lang"], row["kind"], row.get("topic")
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{path}:{n}: not a call: {e}") from e
        if isinstance(topic, str) and LABEL_ALIASES.get(topic.lower(), topic) == "ood":
            topic = None  # a writer's label for outside the domain ("ood", "other")
        topics = (topic,) if isinstance(topic, str) else tuple(topic or ())
        if kind not in _KINDS or lang not in ("zh", "en") or not str(text).strip():
            raise ConfigError(f"{path}:{n}: needs a text, lang zh or en, kind {_KINDS}")
        if any(t not in known for t in topics) or (kind == "simple") != (
            len(topics) == 1 and isinstance(topic, str)
        ):
            raise ConfigError(f"{path}:{n}: topic {topic!r} does not fit kind {kind!r}")
        out.append(Call(str(text), lang, kind, topics, bool(row.get("asr", False))))
    return out


# labels outside authors gave voice sets' turns, as the domain's ids: natural5's author
# wrote "other" for asks outside the domain and split suspension_reconnection in two; read
# raw, no answer could be on those topics (15 of natural5's 60 scored turns)
LABEL_ALIASES = {
    "other": "ood",
    "none": "ood",
    "suspension": "suspension_reconnection",
    "reconnection": "suspension_reconnection",
}


def topic_ids(topic_id: str | Sequence[str] | None) -> str | list[str]:
    """A turn's topic label(s) as the domain's ids (:data:`LABEL_ALIASES`); ``"ood"`` for
    ``None`` or outside the domain."""
    if topic_id is None:
        return "ood"
    if isinstance(topic_id, str):
        return LABEL_ALIASES.get(topic_id.lower(), topic_id)
    return [str(topic_ids(t)) for t in topic_id]


def unknown_topics(topic_id: str | Sequence[str] | None) -> list[str]:
    """The labels of ``topic_id`` that are neither an intent of the shipped domain nor
    ``ood`` after :func:`topic_ids` (no answer can be on them: a labelling error)."""
    ids = topic_ids(topic_id)
    known = set(shipped().intents) | {"ood"}
    return [t for t in ([ids] if isinstance(ids, str) else ids) if t not in known]


def on_topic(answer_text: str, topic_id: str | Sequence[str] | None, lang: str) -> bool:
    """Whether the agent's first answer ``answer_text`` is on the caller's topic (an intent
    id of ``domains/telecom/intents.json``, or a label of :data:`LABEL_ALIASES`; a list for
    a multi-part ask, any of them; ``None`` or ``"ood"`` outside the domain):
    :meth:`KnowledgeBase.on_topic` of the shipped domain. For ``rtgate bench voice`` on
    audio calls: pass the agent's answer (or its holding answer), not its acknowledgement."""
    return shipped().on_topic(answer_text, topic_ids(topic_id), lang)


# -- evaluation ---------------------------------------------------------------------------


def evaluate(
    kb: KnowledgeBase, calls: Sequence[Call], *, corrections: bool = True
) -> dict[str, Any]:
    """The first answers to ``calls`` (module docstring), overall and per language."""
    saved = kb.corrections
    if not corrections:
        kb.corrections = Corrections([])
    try:
        rows = []
        for c in calls:
            r = kb.reply(c.text, c.lang)
            rows.append((c, r, kb.on_topic(r.text, c.topic, c.lang)))
    finally:
        kb.corrections = saved
    out: dict[str, Any] = {"n": len(calls)}
    for lang in ("all", "zh", "en"):
        part = [x for x in rows if lang in ("all", x[0].lang)]
        block: dict[str, Any] = {"n": len(part)}
        block["first_answer_on_topic"] = _share([ok for _, _, ok in part])
        simple = [x for x in part if x[0].kind == "simple"]
        hard = [x for x in part if x[0].kind != "simple"]
        block["simple"] = {
            "n": len(simple),
            "on_topic": _share([ok for _, _, ok in simple]),
            "from_kb_no_followup": _share(
                [r.kind == "entry" and not r.followup for _, r, _ in simple]
            ),
            "from_kb_on_topic": _share([r.kind == "entry" and ok for _, r, ok in simple]),
            "wrong_entry": sum(r.kind == "entry" and not ok for _, r, ok in simple),
            "asr_lines": len([x for x in simple if x[0].asr]),
            "asr_on_topic": _share([ok for c, _, ok in simple if c.asr]),
        }
        for kind in ("multi", "ood"):
            some = [x for x in hard if x[0].kind == kind]
            block[kind] = {
                "n": len(some),
                "followed_up": _share([r.followup for _, r, _ in some]),
                "on_topic": _share([ok for _, _, ok in some]),
                "answered_from_entry": sum(r.kind == "entry" for _, r, _ in some),
            }
        out[lang] = block
    out["misses"] = [
        {
            "text": c.text,
            "topic": c.topic,
            "said": r.text,
            **r.to_dict(),
            "reply": r.kind,
            "kind": c.kind,
        }  # the call's kind, not the reply's (``reply``)
        for c, r, ok in rows
        if not ok or (c.kind != "simple" and not r.followup)
    ]
    return out


def _share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def call_set(name: str, data_dir: Path = TELECOM_DIR) -> Path:
    """The file of the call set ``name`` (``tune``, ``eval`` …: ``calls-NAME.jsonl`` of the
    domain), or ``name`` itself as a path to a JSON Lines file of calls (a blind set kept
    outside the package); ``ConfigError`` when it is neither."""
    path = set_file(name, {k: data_dir / f"calls-{k}.jsonl" for k in CALL_SETS})
    if path is not None:
        return path
    raise ConfigError(f"unknown call set {name!r}: one of {', '.join(CALL_SETS)}, or a file")


def run_sets(names: Sequence[str] = tuple(CALL_SETS), *, data_dir: Path = TELECOM_DIR,
             corrections: bool = True) -> dict[str, Any]:  # fmt: skip
    """:func:`evaluate` on each set (a name of the domain's, ``tune``, ``eval`` …, or a
    file: :func:`call_set`), keyed by the name as given."""
    kb = KnowledgeBase.load(data_dir)
    out: dict[str, Any] = {
        "domain": str(data_dir.name),
        "min_confidence": kb.min_confidence,
        "clause_confidence": kb.clause_confidence,
        "judge_threshold": None if kb.judge is None else kb.judge.threshold,
    }
    for name in names:
        path = call_set(name, data_dir)
        out[name] = evaluate(kb, load_calls(path, kb.intents), corrections=corrections)
    return out


# -- fitting ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Row:
    call: Call
    intent: str
    p: float
    clause: list[tuple[str, float]]
    x: list[float]
    hold_ok: bool  # the entry is for the labelled intent (a simple call's right answer)
    p_out: float = 0.0  # the semantic reader's (0 without one)
    outside: bool = False  # reads as outside the domain (a hold names no topic)


def _decide(r: _Row, p_right: float, min_conf: float, clause_conf: float, th: float,
            bar: float = 1.01) -> bool:  # fmt: skip
    """Whether the KB answers ``r`` from an entry at these thresholds (as ``reply``)."""
    others = [k for k, q in r.clause if q >= clause_conf and k != r.intent]
    return r.p >= min_conf and not others and p_right >= th and r.p_out < bar


def _rows(kb: KnowledgeBase, clf: IntentClassifier, probe: CalibratedJudge,
          calls: Sequence[Call]) -> list[_Row]:  # fmt: skip
    """Each call as the decision reads it (after the corrections); ``p_out`` from the
    knowledge base's semantic reader when it has one."""
    rows: list[_Row] = []
    for c in calls:
        heard = kb.correct(c.text, c.lang).text
        intent, p = clf.rank(heard)[0]
        parts = [q for q in clauses(heard) if len(units(q)) >= 2]
        x, _ = probe.features(heard)
        is_right = c.kind == "simple" and intent == c.topics[0]
        p_out = 0.0 if kb.semantic is None else kb.semantic.out_of_scope(heard)
        rows.append(_Row(c, intent, p, [clf.rank(q)[0] for q in parts], x, is_right, p_out,
                         kb.reads_outside(heard)))  # fmt: skip
    return rows


_NAMES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _pick_naming(rows: Sequence[_Row], p_right: Sequence[float],
                 point: dict[str, float]) -> dict[str, float]:  # fmt: skip
    """The confidence at which a hold names the turn's intent (:data:`_NAMES`) that names
    a topic of the call in the most held calls of ``rows`` at ``point``, each hold naming
    none of its topics counting twice against (a caller told "about your roaming" who
    asked about a refund); ties: the higher confidence."""
    held = [r for i, r in enumerate(rows) if not _decide(
        r, p_right[i], point["min_confidence"], point["clause_confidence"], point["threshold"],
        point["bar"])]  # fmt: skip
    best: tuple[int, float, int, int] | None = None
    for nc in sorted(_NAMES, reverse=True):
        right = wrong = 0
        for r in held:
            if r.outside:
                continue
            named = [r.intent] if r.p >= nc else []
            named += [k for k, q in r.clause if q >= point["clause_confidence"] and k != r.intent]
            if named:
                hit = any(k in r.call.topics for k in named)
                right, wrong = right + hit, wrong + (not hit)
        if best is None or right - 2 * wrong > best[0]:
            best = (right - 2 * wrong, nc, right, wrong)
    assert best is not None
    return {"name_confidence": best[1], "named_right": best[2], "named_wrong": best[3]}


def _pick(rows: Sequence[_Row], p_right: Sequence[float],
          bars: Sequence[float] = (1.01,)) -> dict[str, float]:  # fmt: skip
    """The thresholds (and the reader's bar) that follow up the most multi-part and
    out-of-domain calls of ``rows``, then answer the most simple calls right from an entry,
    each wrong entry counting twice against (ties: the first in grid order)."""
    best: tuple[tuple[float, float], dict[str, float]] | None = None
    for min_conf in (0.3, 0.4, 0.5, 0.6, 0.7):
        for clause_conf in (0.5, 0.6, 0.7, 0.8, 0.9):
            for t in range(1, 90, 2):
                th = t / 100
                for bar in bars:
                    ans = [_decide(r, p_right[i], min_conf, clause_conf, th, bar)
                           for i, r in enumerate(rows)]  # fmt: skip
                    pairs = list(zip(ans, rows, strict=True))
                    hard = [not a for a, r in pairs if r.call.kind != "simple"]
                    right = sum(1 for a, r in pairs if a and r.hold_ok)
                    wrong = sum(1 for a, r in pairs if a and r.call.kind == "simple"
                                and not r.hold_ok)  # fmt: skip
                    followed = sum(hard) / max(1, len(hard))
                    key = (followed, right - 2 * wrong)
                    if best is None or key > best[0]:
                        best = (key, {"min_confidence": min_conf, "clause_confidence": clause_conf,
                                      "threshold": th, "bar": bar, "right": right, "wrong": wrong,
                                      "followed_up": round(followed, 4)})  # fmt: skip
    assert best is not None
    return best[1]


def build(data_dir: Path = TELECOM_DIR, *, seed: int = 0, k: int = 5) -> dict[str, Any]:
    """Train and write the domain's ``intent-ngram.npz`` (the corpus and the simple lines
    ``corpus-asks.json`` names: :func:`~rtgate.domains.loader.classifier_examples`) and
    ``scope-ngram.npz``, fit its
    judge on the :data:`TUNED_ON` calls (``calls-tune``, ``calls-val``, ``calls-tune2``) and
    choose ``min_confidence``, ``clause_confidence`` and the judge's threshold there, out
    of fold: every multi-part and out-of-domain call followed up if any setting does so,
    then the most simple calls answered right from an entry, each wrong entry counting
    twice against; then ``name_confidence``, when a hold names the turn's intent
    (:func:`_pick_naming`). Writes ``judge.json``.

    A domain with a semantic reader (``scope-e5.npz``, which learned the tuning calls)
    has the same choice, and the reader's pause bar with it, made on the
    :data:`PICKED_ON` calls instead (``calls-eval``, ``calls-eval2``), read by the final
    judge and the reader, both out of sample there; the bar is written into
    ``scope-e5.npz``."""
    clf = train_classifier("ngram", data_dir=data_dir)
    assert isinstance(clf, IntentClassifier)
    clf.save(model_path("ngram", data_dir))
    scope = train_scope(data_dir)
    scope.save(scope_path(data_dir))
    entries, _, _ = read_entries(data_dir / "intents.json")
    probe = CalibratedJudge([0.0] * len(feature_names()), 0.0, 0.5, clf, vocabulary(data_dir),
                            familiarity(clf, data_dir), scope)  # fmt: skip
    kb = KnowledgeBase(
        entries, {}, clf, probe, Corrections.from_file(data_dir / "corrections.json")
    )  # fmt: skip  (the probe: the scope classifier)
    files = [data_dir / f"calls-{name}.jsonl" for name in TUNED_ON]
    calls = [c for f in files if f.exists() for c in load_calls(f, kb.intents)]
    rows = _rows(kb, clf, probe, calls)  # the judge learns these without the reader
    y = [int(r.hold_ok) for r in rows]
    oof = [0.0] * len(rows)
    for fold in range(k):
        train = [i for i in range(len(rows)) if i % k != fold]
        coef, b = fit_judge([rows[i].x for i in train], [y[i] for i in train])
        m = CalibratedJudge(coef, b, 0.5)
        for i in range(len(rows)):
            if i % k == fold:
                oof[i] = m.probability(rows[i].x)
    coef, b = fit_judge([r.x for r in rows], y)
    n_simple = sum(r.call.kind == "simple" for r in rows)
    report: dict[str, Any] = {
        "fitted_on": "+".join(f.name for f in files if f.exists()),
        "seed": seed,
        "n_calls": len(rows),
    }
    reader = load_semantic_scope(data_dir) if semantic_scope_path(data_dir).exists() else None
    if reader is None:
        chosen = _pick(rows, oof)
        report["picked_on"] = "out of fold on " + report["fitted_on"]
        picked_rows, picked_p, n_picked_simple = rows, oof, n_simple
    else:
        final = CalibratedJudge(coef, b, 0.5)
        held = [data_dir / f"calls-{name}.jsonl" for name in PICKED_ON]
        kb.semantic = reader
        picked_rows = _rows(kb, clf, probe, [c for f in held for c in load_calls(f, kb.intents)])
        picked_p = [final.probability(r.x) for r in picked_rows]
        chosen = _pick(picked_rows, picked_p, _BARS)
        report["picked_on"] = "+".join(f.name for f in held)
        n_picked_simple = sum(r.call.kind == "simple" for r in picked_rows)
    naming = _pick_naming(picked_rows, picked_p, chosen)
    report.update({
        "min_confidence": chosen["min_confidence"],
        "clause_confidence": chosen["clause_confidence"],
        "name_confidence": naming["name_confidence"],
        "threshold": chosen["threshold"],
        "out_of_fold": {
            "ece": round(expected_calibration_error(oof, y), 4),
            "reliability": reliability(oof, y),
        },
        "at_the_point": {
            "multi_ood_followed_up": chosen["followed_up"],
            "simple_right_from_kb": round(chosen["right"] / max(1, n_picked_simple), 4),
            "simple_wrong_entry": int(chosen["wrong"]),
            "holds_naming_a_topic_of_the_call": naming["named_right"],
            "holds_naming_another_topic": naming["named_wrong"],
            "n_calls": len(picked_rows),
        },
        "corpus_examples": clf.meta.get("n_examples"),
        "scope_rows": scope.meta.get("n_examples"),
    })  # fmt: skip
    if reader is not None:
        report["semantic_pause_bar"] = chosen["bar"]
        reader.pause_bar = float(chosen["bar"])
        reader.meta["operating_point"] = {"picked_on": report["picked_on"],
                                          "pause_bar": chosen["bar"]}  # fmt: skip
        reader.save(semantic_scope_path(data_dir))
    judge = CalibratedJudge(coef, b, float(chosen["threshold"]), meta=report)
    judge.save(judge_path(data_dir))
    shipped.cache_clear()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtgate.apps.voice.kb_eval [--json FILE] [--set tune|eval]...``"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rtgate.apps.voice.kb_eval")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    ap.add_argument("--set", action="append", dest="sets", help="a set's name or a file")
    ap.add_argument("--no-corrections", action="store_true", help="without the ASR corrections")
    args = ap.parse_args(argv)
    report = run_sets(args.sets or tuple(CALL_SETS), corrections=not args.no_corrections)
    summary(report)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


def summary(report: dict[str, Any]) -> None:
    """One line per set and language on stdout."""
    for name, block in report.items():
        if not (isinstance(block, dict) and "all" in block):
            continue  # the report's settings, not a set
        for lang in ("all", "zh", "en"):
            b = block[lang]
            print(
                f"{name:5} {lang:3} n={b['n']:3}  first answer on topic "
                f"{b['first_answer_on_topic']}"
                f"  simple: on topic {b['simple']['on_topic']}, from KB w/o follow-up "
                f"{b['simple']['from_kb_no_followup']}, wrong entry {b['simple']['wrong_entry']}"
                f"  multi followed up {b['multi']['followed_up']}  ood followed up "
                f"{b['ood']['followed_up']}"
            )


if __name__ == "__main__":
    sys.exit(main())

"""Why first answers are off topic, and why multi-part asks go without a follow-up, from
`rtgate bench voice --json` reports (#17, session 13).

    python scripts/voice_topic_causes.py out/run.json [more.json ...] [--rows]

Every first answer the bench scored off topic gets one cause, the first that applies:

- ``no answer``: nothing was said as a first answer for the turn;
- ``answered on a part``: the turn's end was decided before its true end (a cut-in or an
  early decision): the knowledge base answered the words up to the pause;
- ``KB off on the caller's words``: `KnowledgeBase.reply` on the manifest's own text is off
  topic too (the decision, not the audio path);
- ``ASR error``: the heard (final) transcript differs from the caller's words by more than
  ``ASR_ERR`` (character error rate for Mandarin, word error rate for English, punctuation
  and case left out) and the words themselves would have been answered on topic;
- ``KB unsure on a near-correct transcript``: the transcript is within ``ASR_ERR`` of the
  words, which are answered on topic, but the heard line is not.

Each is split by what was said: a plain hold (names no topic), a hold naming another topic,
another topic's entry. ``top1 right`` counts the off-topic answers whose heard line the
classifier ranks first as the caller's topic (what a hold naming the most likely topic
could win). Multi-part asks without a spoken follow-up: answered from an entry (no
follow-up asked), asked but not back before the caller went on or the call ended, the
follow-up dropped as a repeat, the job not done, the caller talking when it came, or the
turn decided early.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rtgate.apps.voice.kb_eval import on_topic, topic_ids
from rtgate.domains.knowledge import shipped

ASR_ERR = 0.15
_PUNCT = re.compile(r"[^\w\u3400-\u9fff' ]+")


def tokens(text: str, lang: str) -> list[str]:
    """Characters (Mandarin) or lower-case words (English), punctuation left out."""
    clean = _PUNCT.sub(" ", text.replace("|", " ")).lower()
    if lang == "zh":
        return [c for c in clean if not c.isspace()]
    return clean.split()


def error_rate(ref: str, hyp: str, lang: str) -> float:
    """Edit distance of ``hyp`` from ``ref`` over ``ref``'s length (tokens above)."""
    a, b = tokens(ref, lang), tokens(hyp, lang)
    if not a:
        return 0.0 if not b else 1.0
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1] / len(a)


def said_kind(kb: Any, answer: str, lang: str) -> str:
    """What the first answer was: a plain hold, a hold naming topics, an entry."""
    plain = kb.holding_text(lang)
    if not answer.strip():
        return "nothing"
    if answer.strip() == plain.strip():
        return "plain hold"
    for (_, lg), e in kb.entries.items():
        if lg == lang and e.reply.strip() and e.reply.strip() in answer:
            return "entry (other topic)"
    return "hold naming another topic"


def words_of(row: dict[str, Any], lang: str) -> str:
    return ("" if lang == "zh" else " ").join(p.strip() for p in row["text"].split("|"))


def classify(row: dict[str, Any], lang: str, kb: Any) -> tuple[str, str, bool]:
    """(cause, what was said, classifier's top-1 on the heard line is the topic)."""
    answer, heard = row["answer"] or "", row["heard"] or ""
    topic = topic_ids(row["topic"])
    want = [topic] if isinstance(topic, str) else topic
    top1 = bool(heard.strip()) and kb.classifier.rank(kb.correct(heard, lang).text)[0][0] in want
    kind = said_kind(kb, answer, lang)
    if not answer.strip():
        return "no answer", kind, top1
    if row["decided_early"]:
        return "answered on a part", kind, top1
    words = words_of(row, lang)
    if not on_topic(kb.reply(words, lang).text, topic, lang):
        return "KB off on the caller's words", kind, top1
    if error_rate(words, heard, lang) > ASR_ERR:
        return "ASR error", kind, top1
    return "KB unsure on a near-correct transcript", kind, top1


def multi_cause(row: dict[str, Any]) -> str:
    job = row.get("followup_job")
    if row["decided_early"]:
        return "decided early (answered a part)"
    if job is None and (row.get("judge") or {}).get("followup"):
        return "asked, not back before the caller went on or hung up"
    if job is None:
        return "answered from an entry (no follow-up asked)"
    if job.get("dropped_as_repeat"):
        return "follow-up dropped as a repeat"
    if job.get("status") != "done":
        return f"follow-up job {job.get('status')}"
    outcome = row.get("followup_outcome")
    if outcome in ("cancelled", "stale"):
        return f"follow-up {outcome} (waited for the floor)"
    return "not spoken (the caller was talking)"


def main() -> None:
    show = "--rows" in sys.argv
    kb = shipped()
    for path in [a for a in sys.argv[1:] if not a.startswith("--")]:
        rep = json.loads(Path(path).read_text(encoding="utf-8"))
        print(f"## {path}: {rep['set']}")
        causes: Counter[tuple[str, str, str]] = Counter()
        top1: Counter[str] = Counter()
        multi: Counter[tuple[str, str]] = Counter()
        scored, raw, ok = Counter[str](), Counter[str](), Counter[str]()
        for call in rep["calls_detail"]:
            lang = call["lang"]
            for row in call["turns"]:
                if row["on_topic"] is None:
                    continue
                scored[lang] += 1
                raw[lang] += bool(row["on_topic"])
                if row["kind"] == "multi" and not row["followup"]:
                    multi[(lang, multi_cause(row))] += 1
                # scored again with the set's labels read as the domain's ids (LABEL_ALIASES)
                if on_topic(row["answer"] or "", row["topic"], lang):
                    ok[lang] += 1
                    continue
                cause, kind, right = classify(row, lang, kb)
                causes[(lang, cause, kind)] += 1
                top1[cause] += right
                if show:
                    err = error_rate(words_of(row, lang), row["heard"] or "", lang)
                    print(f"  [{lang}] {cause} / {kind} (err {err:.2f}, top1 {right})")
                    print(f"      said : {row['text']}  ({row['topic']}, {row['kind']})")
                    print(f"      heard: {row['heard']}  | rule {row['rule']}")
                    print(f"      first: {row['answer']}")
        print("| cause | what was said | zh | en | all |")
        print("|---|---|---|---|---|")
        for cause, kind in sorted({(c, k) for _, c, k in causes}):
            zh, en = causes[("zh", cause, kind)], causes[("en", cause, kind)]
            print(f"| {cause} | {kind} | {zh} | {en} | {zh + en} |")
        total = {lg: sum(n for (lang, _, _), n in causes.items() if lang == lg) for lg in scored}
        print(
            f"on topic as the bench scored it: {dict(raw)}; with the labels read as ids: "
            f"{dict(ok)} of {dict(scored)}"
        )
        print(f"off topic: {total}; top-1 right among them: {dict(top1)}")
        print("multi-part not followed up:", dict(multi))


if __name__ == "__main__":
    main()

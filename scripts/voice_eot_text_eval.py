"""The trained text end-of-turn model on Whisper's real partials at pauses and ends (#17).

Reads the rows of ``scripts/voice_pause_diag.py`` (the partial Whisper made after 64 /
150 / 300 / 600 ms of true silence at every pause inside a turn and every turn's end of a
validation set, with the local model's score of it) and scores the same partials with the
text model: ROC AUC end vs pause per language, cue and silence, for both models (the local
model's where the rows have its score), and per threshold the question partials at pauses
and at ends that score under it.

    cd scripts
    PYTHONPATH=../src python voice_eot_text_eval.py ../out/pp-vp2.json ../out/pp-vp.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rtgate.apps.voice.eot import auc
from rtgate.apps.voice.eot_text import TextEndOfTurn


def rooms(eval_dir: Path) -> dict[tuple[str, int], float]:
    """The drawn pause (s) at each place inside a turn, by (wav, place)."""
    manifest = json.loads((eval_dir / "manifest.json").read_text(encoding="utf-8"))
    out: dict[tuple[str, int], float] = {}
    for call in manifest["calls"]:
        for turn in call["turns"]:
            spans = turn.get("pauses_at_s")
            pauses = [b - a for a, b in spans] if spans else list(turn["pauses_s"])
            for n, s in enumerate(pauses):
                out[(turn["wav"], n)] = float(s)
    return out


def load(paths: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        room = rooms(Path(report["eval_dir"]))
        for r in report["rows"]:
            r["set"] = Path(report["eval_dir"]).name
            r["room_s"] = room.get((r["wav"], r["place"])) if r["where"] == "pause" else None
            rows.append(r)
    return rows


def aucs(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lang in ("zh", "en", "all"):
        for c in ("question", "clause", "open", "any"):
            for s in (64, 150, 300, 600, "any"):
                mine = [
                    r
                    for r in rows
                    if lang in ("all", r["lang"])
                    and (c == "any" or (r["cue"] or "open") == c)
                    and (s == "any" or r["silence_ms"] == s)
                    and r["heard"]
                ]
                pos = [r[key] or 0.0 for r in mine if r["where"] == "end"]
                neg = [r[key] or 0.0 for r in mine if r["where"] == "pause"]
                a = auc(pos, neg)
                if a is not None:
                    out[f"{lang}/{c}/{s}"] = (round(a, 3), len(pos), len(neg))
    return out


def questions(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Per threshold: the question partials at pauses (the caller goes on) and at ends
    scored under it (a pause outwaited; an end that waits ``question_more_ms``)."""
    out: dict[str, Any] = {}
    for t in (0.3, 0.4, 0.5, 0.6, 0.7):
        row = {}
        for lang in ("zh", "en"):
            mine = [r for r in rows if r["lang"] == lang and r["cue"] == "question"]
            for where in ("pause", "end"):
                xs = [r for r in mine if r["where"] == where]
                row[f"{lang}_{where}"] = f"{sum((r[key] or 0.0) < t for r in xs)}/{len(xs)}"
        out[f"{t:g}"] = row
    return out


def main() -> None:
    rows = load([Path(p) for p in sys.argv[1:]])
    model = TextEndOfTurn.load()
    for r in rows:
        r["p_text"] = model.score(r["heard"], r["lang"]) if r["heard"] else None
    report: dict[str, Any] = {
        "auc_lm": aucs(rows, "p_end"),
        "auc_text": aucs(rows, "p_text"),
        "questions_under": questions(rows, "p_text"),
    }
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

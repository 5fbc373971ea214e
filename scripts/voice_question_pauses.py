"""How often does a caller go on after a complete question, and what would tell it (#17)?

From the sets' own sentences (the ``parts`` of each turn in ``data/eval_*_turns.json`` /
``val_pause_turns.json``, matched to the manifest's rendered turns and their drawn pauses),
with no audio: at every pause inside a turn, whether the words so far read as a question
(``turns.cue`` on the true text, as a perfect ASR would give it) and how long the drawn
pause is; and at every turn's end, the same. For the questions, the trained text model's
P(end) (``eot_text``, the model behind ``question_more``) and two cheap signals: whether
the words so far end on the ask's object (a question that names nothing yet: "what do I
need", "怎么收费") and the question's length in units.

    PYTHONPATH=src python scripts/voice_question_pauses.py eval/voice-natural5 eval/voice-val-pause2

Validation sets only: never the held-out ones.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from rtgate.apps.voice.eot import auc
from rtgate.apps.voice.eot_text import TextEndOfTurn
from rtgate.apps.voice.packaged import data_path
from rtgate.apps.voice.turns import cue

_UNIT = re.compile(r"[\u3400-\u9fff]|[A-Za-z0-9']+")
# a question that has not yet named what it asks about: it ends on a bare ask word
_BARE = re.compile(
    r"(\b(what|how|which|who|where|when|why|do|does|need|get|about|it|that|this|one|there)"
    r"|怎么办|怎么弄|怎么收费|多少钱|吗|呢|什么|怎么|哪里|哪个|几点)\W*$",
    re.IGNORECASE,
)


def parts_by_text(eval_dir: Path) -> dict[str, list[str]]:
    """Each source turn's parts, by the turn's text as the manifest writes it."""
    manifest = json.loads((eval_dir / "manifest.json").read_text(encoding="utf-8"))
    name = manifest.get("turns") or ""
    files = {"val-pause": "val_pause_turns.json"}
    src = json.loads(
        data_path(files.get(name, f"eval_{name.replace('-', '_')}_turns.json")).read_text(
            encoding="utf-8"
        )
    )
    out: dict[str, list[str]] = {}
    for lang in ("zh", "en"):
        for item in src[lang]["turns"]:
            if isinstance(item, dict):
                parts = [str(p) for p in item["parts"]]
                for sep in ("", " "):
                    out[sep.join(parts)] = parts
    return out


def rows(eval_dir: Path, model: TextEndOfTurn) -> list[dict[str, Any]]:
    manifest = json.loads((eval_dir / "manifest.json").read_text(encoding="utf-8"))
    parts = parts_by_text(eval_dir)
    out: list[dict[str, Any]] = []
    for call in manifest["calls"]:
        lang = call["lang"]
        for turn in call["turns"]:
            if turn["bargein"]:
                continue
            mine = parts.get(turn["text"], [turn["text"]])
            gaps = [b - a for a, b in turn.get("pauses_at_s") or []] or list(turn["pauses_s"])
            sep = "" if lang == "zh" else " "
            # as an ASR writes the words at a pause: no comma at the end
            places = [
                (sep.join(mine[: i + 1]).rstrip(" ，,、；;：:"), "pause", gaps[i])
                for i in range(len(gaps))
            ]
            places.append((turn["text"], "end", None))
            for text, where, gap in places:
                c = cue(text)
                q = c == "question"
                out.append(
                    {
                        "set": eval_dir.name,
                        "lang": lang,
                        "where": where,
                        "gap_s": None if gap is None else round(gap, 3),
                        "cue": c,
                        "text": text,
                        "p_text": round(model.score(text, lang) or 0.0, 3) if q else None,
                        "bare": bool(_BARE.search(text.strip(" 。？?！!，,"))) if q else None,
                        "units": len(_UNIT.findall(text)),
                    }
                )
    return out


def main() -> None:
    model = TextEndOfTurn.load()
    every: list[dict[str, Any]] = []
    for arg in [a for a in sys.argv[1:] if not a.startswith("--")]:
        every += rows(Path(arg), model)
    for lang in ("zh", "en", "all"):
        mine = [r for r in every if lang in ("all", r["lang"])]
        qp = [r for r in mine if r["where"] == "pause" and r["cue"] == "question"]
        qe = [r for r in mine if r["where"] == "end" and r["cue"] == "question"]
        pauses = [r for r in mine if r["where"] == "pause"]
        near = [r for r in qp if r["gap_s"] is not None and 0.5 <= r["gap_s"] <= 1.0]
        print(
            f"{lang}: pauses {len(pauses)}, after a question {len(qp)} "
            f"(0.5-1.0 s: {len(near)}); turns ending on a question {len(qe)}"
        )
        if qp and qe:
            ends = [r["p_text"] for r in qe]
            goes = [r["p_text"] for r in qp]
            print(f"   text model P(end) AUC end vs pause: {auc(ends, goes):.2f}")
            for bar in (0.5, 0.6, 0.7, 0.8):
                held = sum(p < bar for p in goes)
                late = sum(p < bar for p in ends)
                print(f"   under {bar}: pauses {held} / {len(goes)}, ends {late} / {len(ends)}")
            bare_p = sum(bool(r["bare"]) for r in qp)
            bare_e = sum(bool(r["bare"]) for r in qe)
            print(f"   ends on a bare ask word: pauses {bare_p} / {len(qp)}, ", end="")
            print(f"ends {bare_e} / {len(qe)}")
    if "--rows" in sys.argv:
        for r in every:
            if r["where"] == "pause" and r["cue"] == "question":
                print("  ", r["set"], r["lang"], r["gap_s"], r["p_text"], r["bare"], "|", r["text"])


if __name__ == "__main__":
    main()

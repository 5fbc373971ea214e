"""Whisper with and without the domain's vocabulary as its previous text, offline, on the
turns of voice sets (#17, session 13).

    python scripts/voice_asr_prompt_eval.py eval/voice-val-pause2 [more sets] [--json F]

Every turn that is not a barge-in is decoded whole (its true bounds with 0.3 s either side,
Whisper as the bench's final decode: base for Mandarin, tiny.en for English, the short
window) once without a prompt and once with ``asr_prompt.json``'s line for its language.
Per set and language: the error rate against the manifest's text (characters for
Mandarin, words for English), the knowledge base's first answer on the heard line on topic
(`kb_eval.on_topic`), and the decode time (ms, p50 / p95; on a shared machine). No turn
cutting, no pipeline: what the words alone win or lose.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from voice_topic_causes import error_rate

from rtgate.apps.voice.asr import WhisperASR, domain_prompts
from rtgate.apps.voice.frames import RATE
from rtgate.apps.voice.kb_eval import on_topic
from rtgate.apps.voice.transport import read_wav
from rtgate.domains.knowledge import shipped


def main() -> None:
    args = sys.argv[1:]
    out = Path(args[args.index("--json") + 1]) if "--json" in args else None
    sets = [a for a in args if not a.startswith("--") and (out is None or a != str(out))]
    kb = shipped()
    prompts = domain_prompts()
    models = {
        "zh": (WhisperASR("base", 1), WhisperASR("base", 1, prompts=prompts)),
        "en": (WhisperASR("tiny.en", 1), WhisperASR("tiny.en", 1, prompts=prompts)),
    }
    rows: list[dict[str, Any]] = []
    for folder in map(Path, sets):
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        for call in manifest["calls"]:
            lang = call["lang"]
            for t in call["turns"]:
                if t["bargein"]:
                    continue
                pcm = read_wav(folder / t["wav"])
                a, b = int(max(0.0, t["onset_s"] - 0.3) * RATE), int((t["end_s"] + 0.3) * RATE)
                row: dict[str, Any] = {"set": folder.name, "lang": lang, "text": t["text"],
                                       "topic": t["topic"]}  # fmt: skip
                for name, asr in zip(("plain", "prompt"), models[lang], strict=True):
                    tr = asr.transcribe(pcm[a:b], lang)
                    said = kb.reply(tr.text, lang).text
                    row[name] = {
                        "heard": tr.text,
                        "err": round(error_rate(t["text"], tr.text, lang), 3),
                        "on_topic": on_topic(said, t["topic"] or "ood", lang),
                        "ms": round(tr.decode_ms, 1),
                    }
                rows.append(row)
                print(
                    f"[{lang}] {t['text']}\n   plain : {row['plain']}\n   prompt: {row['prompt']}"
                )
    print("| set | lang | n | error rate, plain → prompt | on topic, plain → prompt | decode ms |")
    print("|---|---|---|---|---|---|")
    for name in sorted({r["set"] for r in rows}):
        for lang in ("zh", "en"):
            mine = [r for r in rows if r["set"] == name and r["lang"] == lang]
            if not mine:
                continue

            def mean(key: str, field: str, rs: list[dict[str, Any]] = mine) -> float:
                return float(np.mean([r[key][field] for r in rs]))

            def pct(key: str, rs: list[dict[str, Any]] = mine) -> str:
                ms = np.asarray([r[key]["ms"] for r in rs])
                return f"{np.percentile(ms, 50):.0f} / {np.percentile(ms, 95):.0f}"

            topic = [sum(r[k]["on_topic"] for r in mine) for k in ("plain", "prompt")]
            print(
                f"| {name} | {lang} | {len(mine)} | {mean('plain', 'err'):.3f} → "
                f"{mean('prompt', 'err'):.3f} | {topic[0]} → {topic[1]} | "
                f"{pct('plain')} → {pct('prompt')} |"
            )
    if out is not None:
        out.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

"""What Whisper hears at a turn's end with and without the line noise after the caller's
last voiced frame (#17, session 16).

For each turn of a set (barge-in lines left out), the audio from 0.3 s before the true
onset to ``--after`` seconds past the true end (what the final decode gets when the turn is
decided after a clause's wait) is decoded twice by the bench's Whisper models (base for
Mandarin, tiny.en for English): as it is, and cut at the Silero VAD's last frame at or over
0.5 plus ``--tail`` seconds (what :class:`~rtgate.apps.voice.asr.ASRStage` decodes with
``tail_s``). Each text is scored against the turn's own words (character error rate,
punctuation and case dropped) and read by ``cue``.

    PYTHONPATH=src python scripts/voice_tail_trim_eval.py eval/voice-natural7 … [--after 1.2]
        [--tail 0.3] [--json F] [--rows]
"""

from __future__ import annotations

import argparse
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.asr import WhisperASR
from rtgate.apps.voice.frames import RATE
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.turns import cue
from rtgate.apps.voice.vad import CHUNK, SileroVAD


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"[\W_]+", "", text)


def cer(ref: str, hyp: str) -> float:
    a, b = _norm(ref), _norm(hyp)
    if not a:
        return float(bool(b))
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1] / len(a)


def voiced_end(vad: SileroVAD, pcm: np.ndarray, upto: int) -> float | None:
    """End (s) of the last 32 ms chunk the VAD scores at or over 0.5, before ``upto``."""
    vad.reset()
    last = None
    for k in range(0, min(upto, len(pcm)) - CHUNK + 1, CHUNK):
        if vad.prob(pcm[k : k + CHUNK]) >= 0.5:
            last = (k + CHUNK) / RATE
    return last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sets", nargs="+", type=Path)
    ap.add_argument("--after", type=float, default=1.2)
    ap.add_argument("--tail", type=float, default=0.3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    asr = {"zh": WhisperASR("base", 2), "en": WhisperASR("tiny.en", 2)}
    vad = SileroVAD()
    rows: list[dict[str, Any]] = []
    for folder in args.sets:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        for call in manifest["calls"]:
            lang = call["lang"]
            for turn in call["turns"]:
                if turn["bargein"]:
                    continue
                pcm = read_wav(folder / turn["wav"])
                onset, end = float(turn["onset_s"]), float(turn["end_s"])
                a = int(max(0.0, onset - 0.3) * RATE)
                b = min(len(pcm), int((end + args.after) * RATE))
                ve = voiced_end(vad, pcm, b)
                cut = b if ve is None else min(b, int((ve + args.tail) * RATE))
                whole = asr[lang].transcribe(np.asarray(pcm[a:b]), lang, final=False).text
                trimmed = asr[lang].transcribe(np.asarray(pcm[a:cut]), lang, final=False).text
                rows.append({
                    "set": folder.name, "wav": turn["wav"], "lang": lang, "text": turn["text"],
                    "end_s": end, "voiced_end_s": ve, "cut_s": round(cut / RATE, 3),
                    "whole": whole, "trimmed": trimmed,
                    "cer_whole": round(cer(turn["text"], whole), 4),
                    "cer_trimmed": round(cer(turn["text"], trimmed), 4),
                    "cue_whole": cue(whole) if whole else None,
                    "cue_trimmed": cue(trimmed) if trimmed else None,
                    "cue_true": cue(turn["text"]),
                })  # fmt: skip
    summary: dict[str, Any] = {}
    for lang in ("zh", "en", "all"):
        rs = [r for r in rows if lang in ("all", r["lang"])]
        if not rs:
            continue
        early = [r for r in rs if r["voiced_end_s"] is not None and r["cut_s"] < r["end_s"]]
        summary[lang] = {
            "turns": len(rs),
            "cer_whole": round(float(np.mean([r["cer_whole"] for r in rs])), 4),
            "cer_trimmed": round(float(np.mean([r["cer_trimmed"] for r in rs])), 4),
            "text_differs": sum(r["whole"] != r["trimmed"] for r in rs),
            "better": sum(r["cer_trimmed"] < r["cer_whole"] for r in rs),
            "worse": sum(r["cer_trimmed"] > r["cer_whole"] for r in rs),
            "cue_as_true_whole": sum(r["cue_whole"] == r["cue_true"] for r in rs),
            "cue_as_true_trimmed": sum(r["cue_trimmed"] == r["cue_true"] for r in rs),
            "cut_before_true_end": len(early),
            "voiced_end_minus_end_ms_p50": round(float(np.median(
                [1000 * (r["voiced_end_s"] - r["end_s"]) for r in rs if r["voiced_end_s"]])), 1),
        }  # fmt: skip
    print(json.dumps(summary, indent=1))
    if args.rows:
        for r in rows:
            if r["whole"] != r["trimmed"]:
                print(f"{r['wav']} {r['cer_whole']:.2f}->{r['cer_trimmed']:.2f} "
                      f"| {r['whole']} || {r['trimmed']}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, ensure_ascii=False,
                                        indent=1), encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    main()

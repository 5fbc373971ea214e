"""Whisper's partials at the pauses inside turns and at the turns' ends (#17, session 12).

A lighter :mod:`voice_pause_diag`: only the partial transcript the bench's Whisper models
(tiny.en for English, base for Mandarin, from 0.3 s before the true onset) make of the
audio up to a pause or an end plus ``--silences`` of true silence; no VAD replay, no local
model. The rows (same fields as the diagnostic's, ``p_end`` left empty) are what
``scripts/voice_eot_text_eval.py`` scores the text end-of-turn model on.

    cd scripts
    PYTHONPATH=../src python voice_pause_partials.py ../eval/voice-val-pause2 ../out/pp-vp2.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from voice_pause_diag import _upto, parts_by_text

from rtgate.apps.voice.asr import WhisperASR
from rtgate.apps.voice.smart_turn_eval import quiet_spans
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.turns import cue

SILENCES_S = (0.15, 0.3)


def run(folder: Path) -> dict[str, Any]:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    parts_of = parts_by_text()
    asr = {"zh": WhisperASR("base", 2), "en": WhisperASR("tiny.en", 2)}
    rows: list[dict[str, Any]] = []
    for call in manifest["calls"]:
        lang = call["lang"]
        for turn in call["turns"]:
            pcm = read_wav(folder / turn["wav"])
            onset, end = float(turn["onset_s"]), float(turn["end_s"])
            floor = pcm[-int(0.2 * 16000) :]
            spans = turn.get("pauses_at_s")
            if spans is None:
                spans = quiet_spans(pcm, onset, end, 0.45) if turn["pauses_s"] else []
            parts = parts_of.get(turn["text"], [turn["text"]])
            places = [("pause", a, b - a) for a, b in spans] + [("end", end, None)]
            for n, (where, at, room) in enumerate(places):
                for s in SILENCES_S:
                    if room is not None and s > room:
                        continue
                    audio = _upto(pcm, max(0.0, onset - 0.3), at + s, floor)
                    text = asr[lang].transcribe(np.asarray(audio), lang).text
                    rows.append(
                        {
                            "lang": lang,
                            "wav": turn["wav"],
                            "bargein": turn["bargein"],
                            "where": where,
                            "place": n,
                            "part": parts[n] if len(parts) == len(places) else None,
                            "silence_ms": round(s * 1000),
                            "heard": text,
                            "cue": cue(text) if text else None,
                            "p_end": None,
                        }
                    )
            print(turn["wav"], len(rows), file=sys.stderr, flush=True)
    return {"eval_dir": str(folder), "rows": rows}


def main() -> None:
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    report = run(folder)
    out.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

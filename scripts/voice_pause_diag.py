"""What turn-taking knows at a pause inside a turn and at the turn's end (#17, diagnostic).

For every pause inside a turn (the caller goes on) and every turn's end (finished) of a
``make-eval`` set, after 64 / 150 / 300 / 600 ms of true silence: the partial transcript
Whisper makes of the audio so far (the model the bench uses: tiny.en for English, base for
Mandarin; the buffer from 0.3 s before the true onset, as the ASR's pre-roll), its cue and
last characters, the local model's end-of-turn score of it, the silence the VAD would
report by then (two Silero streams 16 ms apart, dated from the fade as turns.py does), and
the speaking rate of the part before the place (units per second: a Chinese character or
an English word). Offline: the machine's load does not enter, except into nothing.

    PYTHONPATH=src python scripts/voice_pause_diag.py eval/voice-val-pause2 out/diag-vp2.json
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.agent import ack_units
from rtgate.apps.voice.asr import WhisperASR
from rtgate.apps.voice.eot import LMEndOfTurn
from rtgate.apps.voice.frames import RATE, Pcm
from rtgate.apps.voice.packaged import data_path
from rtgate.apps.voice.smart_turn_eval import quiet_spans
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.turns import TurnRules, cue
from rtgate.apps.voice.vad import CHUNK, SileroVAD, level_db

SILENCES_S = (0.064, 0.15, 0.3, 0.6)
TURN_FILES = ("val_pause_turns.json",)


def parts_by_text() -> dict[str, list[str]]:
    """The parts of every validation turn, by the turn's joined text."""
    out: dict[str, list[str]] = {}
    for name in TURN_FILES:
        src = json.loads(data_path(name).read_text(encoding="utf-8"))
        for lang in ("zh", "en"):
            for item in src[lang]["turns"]:
                parts = item["parts"]
                out[("" if lang == "zh" else " ").join(parts)] = parts
            for line in src[lang].get("bargein", []):
                out[line] = [line]
    return out


def vad_silence(pcm: Pcm, onset: float, at_s: list[float]) -> list[float]:
    """Silence (ms) turn-taking would have counted at each audio time in ``at_s``."""
    vads = [SileroVAD(), SileroVAD()]
    hop = CHUNK // 2
    window = np.zeros(CHUNK, dtype=np.float32)
    peak = -120.0
    loud_until, quiet_since = 0.0, None
    seen: list[tuple[float, float | None]] = []
    for i in range(0, len(pcm) - hop + 1, hop):
        piece = pcm[i : i + hop]
        window = np.concatenate([window[hop:], piece])
        t = i / RATE
        prob = vads[(i // hop) % 2].prob(window)
        level = level_db(piece)
        if t >= onset:
            peak = max(peak, level)
        faded = level < peak - 30.0
        if not faded:
            loud_until = t + hop / RATE
        if prob >= 0.5:
            quiet_since = None
        elif t > onset and quiet_since is None:
            quiet_since = min(t, max(loud_until, t - 0.25))
        seen.append((t + hop / RATE, quiet_since))
    out = []
    for at in at_s:
        q = next((q for end, q in seen if end >= at), None)
        out.append(0.0 if q is None else round(max(0.0, at - q) * 1000.0, 1))
    return out


def _upto(pcm: Pcm, start: float, t: float, floor: Pcm) -> Pcm:
    a, b = int(start * RATE), int(t * RATE)
    out = pcm[a : min(b, len(pcm))]
    if b > len(pcm):
        out = np.concatenate([out, np.resize(floor, b - len(pcm)).astype(np.float32)])
    return out


async def run(folder: Path) -> dict[str, Any]:
    from rtgate.backends.llamacpp import LlamaCppBackend

    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    parts_of = parts_by_text()
    asr = {"zh": WhisperASR("base", 2), "en": WhisperASR("tiny.en", 2)}
    backend = LlamaCppBackend("gemma3-270m", n_threads=2)
    await backend.warmup()
    eot = LMEndOfTurn(backend, budget_ms=60_000)
    scores: dict[tuple[str, str], float | None] = {}
    rows: list[dict[str, Any]] = []
    try:
        for call in manifest["calls"]:
            lang = call["lang"]
            for turn in call["turns"]:
                pcm = read_wav(folder / turn["wav"])
                onset, end = float(turn["onset_s"]), float(turn["end_s"])
                floor = pcm[-int(0.2 * RATE) :]
                spans = turn.get("pauses_at_s")
                if spans is None:  # part by part: the drawn pauses are the long quiet stretches
                    spans = quiet_spans(pcm, onset, end, 0.45) if turn["pauses_s"] else []
                parts = parts_of.get(turn["text"], [turn["text"]])
                places = [("pause", a, b - a) for a, b in spans] + [("end", end, None)]
                tail = np.concatenate([pcm, np.resize(floor, RATE).astype(np.float32)])
                silence = vad_silence(
                    tail, onset, [at + s for _, at, _ in places for s in SILENCES_S]
                )
                k = 0
                starts = [onset] + [b for _, b in spans]
                for n, (where, at, room) in enumerate(places):
                    part = parts[n] if len(parts) == len(places) else None
                    rate = None
                    if part is not None:
                        rate = round(ack_units(part) / max(0.1, at - starts[n]), 2)
                    for s in SILENCES_S:
                        vad_ms = silence[k]
                        k += 1
                        if room is not None and s > room:
                            continue
                        audio = _upto(pcm, max(0.0, onset - 0.3), at + s, floor)
                        tr = await asyncio.to_thread(asr[lang].transcribe, audio, lang)
                        text = tr.text
                        if (lang, text) not in scores:
                            scores[(lang, text)] = await eot.p_end(text, lang) if text else None
                        p = scores[(lang, text)]
                        rows.append(
                            {
                                "lang": lang,
                                "wav": turn["wav"],
                                "voice": call["voice"]["engine"],
                                "bargein": turn["bargein"],
                                "where": where,
                                "place": n,
                                "part": part,
                                "next": parts[n + 1]
                                if part is not None and n + 1 < len(parts)
                                else None,
                                "silence_ms": round(s * 1000),
                                "vad_silence_ms": vad_ms,
                                "heard": text,
                                "last": text.strip()[-2:],
                                "cue": cue(text) if text else None,
                                "p_end": None if p is None else round(p, 3),
                                "rate": rate,
                            }
                        )
                print(turn["wav"], len(rows), file=sys.stderr)
    finally:
        await backend.aclose()
    return {"eval_dir": str(folder), "rules": str(TurnRules()), "rows": rows}


def main() -> None:
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    report = asyncio.run(run(folder))
    out.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

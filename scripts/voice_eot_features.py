"""The features turn-taking has at each pause inside a turn and at each turn's end, after
64 / 150 / 300 / 450 / 600 / 900 ms of silence (#17, session 15: the study behind
``eot_rule.py``).

Per place (a drawn pause, where the caller goes on, or the turn's true end) of a
``make-eval`` set: one Whisper partial of the audio from 0.3 s before the true onset to
150 ms into the silence (the models the bench uses: tiny.en for English, base for
Mandarin), its cue (``turns.cue``), the trained text model's P(end) (``eot_text``) and, with
``--lm``, the local model's P(end) (``eot.LMEndOfTurn``, what ``complete`` reads on
clauses); then at each silence Smart Turn v3.2's P(end) on the audio so far (from
``pre_speech_s`` before the onset, the line's tail noise past the WAV's end). A pause is
scored only at silences shorter than itself (the caller has gone on by then). Offline: the
load changes how long this takes, not what it finds.

    PYTHONPATH=src python scripts/voice_eot_features.py OUT.json eval/voice-natural5 [--lm]

``--partial-at S``: the partial decoded S seconds into the silence (0.15; the bench's
covering decode starts at the fade, ~0.05 s). ``--no-audio``: no Smart Turn (on natural7
it ranked the ends over the pauses at ROC AUC 0.30-0.60 at every silence, no better than
chance: docs/voice.md, session 15). ``--min-pause S``: the places are every stretch of at
least S seconds under -45 dBFS inside the turn (the pauses the voice makes itself at commas
too, where 17 of natural7's 21 `question` cut-ins came in session 15's play), not only the
drawn pauses.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.asr import WhisperASR
from rtgate.apps.voice.eot_text import TextEndOfTurn
from rtgate.apps.voice.frames import RATE
from rtgate.apps.voice.smart_turn import SmartTurn
from rtgate.apps.voice.smart_turn_eval import quiet_spans
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.turns import TurnRules, cue

SILENCES_MS = (64, 150, 300, 450, 600, 900)
PARTIAL_AT_S = 0.15


def _upto(pcm: np.ndarray, start: float, t: float, floor: np.ndarray) -> np.ndarray:
    a, b = int(start * RATE), int(t * RATE)
    out = pcm[a : min(b, len(pcm))]
    if b > len(pcm):
        out = np.concatenate([out, np.resize(floor, b - len(pcm)).astype(np.float32)])
    return out.astype(np.float32)


async def run(
    folder: Path,
    use_lm: bool,
    use_audio: bool = True,
    partial_at_s: float = PARTIAL_AT_S,
    min_pause_s: float | None = None,
) -> list[dict[str, Any]]:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    asr = {"zh": WhisperASR("base", 1), "en": WhisperASR("tiny.en", 1)}
    text_model = TextEndOfTurn.load()
    smart = SmartTurn(threads=1)
    rules = TurnRules()
    lm = None
    backend = None
    if use_lm:
        from rtgate.apps.voice.eot import LMEndOfTurn
        from rtgate.backends.llamacpp import LlamaCppBackend

        backend = LlamaCppBackend("gemma3-270m", n_threads=1)
        await backend.warmup()
        lm = LMEndOfTurn(backend, budget_ms=60_000)
    rows: list[dict[str, Any]] = []
    try:
        for call in manifest["calls"]:
            lang = call["lang"]
            for turn in call["turns"]:
                pcm = read_wav(folder / turn["wav"]).astype(np.float32)
                onset, end = float(turn["onset_s"]), float(turn["end_s"])
                floor = pcm[-int(0.2 * RATE) :]
                spans = turn.get("pauses_at_s")
                if min_pause_s is not None:  # every quiet stretch, drawn or the voice's own
                    spans = quiet_spans(pcm, onset, end, min_pause_s)
                elif spans is None:
                    spans = quiet_spans(pcm, onset, end, 0.45) if turn["pauses_s"] else []
                places = [("pause", a, b - a) for a, b in spans] + [("end", end, None)]
                for n, (where, at, room) in enumerate(places):
                    audio = _upto(pcm, max(0.0, onset - 0.3), at + partial_at_s, floor)
                    text = (await asyncio.to_thread(asr[lang].transcribe, audio, lang)).text
                    c = cue(text) if text.strip() else None
                    p_text = text_model.score(text, lang) if text.strip() else None
                    p_lm = None
                    if lm is not None and text.strip():
                        p_lm = await lm.p_end(text, lang)
                    p_audio: dict[str, float] = {}
                    start = max(0.0, onset - rules.pre_speech_s)
                    for ms in SILENCES_MS if use_audio else ():
                        if room is not None and ms / 1000.0 >= room:
                            continue
                        clip = _upto(pcm, start, at + ms / 1000.0, floor)
                        p_audio[str(ms)] = round(smart.p_end(clip), 4)
                    rows.append({
                        "set": folder.name, "lang": lang, "wav": turn["wav"],
                        "engine": call["voice"]["engine"], "text": turn["text"],
                        "kind": turn.get("kind"), "bargein": turn["bargein"],
                        "where": where, "place": n, "at_s": at,
                        "room_ms": None if room is None else round(room * 1000),
                        "heard": text, "cue": c,
                        "p_text": None if p_text is None else round(p_text, 4),
                        "p_lm": None if p_lm is None else round(p_lm, 4),
                        "p_audio": p_audio,
                    })  # fmt: skip
                print(folder.name, turn["wav"], len(rows), file=sys.stderr, flush=True)
    finally:
        if backend is not None:
            await backend.aclose()
    return rows


def main() -> None:
    argv = sys.argv[1:]
    at = PARTIAL_AT_S
    if "--partial-at" in argv:
        i = argv.index("--partial-at")
        at = float(argv[i + 1])
        del argv[i : i + 2]
    min_pause = None
    if "--min-pause" in argv:
        i = argv.index("--min-pause")
        min_pause = float(argv[i + 1])
        del argv[i : i + 2]
    args = [a for a in argv if not a.startswith("--")]
    out, folders = Path(args[0]), [Path(a) for a in args[1:]]
    rows: list[dict[str, Any]] = []
    for folder in folders:
        rows += asyncio.run(run(folder, "--lm" in argv, "--no-audio" not in argv, at, min_pause))
    out.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

"""What the pipeline's VAD hears of each caller turn after a stretch of line noise, with the
session-14 fresh Silero states (``reset_quiet_s=2.0``) and without (``None``) (#17,
diagnostic for natural7's `timeout` ends).

Every turn of the given ``make-eval`` sets goes through ``VADStage`` (two Silero streams
16 ms apart, fed 20 ms at a time as the bench does) after ``LEADS_S`` seconds of the call's
line noise (``evalset.line_noise``: the bench's 8.5 s before a call's first turn, and
shorter gaps as after an answer), then 1.5 s of noise after it. Per turn and lead: the
VAD's first speech start after the true onset, the longest stretch of true speech (10 ms
frames over -45 dBFS, the bench's labels) inside the VAD's silence, the VAD's last stop
against the true end, and how many fresh states were taken inside the turn.

    PYTHONPATH=src python scripts/voice_vad_reset_replay.py OUT.json eval/voice-natural7 ...
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.evalset import line_noise
from rtgate.apps.voice.frames import (
    RATE,
    AudioFrame,
    Frame,
    SpeechStartFrame,
    SpeechStopFrame,
)
from rtgate.apps.voice.labels import TRUE_DB
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.vad import SileroVAD, SpeechTracker, VADStage

LEADS_S = (1.0, 3.0, 8.5)
RESETS: tuple[float | None, ...] = (2.0, None)
FRAME = RATE // 50


async def replay(
    pcm: np.ndarray, reset: float | None
) -> tuple[list[tuple[str, float]], list[float]]:
    """The VAD's speech events over ``pcm`` and the audio times of its fresh states."""
    stage = VADStage(SileroVAD(), SpeechTracker(hangover_ms=64), twin=SileroVAD(),
                     reset_quiet_s=reset)  # fmt: skip
    out: list[Frame] = []
    resets: list[float] = []

    async def keep(frame: Frame, upstream: bool = False) -> None:
        out.append(frame)

    stage.push = keep  # type: ignore[method-assign]  # offline: the stage alone, in order
    for i in range(0, len(pcm), FRAME):
        before = stage.resets
        await stage.process_frame(AudioFrame(pcm=pcm[i : i + FRAME], t=i / RATE), False)
        if stage.resets != before:
            resets.append(i / RATE)
    ev = [("+" if isinstance(f, SpeechStartFrame) else "-", f.t) for f in out
          if isinstance(f, SpeechStartFrame | SpeechStopFrame)]  # fmt: skip
    return ev, resets


def loud_frames(pcm: np.ndarray) -> np.ndarray:
    n = len(pcm) // (RATE // 100)
    x = pcm[: n * (RATE // 100)].astype(np.float64).reshape(n, RATE // 100)
    loud: np.ndarray = 20.0 * np.log10(np.sqrt(np.mean(x**2, 1)) + 1e-12) > TRUE_DB
    return loud


def measure(ev: list[tuple[str, float]], loud: np.ndarray, lead: float, onset: float,
            end: float) -> dict[str, Any]:  # fmt: skip
    """Figures of one replay, in seconds of the turn's WAV."""
    spans: list[tuple[float, float]] = []
    start = None
    for kind, t in ev:
        if kind == "+":
            start = t - lead
        elif start is not None:
            spans.append((start, t - lead))
            start = None
    if start is not None:
        spans.append((start, 1e9))
    heard = np.zeros(len(loud), dtype=bool)
    for a, b in spans:
        heard[max(0, int(a * 100)) : max(0, min(len(loud), int(b * 100) + 1))] = True
    deaf, run = 0, 0
    for i in range(int(onset * 100), min(len(loud), int(end * 100))):
        # true speech the VAD is not in counts; a gap between words keeps the count going
        run = 0 if heard[i] else run + int(bool(loud[i]))
        deaf = max(deaf, run)
    starts = [a for a, _ in spans if a >= onset - 0.3]
    stops = [b for _, b in spans if b < 1e8]
    return {
        "first_start_after_onset_ms": None if not starts else round((starts[0] - onset) * 1000),
        "longest_unheard_speech_ms": deaf * 10,
        "last_stop_minus_end_ms": None if not stops else round((stops[-1] - end) * 1000),
        "speech": [f"{k}{t - lead:.2f}" for k, t in ev],
    }


async def run(folders: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        for n, call in enumerate(manifest["calls"]):
            v = call["voice"]
            noise = line_noise(RATE * 7, v["noise_db"], v["hum"], n)
            for turn in call["turns"]:
                pcm = read_wav(folder / turn["wav"]).astype(np.float32)
                onset, end = float(turn["onset_s"]), float(turn["end_s"])
                loud = loud_frames(pcm)
                for lead in LEADS_S:
                    pre = np.resize(noise, int(lead * RATE)).astype(np.float32)
                    whole = np.concatenate([pre, pcm, noise[: int(1.5 * RATE)]])
                    row: dict[str, Any] = {
                        "set": folder.name, "lang": call["lang"], "engine": v["engine"],
                        "level_db": round(v["level_db"], 1), "noise_db": round(v["noise_db"], 1),
                        "wav": turn["wav"], "text": turn["text"], "bargein": turn["bargein"],
                        "lead_s": lead, "onset_s": onset, "end_s": end,
                        "pauses_at_s": turn.get("pauses_at_s"),
                    }  # fmt: skip
                    for reset in RESETS:
                        ev, resets = await replay(whole, reset)
                        m = measure(ev, loud, lead, onset, end)
                        m["resets_in_turn"] = sum(onset <= t - lead <= end for t in resets)
                        row[f"reset_{reset}"] = m
                    rows.append(row)
            print(folder.name, n, len(rows), file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    found = asyncio.run(run([Path(a) for a in sys.argv[2:]]))
    Path(sys.argv[1]).write_text(json.dumps(found, ensure_ascii=False, indent=1), encoding="utf-8")

"""How much silence turn-taking has counted at a pause or an end, with and without the
noise-floor fade (#17, diagnostic).

Every turn of the given ``make-eval`` sets goes through the pipeline's own VAD stage (two
Silero streams 16 ms apart, fed 20 ms at a time after 0.5 s of the call's line noise), once
with ``floor_db=None`` (the fade 30 dB under the caller's peak only) and once with the
default; the silence is dated as ``turns.py`` dates it (from the first step under 0.5,
back to the fade, at most 0.25 s). Printed: the silence counted at 64 / 150 / 300 ms of
true silence after each pause start and each end (median and 10th percentile, all and per
language), and how many fades of 48 and 96 ms happen inside speech (away from the pauses).

    PYTHONPATH=src python scripts/voice_vad_dating.py eval/voice-val-pause2 eval/voice-val-pause
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np

from rtgate.apps.voice.evalset import line_noise
from rtgate.apps.voice.frames import RATE, AudioFrame, EndFrame, Frame, Pcm
from rtgate.apps.voice.pipeline import Pipeline, Stage
from rtgate.apps.voice.smart_turn_eval import quiet_spans
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.vad import SileroVAD, SpeechTracker, VADStage

SILENCES_S = (0.064, 0.15, 0.3)
FLOORS = (None, 8.0)


async def vad_frames(pcm: Pcm, floor_db: float | None) -> list[AudioFrame]:
    stage: Stage = VADStage(SileroVAD(), SpeechTracker(hangover_ms=64), twin=SileroVAD(),
                            floor_db=floor_db)  # fmt: skip
    stage.policy = "wait"  # offline: every frame, none dropped
    out: list[Frame] = []
    async with Pipeline([stage], sink=out.append) as p:
        for i in range(0, len(pcm), RATE // 50):
            await p.put(AudioFrame(pcm=pcm[i : i + RATE // 50], t=i / RATE))
        await p.put(EndFrame())
        await p.wait()
    return [f for f in out if isinstance(f, AudioFrame)]


def silence_at(frames: list[AudioFrame], at: float) -> float:
    """Silence (ms) turn-taking had counted at audio time ``at``."""
    loud_until, since = 0.0, None
    for f in frames:
        if f.t >= at:
            break
        if not f.faded:
            loud_until = f.end
        if f.prob is not None and f.prob >= 0.5:
            since = None
        elif since is None:
            since = min(f.t, max(loud_until, f.t - 0.25))
    return 0.0 if since is None else max(0.0, at - since) * 1000.0


def fade_after(frames: list[AudioFrame], end: float) -> float | None:
    """ms from ``end`` to the step from which the level stays faded (up to 0.6 s later)."""
    since = None
    for f in frames:
        if f.t < end - 0.1:
            continue
        if f.t > end + 0.6:
            break
        since = (since if since is not None else f.t) if f.faded else None
    return None if since is None else (since - end) * 1000.0


async def run(folders: list[Path]) -> None:
    counted: dict[tuple[float | None, str], list[list[float]]] = {}
    fades = {(fd, n): 0 for fd in FLOORS for n in (3, 6)}
    faded_at: dict[float | None, list[float | None]] = {fd: [] for fd in FLOORS}
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        for n, call in enumerate(manifest["calls"]):
            v = call["voice"]
            noise = line_noise(RATE * 2, v["noise_db"], v["hum"], n)
            for turn in call["turns"]:
                pcm = read_wav(folder / turn["wav"])
                onset, end = float(turn["onset_s"]), float(turn["end_s"])
                spans = turn.get("pauses_at_s")
                if spans is None:
                    spans = quiet_spans(pcm, onset, end, 0.45) if turn["pauses_s"] else []
                whole = np.concatenate([noise[: RATE // 2], pcm, noise[:RATE]])
                places = [a for a, _ in spans] + [end]
                for fd in FLOORS:
                    frames = await vad_frames(whole.astype(np.float32), fd)
                    for at in places:
                        row = [silence_at(frames, 0.5 + at + s) for s in SILENCES_S]
                        counted.setdefault((fd, call["lang"]), []).append(row)
                    faded_at[fd].append(fade_after(frames, 0.5 + end))
                    run_ = 0
                    for f in frames:
                        t = f.t - 0.5
                        inside = onset + 0.1 < t < end - 0.1 and not any(
                            a - 0.05 < t < b + 0.05 for a, b in spans
                        )
                        run_ = run_ + 1 if f.faded and inside else 0
                        for k in (3, 6):
                            fades[(fd, k)] += run_ == k
    for fd in FLOORS:
        for lang in ("all", "zh", "en"):
            rows = np.array([r for (f, lg), rs in counted.items() if f == fd for r in rs
                             if lang in ("all", lg)])  # fmt: skip
            print(f"floor_db={fd} {lang}: n={len(rows)} silence counted at "
                  f"{[int(s * 1000) for s in SILENCES_S]} ms: p50 {np.median(rows, 0).round()} "
                  f"p10 {np.percentile(rows, 10, 0).round()}")  # fmt: skip
        print(f"floor_db={fd}: fades inside speech, 48 ms {fades[(fd, 3)]}, 96 ms {fades[(fd, 6)]}")
        late = faded_at[fd]
        print(f"floor_db={fd}: the fade after a turn's end (of {len(late)}): within 100 ms "
              f"{sum(x is not None and x <= 100 for x in late)}, later than 200 ms "
              f"{sum(x is not None and x > 200 for x in late)}, not within 0.6 s "
              f"{sum(x is None for x in late)}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(run([Path(a) for a in sys.argv[1:]]))

"""Smart Turn on a call set: does the voice tell a pause inside a turn from the turn's end?

``rtgate voice smart-turn-eval --eval-dir DIR`` reads every turn of a ``make-eval`` set as
the bench plays it (the WAV, line noise and all) and asks Smart Turn v3.2 for P(complete):

- at each pause inside a turn (the caller goes on: negative), on the audio from 0.5 s
  before the true onset up to ``s`` seconds into the pause;
- at the turn's end (finished: positive), up to ``s`` seconds after the true end (past the
  WAV's own tail, its last 0.2 s of line noise repeated).

Per silence ``s`` and per language: ROC AUC, and the share of each side the fused table
would read as ``done`` (>= ``audio_done_p``) and as ``more`` (< ``audio_more_p``). Where
the pauses are: the manifest's ``pauses_at_s``; a set made before it was written gets the
stretches of at least 250 ms under -45 dBFS (10 ms frames) inside the true bounds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.eot import auc
from rtgate.apps.voice.frames import RATE, Pcm
from rtgate.apps.voice.labels import TRUE_DB
from rtgate.apps.voice.transport import read_wav
from rtgate.apps.voice.turns import AudioEndOfTurn, TurnRules

__all__ = ["SILENCES_S", "evaluate", "quiet_spans"]

SILENCES_S = (0.1, 0.2, 0.4, 0.6)
_FRAME = RATE // 100


def quiet_spans(pcm: Pcm, onset: float, end: float, min_s: float = 0.25) -> list[list[float]]:
    """Stretches of at least ``min_s`` whose 10 ms frames are all under -45 dBFS, inside
    ``[onset, end]`` (seconds): ``[start, end]`` each."""
    n = len(pcm) // _FRAME
    rms = np.sqrt(np.mean(pcm[: n * _FRAME].astype(np.float64).reshape(n, _FRAME) ** 2, 1))
    loud = 20.0 * np.log10(rms + 1e-12) > TRUE_DB
    out: list[list[float]] = []
    run = None
    for i in range(int(onset * 100), min(n, int(end * 100))):
        if not loud[i] and run is None:
            run = i
        elif loud[i] and run is not None:
            if (i - run) / 100 >= min_s:
                out.append([run / 100, i / 100])
            run = None
    return out


def _upto(pcm: Pcm, start: float, t: float, floor: Pcm) -> Pcm:
    """``pcm`` from ``start`` to ``t`` (seconds), continued with ``floor`` past its end."""
    a, b = int(start * RATE), int(t * RATE)
    out = pcm[a : min(b, len(pcm))]
    if b > len(pcm):
        more = b - len(pcm)
        out = np.concatenate([out, np.resize(floor, more).astype(np.float32)])
    return out


def evaluate(
    folder: Path,
    model: AudioEndOfTurn,
    silences: Sequence[float] = SILENCES_S,
    rules: TurnRules | None = None,
) -> dict[str, Any]:
    """Smart Turn at every pause inside a turn and at every turn's end of the set in
    ``folder``, after each silence in ``silences`` (see the module docstring)."""
    rules = rules or TurnRules()
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = []
    for call in manifest["calls"]:
        for turn in call["turns"]:
            pcm = read_wav(folder / turn["wav"])
            onset, end = float(turn["onset_s"]), float(turn["end_s"])
            floor = pcm[-int(0.2 * RATE) :]
            spans = turn.get("pauses_at_s")
            if spans is None:
                spans = quiet_spans(pcm, onset, end) if turn["pauses_s"] else []
            start = max(0.0, onset - rules.pre_speech_s)
            places = [("pause", a, b - a) for a, b in spans] + [("end", end, None)]
            for where, at, room in places:
                for s in silences:
                    if room is not None and s > room:
                        continue  # the caller spoke again before that much silence
                    p = model.p_end(_upto(pcm, start, at + s, floor))
                    rows.append({"lang": call["lang"], "wav": turn["wav"], "text": turn["text"],
                                 "where": where, "silence_s": s, "p": round(p, 4)})  # fmt: skip
    report: dict[str, Any] = {
        "eval_dir": str(folder),
        "render": manifest.get("render", "parts"),
        "done_p": rules.audio_done_p,
        "more_p": rules.audio_more_p,
        "by_silence": {},
        "scores": rows,
    }
    for s in silences:
        report["by_silence"][f"{s:g}"] = {
            lang: _summary(
                [r for r in rows if r["silence_s"] == s and lang in ("all", r["lang"])], rules
            )
            for lang in ("zh", "en", "all")
        }
    return report


def _summary(rows: list[dict[str, Any]], rules: TurnRules) -> dict[str, Any]:
    ends = [r["p"] for r in rows if r["where"] == "end"]
    pauses = [r["p"] for r in rows if r["where"] == "pause"]

    def share(xs: list[float], done: bool) -> float | None:
        if not xs:
            return None
        hit = [x >= rules.audio_done_p if done else x < rules.audio_more_p for x in xs]
        return round(sum(hit) / len(xs), 3)

    a = auc(ends, pauses)
    return {
        "ends": len(ends),
        "pauses": len(pauses),
        "auc": None if a is None else round(a, 4),
        "end_done": share(ends, True),
        "end_more": share(ends, False),
        "pause_done": share(pauses, True),
        "pause_more": share(pauses, False),
    }

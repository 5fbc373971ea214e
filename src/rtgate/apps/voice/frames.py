"""The frames that flow through the voice pipeline.

Two kinds, as in Pipecat:

- **data frames** (audio, transcripts, agent text and audio) travel in order through bounded
  queues; a full queue applies the stage's stated policy (wait, or drop the oldest audio);
- **control frames** (start, end, interruption, speech and turn events) jump the queue: a
  stage handles them before any queued data, on their own task, and never drops one.

Times called ``t`` are *audio* seconds since the call started (sample count / rate), so the
turn logic is the same whether audio arrives in real time or as fast as it can be read.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "RATE",
    "AgentAudioFrame",
    "AgentKind",
    "AgentStartedFrame",
    "AgentStoppedFrame",
    "AgentTextFrame",
    "AudioFrame",
    "ControlFrame",
    "DataFrame",
    "EndFrame",
    "Frame",
    "HoldFrame",
    "InterruptionFrame",
    "Pcm",
    "ResumeFrame",
    "SpeechStartFrame",
    "SpeechStopFrame",
    "StartFrame",
    "TranscriptFrame",
    "TurnEndFrame",
    "TurnPauseFrame",
]

RATE = 16_000
"""The pipeline's sample rate: 16 kHz mono float32 in [-1, 1]."""

Pcm = npt.NDArray[np.float32]
AgentKind = Literal["ack", "answer", "followup"]

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """Anything that flows between stages."""

    id: int = field(default_factory=lambda: next(_ids))


@dataclass(frozen=True, slots=True, kw_only=True)
class DataFrame(Frame):
    """Ordered content; may wait for queue space, or be dropped by an audio policy."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlFrame(Frame):
    """Jumps the queue and is never dropped."""


# -- control ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StartFrame(ControlFrame):
    """The call starts; ``lang`` is ``"zh"``, ``"en"`` or ``None`` (detect)."""

    lang: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndFrame(ControlFrame):
    """The call ends: each stage finishes its queued data, then forwards this and stops."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InterruptionFrame(ControlFrame):
    """The caller barged in at audio time ``t``: stop speaking, cancel generation."""

    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldFrame(ControlFrame):
    """The caller's line rose over its noise floor at audio time ``t`` while the agent
    talks: pause the agent's audio where it is (nothing is dropped) until a
    :class:`ResumeFrame` or an :class:`InterruptionFrame` says which it was."""

    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeFrame(ControlFrame):
    """The rise that paused the agent was not speech: play on from where it paused."""

    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStartFrame(ControlFrame):
    """VAD: the caller started speaking at ``t``."""

    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStopFrame(ControlFrame):
    """VAD: the caller has been silent since ``t`` (after the VAD hang-over)."""

    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndFrame(ControlFrame):
    """Turn-taking: the caller's turn ``turn`` is over; ``text`` is the latest transcript.

    ``t`` is when speech stopped, ``decided_t`` the audio time of the decision and
    ``rule`` the cue that decided it (``question``, ``clause``, ``complete``, ``timeout``,
    ``end``; with the audio model ``TEXT/VOICE``, e.g. ``ask/done``); ``p_end`` the
    end-of-turn score of ``text`` when there was one, ``p_audio`` the audio model's.
    """

    turn: int
    text: str
    lang: str
    t: float
    decided_t: float
    rule: str
    p_end: float | None = None
    p_audio: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnPauseFrame(ControlFrame):
    """Turn-taking: the caller of turn ``turn`` has paused since ``t`` and ``text`` (a
    partial covering the pause) is what they said so far. Not an end: the agent may prepare
    its answer to ``text`` but say nothing until the :class:`TurnEndFrame`; speech again
    (a :class:`SpeechStartFrame` before that end) withdraws it."""

    turn: int
    text: str
    lang: str
    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStartedFrame(ControlFrame):
    """Sent upstream by the output: the agent's audio started playing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStoppedFrame(ControlFrame):
    """Sent upstream by the output: the agent's audio stopped (finished or cut)."""

    interrupted: bool = False


# -- data ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioFrame(DataFrame):
    """Caller audio starting at ``t``; ``prob`` is the VAD's speech probability once known.

    ``faded``: the frame's level is far below the loudest frame since speech started (the
    VAD stage's ``fade_db``). The end of a word shows there first; Silero's probability
    only falls 80-140 ms later, so turn-taking dates the silence from the fade, and the ASR
    starts its end-of-speech decode on it.

    ``over_floor_db``: the frame's level over the line's noise floor (the median level heard
    outside speech), ``None`` until the floor is known. A voice starting shows there one or
    two steps before Silero's probability rises, which lets a barge-in pause the agent
    sooner (turns.py).
    """

    pcm: Pcm
    t: float
    prob: float | None = None
    faded: bool = False
    over_floor_db: float | None = None  # level over the line's noise floor, once known

    @property
    def end(self) -> float:
        return self.t + len(self.pcm) / RATE


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptFrame(DataFrame):
    """What the caller said in turn ``turn``, decoded from audio up to ``until``.

    A partial while the caller speaks; ``final`` once the turn has ended.
    """

    turn: int
    text: str
    lang: str
    until: float
    final: bool = False
    decode_ms: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentTextFrame(DataFrame):
    """Text for the agent to say; ``last`` closes that kind's utterance for the turn."""

    turn: int
    kind: AgentKind
    text: str
    lang: str
    last: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentAudioFrame(DataFrame):
    """Synthesised agent speech (16 kHz float32) for one sentence of ``text``."""

    turn: int
    kind: AgentKind
    text: str
    pcm: Pcm

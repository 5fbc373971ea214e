"""Voice activity: the Silero VAD (ONNX, from the ``silero-vad`` package) and its stage.

:class:`SileroVAD` is a plain synchronous model: ``prob(chunk)`` scores one 512-sample chunk
(32 ms at 16 kHz), carrying the recurrent state and the 64-sample context of the previous
chunk, as Silero's own wrapper does. The package is located, never imported: importing
``silero_vad`` pulls in torch. :class:`SpeechTracker` turns probabilities into speech
start/stop events with a start threshold, a lower stop threshold and a hang-over.
"""

from __future__ import annotations

import importlib.util
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rtgate.apps.voice.frames import (
    RATE,
    AudioFrame,
    Frame,
    Pcm,
    SpeechStartFrame,
    SpeechStopFrame,
    StartFrame,
)
from rtgate.apps.voice.pipeline import Stage
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = [
    "CHUNK",
    "SileroVAD",
    "SpeechTracker",
    "VADStage",
    "level_db",
    "silero_model_path",
]

CHUNK = 512  # samples per VAD step at 16 kHz
_CONTEXT = 64


def silero_model_path() -> Path:
    """Path of ``silero_vad.onnx`` inside the installed ``silero-vad`` package."""
    spec = importlib.util.find_spec("silero_vad")  # locate, never import: it pulls torch
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / "data" / "silero_vad.onnx"
        if path.is_file():
            return path
    raise ConfigError("silero_vad.onnx not found: pip install --no-deps silero-vad")


class SileroVAD:
    """Speech probability of 32 ms chunks of 16 kHz audio."""

    def __init__(self, path: Path | None = None) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(path or silero_model_path()), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self._sr = np.array(RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Forget the state and context (a new call)."""
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, _CONTEXT), dtype=np.float32)

    def prob(self, chunk: Pcm) -> float:
        """Speech probability of exactly ``CHUNK`` samples following the previous chunk."""
        if chunk.shape != (CHUNK,):
            raise InvalidRequest(f"VAD chunks are {CHUNK} samples, got shape {chunk.shape}")
        x = np.concatenate([self._context, chunk.reshape(1, CHUNK).astype(np.float32)], axis=1)
        out, self._state = self.session.run(
            None, {"input": x, "state": self._state, "sr": self._sr}
        )
        self._context = x[:, -_CONTEXT:]
        return float(out[0, 0])


def level_db(pcm: Pcm) -> float:
    """RMS level in dB relative to full scale (-120 for digital silence)."""
    power = float(np.mean(np.square(pcm, dtype=np.float64))) if len(pcm) else 0.0
    return 10.0 * float(np.log10(max(power, 1e-12)))


@dataclass(slots=True)
class SpeechTracker:
    """Speech start/stop from chunk probabilities.

    Speech starts at the first chunk at or above ``start`` (one chunk: barge-in must be
    fast). It stops once the probability has stayed below ``stop`` for ``hangover_ms``;
    the stop time reported is when that silence began.
    """

    start: float = 0.5
    stop: float = 0.35
    hangover_ms: float = 64.0
    speaking: bool = False
    _silent_since: float | None = None

    def update(
        self, t: float, prob: float, dur: float = CHUNK / RATE
    ) -> SpeechStartFrame | SpeechStopFrame | None:
        """Feed the step (``dur`` s) starting at audio time ``t``; return an event if any."""
        if not self.speaking:
            if prob >= self.start:
                self.speaking, self._silent_since = True, None
                return SpeechStartFrame(t=t)
            return None
        if prob >= self.stop:
            self._silent_since = None
            return None
        if self._silent_since is None:
            self._silent_since = t
        if (t + dur - self._silent_since) * 1000.0 >= self.hangover_ms:
            self.speaking = False
            return SpeechStopFrame(t=self._silent_since)
        return None

    @property
    def silent_since(self) -> float | None:
        """Start of the silence now running inside speech (before the hang-over ends)."""
        return self._silent_since


class VADStage(Stage):
    """Scores caller audio, forwards it with ``prob`` set, and emits speech start/stop
    control frames. Audio policy: drop the oldest when 64 frames wait.

    With a ``twin`` model the stage runs two Silero streams offset by 16 ms: each still sees
    contiguous 512-sample chunks (its state stays valid), and together they give a fresh
    probability every 16 ms, which takes ~16 ms off the time to notice a barge-in.

    Each frame also says whether it has ``faded``: its level is ``fade_db`` under the
    loudest frame since speech started (a level relative to the caller's own speech, so a
    quiet line and a loud one behave alike), or within ``floor_db`` of the line's noise
    floor (the median level of the last ``floor_hops`` steps heard outside speech, under
    ``floor_prob``), when that floor lies at least ``floor_snr_db`` under the peak. Without
    the floor a quiet caller on a noisy line never fades 30 dB: on the long-pause validation
    calls (speech peaks -25..-34 dBFS over line noise at -51..-63 dBFS) the fade came 240-500
    ms after the true end or not at all, and the end of speech was dated by Silero's
    probability instead, ~0.1 s late (docs/voice.md).

    Silero's recurrent state drifts over long stretches without speech: after 8.5 s of a
    phone line's noise at -50 dBFS it scored a quiet caller's words 0.1-0.3 and heard
    nothing of a 6 s turn after 11 s (natural5, val-pause2; docs/voice.md, Session 14), while
    a fresh state scores them 0.8-1.0. So both streams start afresh after ``reset_quiet_s``
    of audio with no speech (the tracker silent, the probability under ``floor_prob``), and
    again every ``reset_quiet_s`` while it lasts; ``None``: never.

    Silero is deaf to a quiet line: a Piper voice pitched down, speech at -33 dBFS (the 90th
    percentile of its 32 ms levels), scored at most 0.37 over a 7 s turn, and the agent
    heard only the last words (natural10; at +10 dB it scores 71 % of the chunks over 0.5).
    So the model hears the line lifted: the loudest hop of the last ``lift_window_s`` brought
    to ``lift_to_db``, by at most ``lift_max_db`` and never turned down (``lift_max_db`` 0:
    as it comes). Only what Silero hears is lifted: the levels, the fade, the noise floor
    and the audio passed on are the line's own. Picked on natural8 and natural9: voiced
    chunks scored over 0.5 in every turn, none of 20 s of line noise at -62..-35 dBFS over
    0.5 (docs/voice.md, Session 33). A line that carries the agent's own voice back, its echo
    not cancelled, is lifted too: run it with ``lift_max_db`` 0 (as ``hold_rise_db`` None).
    """

    name = "vad"
    policy = "drop_oldest"

    def __init__(
        self,
        vad: SileroVAD,
        tracker: SpeechTracker | None = None,
        twin: SileroVAD | None = None,
        *,
        fade_db: float = 30.0,
        floor_db: float | None = 8.0,
        floor_snr_db: float = 18.0,
        floor_prob: float = 0.2,
        floor_hops: int = 125,
        reset_quiet_s: float | None = 2.0,
        lift_to_db: float = -10.0,
        lift_max_db: float = 18.0,
        lift_window_s: float = 3.0,
    ) -> None:
        super().__init__()
        if lift_max_db < 0 or lift_window_s <= 0:
            raise InvalidRequest("lift_max_db must be >= 0 and lift_window_s > 0")
        self.lift_to_db, self.lift_max_db = lift_to_db, lift_max_db
        self.vads = [vad] if twin is None else [twin, vad]
        self.hop = CHUNK // len(self.vads)
        self.tracker = tracker or SpeechTracker()
        self.fade_db = fade_db
        self.floor_db, self.floor_snr_db, self.floor_prob = floor_db, floor_snr_db, floor_prob
        self.reset_quiet_s = reset_quiet_s
        self.resets = 0  # fresh Silero states after a stretch without speech
        self._quiet_s = 0.0  # audio heard without speech since the last reset or speech
        # levels of the last lift_window_s (bounded: one per hop), for the lift
        self._recent: deque[float] = deque(maxlen=max(1, round(lift_window_s * RATE / self.hop)))
        self._noise: deque[float] = deque(maxlen=floor_hops)  # levels heard outside speech
        self._floor: float | None = None  # their median, kept as they come (noise_floor)
        self._reset()

    def _reset(self) -> None:
        for v in self.vads:
            v.reset()
        self.tracker.speaking = False
        self._window = np.zeros(CHUNK, dtype=np.float32)  # the last CHUNK samples
        self._pending = np.zeros(0, dtype=np.float32)
        self._t = 0.0  # audio time of _pending[0]
        self._steps = 0
        self._peak_db = -120.0  # loudest hop since speech started
        self._noise.clear()
        self._recent.clear()
        self._floor = None
        self._quiet_s = 0.0

    async def process_frame(self, frame: Frame, upstream: bool) -> None:
        if isinstance(frame, StartFrame):
            self._reset()
            await self.push(frame, upstream)
            return
        if not isinstance(frame, AudioFrame):
            await self.push(frame, upstream)
            return
        if not len(self._pending):
            self._t = frame.t
        self._pending = np.concatenate([self._pending, frame.pcm.astype(np.float32)])
        hop = self.hop
        while len(self._pending) >= hop:
            piece, self._pending = self._pending[:hop], self._pending[hop:]
            self._window = np.concatenate([self._window[hop:], piece])
            t = self._t
            self._t += hop / RATE
            level = level_db(piece)
            self._recent.append(level)
            heard = self._window * self.lift() if self.lift_max_db > 0 else self._window
            prob = self.vads[self._steps % len(self.vads)].prob(heard)
            self._steps += 1
            event = self.tracker.update(t, prob, hop / RATE)
            if isinstance(event, SpeechStartFrame):
                self._peak_db = level
            elif self.tracker.speaking:
                self._peak_db = max(self._peak_db, level)
            if event is not None:
                await self.push(event)
            quiet = not self.tracker.speaking and prob < self.floor_prob
            self._quiet_s = self._quiet_s + hop / RATE if quiet else 0.0
            if self.reset_quiet_s is not None and self._quiet_s >= self.reset_quiet_s:
                for v in self.vads:  # a fresh state hears the next words (see the class)
                    v.reset()
                self._quiet_s = 0.0
                self.resets += 1
            if quiet:
                self._noise.append(level)
                if len(self._noise) >= 12:
                    self._floor = float(np.median(np.fromiter(self._noise, dtype=np.float64)))
            faded = level < self.fade_level()
            over = None if self._floor is None else level - self._floor
            frame_out = AudioFrame(pcm=piece, t=t, prob=prob, faded=faded, over_floor_db=over)
            await self.push(frame_out)

    def lift(self) -> float:
        """The factor the model hears the line by now (1.0: as it comes)."""
        if not self._recent:
            return 1.0
        db = min(self.lift_max_db, max(0.0, self.lift_to_db - max(self._recent)))
        return float(10.0 ** (db / 20.0))

    def noise_floor(self) -> float | None:
        """The line's noise level (dBFS) heard outside speech; ``None`` until 12 steps.
        Taken when a step is heard outside speech, not at every step: during speech, where
        the fade is read, it does not move. The fade uses it only with ``floor_db``; every
        frame carries its level over it (``AudioFrame.over_floor_db``)."""
        return self._floor

    def fade_level(self) -> float:
        """The level (dBFS) under which a step has faded: ``fade_db`` under the peak, or
        ``floor_db`` over the noise floor when that is higher and the caller is loud enough
        over the noise (``floor_snr_db``)."""
        level = self._peak_db - self.fade_db
        floor = self._floor
        if floor is not None and self.floor_db is not None:
            if floor <= self._peak_db - self.floor_snr_db:
                level = max(level, floor + self.floor_db)
        return level

"""Audio in from a sound card (PortAudio through ``sounddevice``, the ``soundcard`` extra).

PortAudio calls back from its own thread with each block of interleaved 16-bit frames; the
callback only stamps the block with its arrival time (UNIX seconds) and hands it over, and
the caller's thread decodes, resamples and frames it (:class:`~rtgate.apps.guard.audio.
S16Decoder`), so a window's end time is when its last sample reached the host, as for stdin.

Queue policy: at most ``buffer_s`` seconds of blocks wait for the stop path. A stop path that
far behind is broken, not slow; a newer block that finds the queue full is dropped and
counted (``dropped``), and so is a block PortAudio itself reports as overflowed
(``overflows``). The guard then still sees the audio it is given, late, and the counts say so.

Needs the PortAudio library (Debian ``libportaudio2``). ``device`` is a PortAudio device
name or index (``python -m sounddevice`` lists them); ALSA names such as ``hw:1,0`` need a
hint in the ALSA configuration to be listed.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.audio import S16Decoder
from rtgate.apps.guard.features import HOP, RATE
from rtgate.core.errors import InvalidRequest

__all__ = ["DeviceReader"]

F32 = npt.NDArray[np.float32]


class DeviceReader:
    """Chunks from a capture device: ``(chunk at 16 kHz, arrival_ts)``, as PcmReader gives.

    Args:
        device: PortAudio device name or index (None: the default input).
        rate: the device's sample rate; chunks are resampled to 16 kHz.
        channels: channels opened on the device.
        channel: the channel to keep, or a sequence of them (one row each).
        seconds: stop after this much audio (None: until the caller stops iterating).
        buffer_s: audio allowed to wait for the caller before blocks are dropped.
    """

    def __init__(
        self,
        device: str | int | None = None,
        rate: int = RATE,
        channels: int = 1,
        channel: int | Sequence[int] = 0,
        *,
        seconds: float | None = None,
        buffer_s: float = 2.0,
    ) -> None:
        if seconds is not None and not seconds > 0:
            raise InvalidRequest(f"seconds must be > 0, got {seconds}")
        if not 0.1 <= buffer_s <= 600:
            raise InvalidRequest(f"buffer_s must be in [0.1, 600], got {buffer_s}")
        self._decode = S16Decoder(rate, channels, channel)
        self.device, self.rate, self.channels = device, rate, channels
        self._sd = self._open_library()
        try:  # a wrong name, rate or channel count is an error now, not at the first read
            self._sd.check_input_settings(
                device=device, channels=channels, dtype="int16", samplerate=rate
            )
        except (ValueError, self._sd.PortAudioError) as e:
            raise InvalidRequest(f"cannot open sound card {device!r}: {e}") from e
        self.block = max(1, rate * HOP // RATE)  # frames per callback: 20 ms
        self._limit = None if seconds is None else round(seconds * rate)
        self._blocks: queue.Queue[tuple[bytes, float]] = queue.Queue(
            max(1, round(buffer_s * rate / self.block))
        )
        self.dropped = 0
        self.overflows = 0

    def _callback(self, indata: Any, frames: int, time_info: Any, status: Any) -> None:
        if status.input_overflow:
            self.overflows += 1
        try:
            self._blocks.put_nowait((bytes(indata), time.time()))
        except queue.Full:
            self.dropped += 1

    @staticmethod
    def _open_library() -> Any:
        try:
            import sounddevice as sd
        except (ImportError, OSError) as e:  # OSError: no PortAudio library
            raise InvalidRequest(f"sound card input needs the soundcard extra: {e}") from e
        return sd

    def __iter__(self) -> Iterator[tuple[F32, float]]:
        sd = self._sd
        try:
            stream = sd.RawInputStream(
                samplerate=self.rate,
                blocksize=self.block,
                device=self.device,
                channels=self.channels,
                dtype="int16",
                callback=self._callback,
            )
        except (ValueError, sd.PortAudioError) as e:
            raise InvalidRequest(f"cannot open sound card {self.device!r}: {e}") from e
        left = self._limit
        with stream:
            while left is None or left > 0:
                try:
                    buf, arrival = self._blocks.get(timeout=2.0)
                except queue.Empty:
                    raise InvalidRequest(f"sound card {self.device!r} sends no audio") from None
                if left is not None:
                    buf = buf[: left * self._decode.frame_bytes]
                    left -= len(buf) // self._decode.frame_bytes
                out = self._decode(buf, last=left == 0)
                if out is not None:
                    yield out, arrival

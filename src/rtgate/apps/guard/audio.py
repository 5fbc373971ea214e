"""Audio in: WAV files, raw 16-bit PCM streams, DCASE/MIMII folders, real-time pacing.

``read_wav`` parses RIFF/WAVE itself (PCM 8/16/24/32-bit, IEEE float 32/64, extensible
headers), takes one channel and resamples to 16 kHz. ``PcmReader`` cuts a byte stream (stdin)
of signed 16-bit little-endian samples into chunks. ``read_dataset`` finds the labelled WAVs
of a DCASE or MIMII style folder. ``paced`` replays windows at the speed they were recorded.
Bad input raises :class:`~rtgate.core.errors.InvalidRequest` with what was wrong.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import HOP, RATE, Resampler
from rtgate.core.errors import InvalidRequest

__all__ = [
    "DatasetItem",
    "PcmReader",
    "S16Decoder",
    "WavInfo",
    "WavStream",
    "paced",
    "read_dataset",
    "read_wav",
    "read_wav_info",
    "write_wav",
]

F32 = npt.NDArray[np.float32]
T = TypeVar("T")
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


@dataclass(frozen=True, slots=True)
class WavInfo:
    """What a WAV header says."""

    rate: int
    channels: int
    bits: int
    is_float: bool
    frames: int


def _chunks(data: bytes, name: str) -> dict[bytes, bytes]:
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidRequest(f"{name}: not a RIFF/WAVE file")
    out: dict[bytes, bytes] = {}
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        out.setdefault(cid, data[pos + 8 : pos + 8 + size])
        pos += 8 + size + (size & 1)
    if b"fmt " not in out or b"data" not in out:
        raise InvalidRequest(f"{name}: WAV without a fmt or data chunk")
    return out


def _parse(data: bytes, name: str) -> tuple[WavInfo, bytes]:
    ch = _chunks(data, name)
    tag, channels, rate, align, bits = _format(ch[b"fmt "], name)
    raw = ch[b"data"]
    raw = raw[: len(raw) - len(raw) % align]
    return WavInfo(rate, channels, bits, tag == _FLOAT, len(raw) // align), raw


def _format(fmt: bytes, name: str) -> tuple[int, int, int, int, int]:
    """``(tag, channels, rate, block_align, bits)`` of a fmt chunk, checked."""
    if len(fmt) < 16:
        raise InvalidRequest(f"{name}: fmt chunk too short")
    tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack_from("<H", fmt, 24)[0]  # first two bytes of the sub-format GUID
    ok = (tag == _PCM and bits in (8, 16, 24, 32)) or (tag == _FLOAT and bits in (32, 64))
    if not ok:
        raise InvalidRequest(f"{name}: unsupported WAV encoding (format {tag}, {bits} bits)")
    if channels < 1 or rate < 1 or align != channels * bits // 8:
        raise InvalidRequest(f"{name}: inconsistent WAV header ({channels} ch, {rate} Hz)")
    return tag, channels, rate, align, bits


def _decode(raw: bytes, info: WavInfo) -> F32:
    if info.is_float:
        with np.errstate(over="ignore"):  # a float64 past float32's range: inf, refused later
            x = np.frombuffer(raw, dtype="<f4" if info.bits == 32 else "<f8").astype(np.float32)
    elif info.bits == 8:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif info.bits == 24:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    else:
        dt = "<i2" if info.bits == 16 else "<i4"
        x = np.frombuffer(raw, dtype=dt).astype(np.float32) / float(1 << (info.bits - 1))
    return x.reshape(-1, info.channels)


def read_wav_info(path: str | Path) -> WavInfo:
    """The header of a WAV file."""
    p = Path(path)
    return _parse(_read(p), str(p))[0]


def _read(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except OSError as e:
        raise InvalidRequest(f"cannot read {p}: {e.strerror or e}") from e


def read_wav(path: str | Path, channel: int = 0) -> F32:
    """One channel of a WAV file as float32 in [-1, 1] at 16 kHz."""
    p = Path(path)
    info, raw = _parse(_read(p), str(p))
    if not 0 <= channel < info.channels:
        raise InvalidRequest(f"{p}: no channel {channel} (it has {info.channels})")
    x = np.ascontiguousarray(_decode(raw, info)[:, channel])
    if not np.isfinite(x).all():
        raise InvalidRequest(f"{p}: samples contain NaN or infinity")
    return Resampler.whole(x, info.rate) if info.rate != RATE else x


class WavStream:
    """One channel of a WAV file, read block by block at 16 kHz: memory stays bounded for a
    file of any length (``read_wav`` holds the whole file).

    ``info.frames`` is what the file holds; ``truncated`` is set when its header promised
    more (a copy cut short). A file with no audio at all is an ``InvalidRequest``.
    """

    def __init__(self, path: str | Path, channel: int = 0, block_s: float = 1.0) -> None:
        self.path = Path(path)
        name = str(self.path)
        try:
            self._file: BinaryIO = self.path.open("rb")
        except OSError as e:
            raise InvalidRequest(f"cannot read {name}: {e.strerror or e}") from e
        try:
            self.info, self._offset, declared = self._header(name)
        except BaseException:
            self._file.close()
            raise
        self.truncated = declared > self.info.frames
        if self.info.frames == 0:
            self._file.close()
            raise InvalidRequest(f"{name}: no audio (0 frames)")
        if not 0 <= channel < self.info.channels:
            self._file.close()
            raise InvalidRequest(f"{name}: no channel {channel} (it has {self.info.channels})")
        self.channel = channel
        self.block_frames = max(1, int(block_s * self.info.rate))

    def _header(self, name: str) -> tuple[WavInfo, int, int]:
        """The format, where the samples start, and how many frames the header declares."""
        f = self._file
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise InvalidRequest(f"{name}: not a RIFF/WAVE file")
        size = f.seek(0, 2)
        pos, fmt = 12, None
        while pos + 8 <= size:
            f.seek(pos)
            cid, n = struct.unpack("<4sI", f.read(8))
            if cid == b"fmt ":
                fmt = _format(f.read(min(n, 64)), name)
            elif cid == b"data":
                if fmt is None:
                    raise InvalidRequest(f"{name}: WAV data before its fmt chunk")
                tag, channels, rate, align, bits = fmt
                have = max(0, min(n, size - pos - 8)) // align
                info = WavInfo(rate, channels, bits, tag == _FLOAT, have)
                return info, pos + 8, n // align
            pos += 8 + n + (n & 1)
        raise InvalidRequest(f"{name}: WAV without a fmt or data chunk")

    def blocks(self) -> Iterator[F32]:
        """The channel's samples at 16 kHz, about ``block_s`` seconds at a time."""
        info, align = self.info, self.info.channels * self.info.bits // 8
        resample = Resampler(info.rate)
        left = info.frames
        try:
            self._file.seek(self._offset)
            while left > 0:
                n = min(self.block_frames, left)
                raw = self._file.read(n * align)
                left -= n
                x = np.ascontiguousarray(_decode(raw, info)[:, self.channel])
                if not np.isfinite(x).all():
                    raise InvalidRequest(f"{self.path}: samples contain NaN or infinity")
                yield resample(x, last=left == 0)
        finally:
            self._file.close()

    def close(self) -> None:
        self._file.close()


def write_wav(path: str | Path, audio: npt.ArrayLike, rate: int = RATE) -> None:
    """Write mono float audio in [-1, 1] as 16-bit PCM."""
    x = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    pcm = (x * 32767.0).round().astype("<i2").tobytes()
    head = struct.pack("<4sI4s", b"RIFF", 36 + len(pcm), b"WAVE")
    head += struct.pack("<4sIHHIIHH", b"fmt ", 16, _PCM, 1, rate, rate * 2, 2, 16)
    head += struct.pack("<4sI", b"data", len(pcm))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(head + pcm)


class S16Decoder:
    """Interleaved signed 16-bit little-endian frames -> float32 chunks at 16 kHz.

    ``channel``: one channel (1-D chunks) or a sequence of them (``(len(channel), n)``, one
    row per channel, each resampled on its own, e.g. one station per microphone).
    """

    def __init__(self, rate: int = RATE, channels: int = 1, channel: int | Sequence[int] = 0):
        picked = [channel] if isinstance(channel, int) else list(channel)
        if not 1 <= channels <= 64 or not picked or not all(0 <= c < channels for c in picked):
            raise InvalidRequest(f"bad channel layout: channel {channel} of {channels}")
        self.channels, self._picked = channels, picked
        self._rows = not isinstance(channel, int)
        self._resample = [Resampler(rate) for _ in picked]
        self.frame_bytes = 2 * channels

    def __call__(self, buf: bytes, last: bool = False) -> F32 | None:
        """The chunk for ``buf`` (whole frames), or None when the resampler holds it all."""
        if len(buf) % self.frame_bytes:
            raise InvalidRequest(
                f"PCM stream ended inside a frame ({len(buf)} bytes, frames of "
                f"{self.frame_bytes}): not s16le with {self.channels} channel(s)?"
            )
        frames = np.frombuffer(buf, dtype="<i2").reshape(-1, self.channels)
        outs = [
            rs(frames[:, c].astype(np.float32) / 32768.0, last=last)
            for c, rs in zip(self._picked, self._resample, strict=True)
        ]
        n = min(len(o) for o in outs)  # equal: the same filter on the same lengths
        if not n:
            return None
        return np.stack([o[:n] for o in outs]) if self._rows else outs[0]


class PcmReader:
    """Raw signed 16-bit little-endian PCM from a byte stream, 20 ms at a time.

    Yields the chunks of a :class:`S16Decoder` (``channel``: one, or a sequence for one row
    per channel). A read returning fewer bytes (a pipe) is completed by more reads; at the end
    of the stream a last partial chunk is yielded, and a torn frame is an error.
    """

    def __init__(
        self,
        stream: BinaryIO,
        rate: int = RATE,
        channels: int = 1,
        channel: int | Sequence[int] = 0,
    ) -> None:
        self._stream = stream
        self._decode = S16Decoder(rate, channels, channel)
        self.frame_bytes = self._decode.frame_bytes
        self.chunk_bytes = self.frame_bytes * max(1, rate * HOP // RATE)

    def _read_full(self) -> bytes:
        buf = b""
        while len(buf) < self.chunk_bytes:
            got = self._stream.read(self.chunk_bytes - len(buf))
            if not got:
                break
            buf += got
        return buf

    def __iter__(self) -> Iterator[F32]:
        while True:
            buf = self._read_full()
            last = len(buf) < self.chunk_bytes
            out = self._decode(buf, last=last)
            if out is not None:
                yield out
            if last:
                return


@dataclass(frozen=True, slots=True)
class DatasetItem:
    """One labelled recording of a DCASE/MIMII folder."""

    path: Path
    anomalous: bool
    machine: str


_NORMAL = {"normal"}
_ANOMALY = {"abnormal", "anomaly"}
_SPLITS = {"train", "test", "source_test", "target_test", "supplemental"}
_ID = re.compile(r"(?:^|_)((?:id|section)_\d+)")


def _label(path: Path) -> bool | None:
    for part in reversed(path.parent.parts):
        if part.lower() in _NORMAL:
            return False
        if part.lower() in _ANOMALY:
            return True
    tokens = set(path.stem.lower().split("_"))
    if tokens & _ANOMALY:
        return True
    if tokens & _NORMAL:
        return False
    return None


def read_dataset(root: str | Path) -> list[DatasetItem]:
    """Labelled WAVs under ``root``, sorted by path; unlabelled files are skipped.

    Understands MIMII (``fan/id_00/normal/00000000.wav``, ``.../abnormal/...``) and DCASE
    task 2 (``fan/train/normal_id_00_00000000.wav``,
    ``fan/test/section_00_source_test_anomaly_0001_*.wav``). The machine is the folder path
    without the label and split folders, plus the id or section in the file name.
    Raises :class:`InvalidRequest` when ``root`` holds no labelled WAV.
    """
    base = Path(root)
    if not base.is_dir():
        raise InvalidRequest(f"dataset folder not found: {base}")
    items = []
    for p in sorted(base.rglob("*")):
        if p.suffix.lower() != ".wav" or not p.is_file():
            continue
        label = _label(p)
        if label is None:
            continue
        parts = [s for s in p.relative_to(base).parent.parts if s.lower() not in _NORMAL | _ANOMALY]
        parts = [s for s in parts if s.lower() not in _SPLITS]
        m = _ID.search(p.stem.lower())
        if m and m.group(1) not in parts:
            parts.append(m.group(1))
        items.append(DatasetItem(p, label, "/".join(parts) or "default"))
    if not items:
        raise InvalidRequest(f"no labelled WAV (normal/anomaly) under {base}")
    return items


def paced(
    windows: Iterable[T],
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[tuple[T, float]]:
    """Replay 20 ms windows in real time: yield each when its last sample would arrive.

    A window may be anything that stands for 20 ms of audio (one station's, or a stack).

    Yields ``(window, window_end_ts)`` with ``window_end_ts`` read from ``clock`` (UNIX time)
    once the window is due. Windows that are late (a slow consumer) are yielded at once, so
    the stream catches up, each stamped with the time it was really handed over.
    """
    start = clock()
    for i, w in enumerate(windows):
        due = start + (i + 1) * HOP / RATE
        wait = due - clock()
        if wait > 0:
            sleep(wait)
        yield w, clock()

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.guard.audio import (
    PcmReader,
    paced,
    read_dataset,
    read_wav,
    read_wav_info,
    write_wav,
)
from rtgate.apps.guard.features import HOP, RATE
from rtgate.core.errors import InvalidRequest


def _tone(rate: int, seconds: float = 0.5, f: float = 440.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * f * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def _wav_bytes(
    data: bytes, tag: int, channels: int, rate: int, bits: int, ext: bool = False
) -> bytes:
    align = channels * bits // 8
    if ext:
        fmt = struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * align, align, bits)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + b"\x00" * 14
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"LIST" + struct.pack("<I", 4) + b"INFO"  # a chunk to skip
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _peak_hz(x: np.ndarray) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spec) * RATE / len(x))


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_wav_at_any_rate_comes_back_at_16k(tmp_path: Path, rate: int) -> None:
    p = tmp_path / f"t{rate}.wav"
    write_wav(p, _tone(rate), rate)
    info = read_wav_info(p)
    assert (info.rate, info.channels, info.bits) == (rate, 1, 16)
    x = read_wav(p)
    assert abs(len(x) - RATE // 2) <= 2
    assert abs(_peak_hz(x) - 440) < 3


def test_float_24bit_extensible_and_stereo(tmp_path: Path) -> None:
    left, right = _tone(RATE, f=300), _tone(RATE, f=1200)
    f32 = np.stack([left, right], 1).astype("<f4").tobytes()
    (tmp_path / "f.wav").write_bytes(_wav_bytes(f32, 3, 2, RATE, 32))
    assert abs(_peak_hz(read_wav(tmp_path / "f.wav", channel=1)) - 1200) < 3
    v = (left * (1 << 23)).astype(np.int32)
    b24 = np.stack([v & 255, (v >> 8) & 255, (v >> 16) & 255], 1).astype(np.uint8).tobytes()
    (tmp_path / "i24.wav").write_bytes(_wav_bytes(b24, 1, 1, RATE, 24, ext=True))
    np.testing.assert_allclose(read_wav(tmp_path / "i24.wav"), left, atol=1e-6)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"not a wav at all", "not a RIFF/WAVE"),
        (_wav_bytes(b"\x00" * 64, 2, 1, RATE, 4), "unsupported WAV encoding"),
        (_wav_bytes(b"\x00" * 64, 1, 0, RATE, 16), "inconsistent WAV header"),
        (b"RIFF\x04\x00\x00\x00WAVE", "without a fmt or data"),
    ],
)
def test_bad_wav_files_say_what_is_wrong(tmp_path: Path, blob: bytes, message: str) -> None:
    p = tmp_path / "bad.wav"
    p.write_bytes(blob)
    with pytest.raises(InvalidRequest, match=message):
        read_wav(p)


def test_missing_file_and_channel(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="cannot read"):
        read_wav(tmp_path / "nope.wav")
    write_wav(tmp_path / "m.wav", _tone(RATE))
    with pytest.raises(InvalidRequest, match="no channel 1"):
        read_wav(tmp_path / "m.wav", channel=1)


class _Trickle(io.RawIOBase):
    """A pipe that hands out a few bytes per read."""

    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(min(n, 7) if n > 0 else 7)


def test_pcm_stdin_framing_survives_short_reads() -> None:
    x = (np.arange(1000) % 200 - 100).astype("<i2")
    chunks = list(PcmReader(_Trickle(x.tobytes())))  # type: ignore[arg-type]
    assert [len(c) for c in chunks] == [HOP, HOP, HOP, 40]
    np.testing.assert_allclose(np.concatenate(chunks), x / 32768.0)


def test_pcm_picks_a_channel_and_resamples() -> None:
    rate = 48000
    left = (_tone(rate, 1.0, 1000) * 32767).astype("<i2")
    inter = np.stack([np.zeros_like(left), left], 1).tobytes()
    out = np.concatenate(list(PcmReader(io.BytesIO(inter), rate=rate, channels=2, channel=1)))
    assert abs(len(out) - RATE) <= 2
    assert abs(_peak_hz(out[1000:-1000]) - 1000) < 3


def test_pcm_torn_frame_is_an_error() -> None:
    with pytest.raises(InvalidRequest, match="inside a frame"):
        list(PcmReader(io.BytesIO(b"\x00" * 641)))
    with pytest.raises(InvalidRequest):
        PcmReader(io.BytesIO(b""), channels=2, channel=2)


def test_reads_mimii_and_dcase_layouts(tmp_path: Path) -> None:
    tone = _tone(RATE, 0.1)
    for rel in [
        "mimii/fan/id_00/normal/00000000.wav",
        "mimii/fan/id_00/abnormal/00000000.wav",
        "mimii/fan/id_02/normal/00000001.wav",
        "dcase/pump/train/normal_id_00_00000000.wav",
        "dcase/pump/test/anomaly_id_00_00000001.wav",
        "dcase/valve/test/section_01_source_test_anomaly_0001_v1pat_00.wav",
        "dcase/valve/test/section_01_0003.wav",  # evaluation file: no label, skipped
    ]:
        write_wav(tmp_path / rel, tone)
    (tmp_path / "mimii/readme.txt").write_text("not audio")
    items = read_dataset(tmp_path)
    got = {(str(i.path.relative_to(tmp_path)), i.anomalous, i.machine) for i in items}
    assert got == {
        ("dcase/pump/test/anomaly_id_00_00000001.wav", True, "dcase/pump/id_00"),
        ("dcase/pump/train/normal_id_00_00000000.wav", False, "dcase/pump/id_00"),
        (
            "dcase/valve/test/section_01_source_test_anomaly_0001_v1pat_00.wav",
            True,
            "dcase/valve/section_01",
        ),
        ("mimii/fan/id_00/abnormal/00000000.wav", True, "mimii/fan/id_00"),
        ("mimii/fan/id_00/normal/00000000.wav", False, "mimii/fan/id_00"),
        ("mimii/fan/id_02/normal/00000001.wav", False, "mimii/fan/id_02"),
    }
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidRequest, match="no labelled WAV"):
        read_dataset(tmp_path / "empty")
    with pytest.raises(InvalidRequest, match="not found"):
        read_dataset(tmp_path / "missing")


def test_paced_replay_waits_for_each_window_on_a_fake_clock() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    windows = [np.zeros(HOP, np.float32)] * 3
    stamps = [ts for _, ts in paced(windows, clock=lambda: now[0], sleep=sleep)]
    assert stamps == pytest.approx([100.02, 100.04, 100.06])
    assert slept == pytest.approx([0.02, 0.02, 0.02])


def test_pcm_gives_one_row_per_picked_channel() -> None:
    rate = 48000
    rng = np.random.default_rng(3)
    inter = (rng.standard_normal((rate // 2, 3)) * 3000).astype("<i2").tobytes()
    rows = np.concatenate(
        list(PcmReader(io.BytesIO(inter), rate=rate, channels=3, channel=[2, 0])), axis=1
    )
    assert rows.shape[0] == 2
    for row, ch in zip(rows, (2, 0), strict=True):
        alone = np.concatenate(
            list(PcmReader(io.BytesIO(inter), rate=rate, channels=3, channel=ch))
        )
        np.testing.assert_array_equal(row, alone)  # each channel resampled on its own
    with pytest.raises(InvalidRequest, match="channel layout"):
        PcmReader(io.BytesIO(b""), channels=2, channel=[0, 2])

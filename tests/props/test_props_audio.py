"""Properties of the audio readers: any bytes give samples or an InvalidRequest."""

from __future__ import annotations

import io
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgate.apps.guard.audio import PcmReader, read_wav
from rtgate.core.errors import InvalidRequest


def _wav_bytes(
    tag: int, channels: int, rate: int, bits: int, align: int, data: bytes, extra: bytes = b""
) -> bytes:
    fmt = struct.pack("<HHIIHH", tag, channels, rate, (rate * align) & 0xFFFFFFFF, align, bits)
    fmt += extra
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@st.composite
def wavs(draw: st.DrawFn) -> bytes:
    tag = draw(st.sampled_from([1, 3, 0xFFFE, 2, 0]))
    channels = draw(st.integers(0, 3))
    bits = draw(st.sampled_from([8, 16, 24, 32, 64, 12, 0]))
    align = draw(st.sampled_from([channels * bits // 8, draw(st.integers(0, 9))]))
    rate = draw(st.sampled_from([16000, 8000, 44100, 1, 0, 2**31]))
    data = draw(st.binary(max_size=600))
    extra = draw(st.sampled_from([b"", b"\x16\x00" + b"\x00" * 6 + b"\x01\x00" + b"\x00" * 14]))
    raw = _wav_bytes(tag, channels, rate, bits, align, data, extra)
    if draw(st.booleans()):  # damage: truncate or flip bytes
        cut = draw(st.integers(0, len(raw)))
        raw = (
            raw[:cut]
            if draw(st.booleans())
            else raw[:cut] + bytes([raw[cut : cut + 1][0] ^ 0xFF] if cut < len(raw) else [])
        )
    return raw


def _read(raw: bytes) -> np.ndarray | InvalidRequest:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.wav"
        p.write_bytes(raw)
        try:
            return read_wav(p)
        except InvalidRequest as e:
            assert str(e)
            return e


@settings(max_examples=300, deadline=None)
@given(st.one_of(wavs(), st.binary(max_size=200)))
def test_any_wav_bytes_give_finite_samples_or_invalid_request(raw: bytes) -> None:
    out = _read(raw)
    if isinstance(out, np.ndarray):
        assert out.dtype == np.float32 and out.ndim == 1
        assert np.isfinite(out).all()


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=3000),
    st.lists(st.integers(1, 700), min_size=1, max_size=10),
    st.sampled_from([(16000, 1), (8000, 1), (16000, 2), (48000, 2)]),
)
def test_pcm_reader_is_invariant_to_short_reads(
    data: bytes, sizes: list[int], layout: tuple[int, int]
) -> None:
    rate, channels = layout

    class Trickle(io.RawIOBase):
        """A pipe that returns fewer bytes than asked, in a fixed pattern."""

        def __init__(self) -> None:
            self.buf, self.i = data, 0

        def read(self, n: int = -1) -> bytes:
            k = min(n, sizes[self.i % len(sizes)])
            self.i += 1
            out, self.buf = self.buf[:k], self.buf[k:]
            return out

    def collect(stream: io.RawIOBase | io.BytesIO) -> list[np.ndarray] | str:
        try:
            return list(PcmReader(stream, rate=rate, channels=channels))  # type: ignore[arg-type]
        except InvalidRequest as e:
            return str(e)

    whole, pieces = collect(io.BytesIO(data)), collect(Trickle())
    if isinstance(whole, str):
        assert isinstance(pieces, str) and "inside a frame" in whole
        assert len(data) % (2 * channels)
        return
    assert not isinstance(pieces, str)
    a = np.concatenate(whole) if whole else np.zeros(0, np.float32)
    b = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert np.isfinite(a).all()
    if rate == 16000:  # no resampling: plain s16 scaling stays in [-1, 1)
        assert np.all(np.abs(a) <= 1.0)


def test_a_float64_sample_past_float32s_range_is_refused_not_a_warning(tmp_path: Path) -> None:
    data = struct.pack("<d", 1e300)
    fmt = struct.pack("<HHIIHH", 3, 1, 16000, 16000 * 8, 8, 64)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    riff += b"data" + struct.pack("<I", len(data)) + data
    path = tmp_path / "big.wav"
    path.write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    with pytest.raises(InvalidRequest, match="NaN or infinity"):
        read_wav(path)

"""guard scan streams its files: the same stops as a whole-file read, bounded blocks, and
a clear word for a WAV with no audio or one cut short."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rtgate.apps.guard.audio import WavStream, read_wav, write_wav
from rtgate.apps.guard.cli import app, scan_files
from rtgate.apps.guard.features import HOP, RATE
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.simulate import Clip
from rtgate.core.errors import InvalidRequest

runner = CliRunner()


def _whole_file_stops(path: Path) -> list[int]:
    """What scan found when it read the whole file at once (the reference)."""
    audio = read_wav(path)
    guard = Guard(["scan"])
    stops = []
    for i in range(len(audio) // HOP):
        end = (i + 1) * HOP / RATE
        stops += [
            round(end * 1000) for _ in guard.process(audio[i * HOP : (i + 1) * HOP][None], end)
        ]
    return stops


def test_streamed_scan_finds_what_a_whole_file_read_finds(tmp_path: Path, fault_clip: Clip) -> None:
    path = tmp_path / "bad.wav"
    write_wav(path, fault_clip.audio)
    (res,) = scan_files([path])
    assert [s["t_ms"] for s in res["stops"]] == _whole_file_stops(path)
    assert res["stops"] and "warning" not in res


def test_blocks_are_bounded_and_cover_the_file(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    write_wav(path, np.zeros(RATE * 5 + 123, np.float32))
    wav = WavStream(path, block_s=0.5)
    sizes = [len(b) for b in wav.blocks()]
    assert max(sizes) <= RATE // 2 and sum(sizes) == RATE * 5 + 123


def test_a_wav_with_no_audio_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    write_wav(path, np.zeros(0, np.float32))
    with pytest.raises(InvalidRequest, match="no audio"):
        WavStream(path)
    res = runner.invoke(app, ["scan", str(path)])
    assert res.exit_code == 2 and "no audio" in res.output


def test_a_truncated_wav_is_scanned_with_a_warning(tmp_path: Path, fault_clip: Clip) -> None:
    path = tmp_path / "cut.wav"
    write_wav(path, fault_clip.audio)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "scan.json"
    res = runner.invoke(app, ["scan", "--json", str(out), str(path)])
    assert res.exit_code == 0, res.output
    (entry,) = json.loads(out.read_text())
    assert entry["warning"].startswith("truncated")
    assert "warning:" in res.output

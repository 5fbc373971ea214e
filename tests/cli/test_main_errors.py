"""Bad input on the command line is one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rtgate.apps.voice.packaged import data_path


def _rtgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtgate", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("content", [b"", b"not audio at all", "truncated"])
def test_voice_run_on_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes | str
) -> None:
    bad = tmp_path / "call.wav"
    if content == "truncated":
        content = data_path("clips", "en_balance.wav").read_bytes()[:30]
    assert isinstance(content, bytes)
    bad.write_bytes(content)
    done = _rtgate("voice", "run", str(bad))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rtgate: error: "), done.stderr


def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "rtgate.toml"
    cfg.write_text("[server]\nport = 99999\n", encoding="utf-8")
    done = _rtgate("serve", "--config", str(cfg))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "port" in done.stderr

"""llama.cpp's own log lines go where RTGATE_NATIVE_LOG says, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtgate.backends.native_log import ENV

pytestmark = pytest.mark.slow

_LOAD = (
    "from rtgate.backends._llama_engine import LlamaEngine\n"
    "from rtgate.models.locate import locate_model\n"
    "LlamaEngine(locate_model('gemma3-270m'), n_ctx=512, n_threads=1)\n"
    "print('loaded')\n"
)


def _load(target: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if target is not None:
        env[ENV] = target
    return subprocess.run(
        [sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_file_target_takes_every_line_and_stderr_stays_clean(tmp_path: Path) -> None:
    log = tmp_path / "native.log"
    done = _load(str(log))
    assert done.returncode == 0, done.stderr
    assert "loaded" in done.stdout
    assert "llama_" not in done.stderr
    assert "llama_context" in log.read_text(encoding="utf-8")


def test_stderr_target_shows_the_lines() -> None:
    done = _load("stderr")
    assert done.returncode == 0, done.stderr
    assert "llama_context" in done.stderr


def test_unset_keeps_only_warnings(tmp_path: Path) -> None:
    done = _load(None)
    assert done.returncode == 0, done.stderr
    quiet, loud = done.stderr, _load("stderr").stderr
    assert len(quiet.splitlines()) < len(loud.splitlines())

"""Hostile input on the command line, through the real entry point (``rtgate`` = this
``main``): random file contents for the commands that read files, hostile text for the ones
that take it. The property: exit 0, 1 or 2 with at most a line or two on stderr, never a
traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtgate.__main__ import main

CLI = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NASTY = ["\x00", "\x07", "\u202e", "\ufeff", "'", '"', "{", "}", "/", "+", "#", "..", "-"]
words = st.lists(st.one_of(st.text(max_size=5), st.sampled_from(NASTY)), max_size=6).map("".join)


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    old = sys.argv
    sys.argv = ["rtgate", *args]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    err = capsys.readouterr().err
    return code, err


def _clean(code: int, err: str) -> None:
    assert code in (0, 1, 2), err
    assert "Traceback" not in err, err


@CLI
@given(data=st.binary(max_size=96))
def test_commands_that_read_a_file_refuse_garbage_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes
) -> None:
    bad = tmp_path / "input.wav"
    bad.write_bytes(data)
    for args in (
        ["guard", "scan", str(bad)],
        ["voice", "run", str(bad)],
        ["keys", "list", "--store", str(bad)],
    ):
        _clean(*_run(args, capsys))


@CLI
@given(topic=words, station=words)
def test_guard_run_refuses_any_topic_or_station_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], topic: str, station: str
) -> None:
    wav = tmp_path / "none.wav"
    wav.write_bytes(b"")
    args = ["guard", "run", "--no-llm", "--broker", "mqtt://127.0.0.1:1", "--topic", topic]
    code, err = _run([*args, "--station", station or "x", str(wav)], capsys)
    _clean(code, err)
    assert code == 2  # an empty file, a bad topic or no broker: refused before any audio

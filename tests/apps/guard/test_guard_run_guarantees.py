"""``guard run``: topics checked before any audio, no broker and no fail-safe refused at start,
exit 3 for a stop that reached nothing, SIGTERM and SIGINT leave no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rtgate.apps.guard.cli import app
from rtgate.apps.guard.runner import EXIT_UNDELIVERED
from rtgate.apps.guard.simulate import Clip
from tests.apps.guard.guard_helpers import SHARED_BROKER, Subscriber, clear_retained, subscribe

runner = CliRunner()
NO_BROKER = "mqtt://127.0.0.1:1"  # nothing listens there: refused at once


@pytest.fixture
def stdin_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace the stdin reader by one that records each time audio is asked for."""
    from rtgate.apps.guard import cli

    reads: list[int] = []

    class Spy:
        def __init__(self, *args: object, **kw: object) -> None:
            pass

        def __iter__(self) -> Iterator[Any]:  # a generator, as PcmReader's: runs on next()
            reads.append(1)
            yield from ()

    monkeypatch.setattr(cli, "PcmReader", Spy)
    return reads


def _pcm(clip: Clip) -> bytes:
    return (clip.audio * 32767).astype("<i2").tobytes()


@pytest.mark.parametrize(
    ("option", "value", "shown"),
    [
        ("--topic", "line/+/stop", "wildcards"),
        ("--topic", "line/#", "wildcards"),
        ("--topic", "line/{nope}/stop", "unknown placeholder {nope}"),
        ("--status-topic", "plant/+/{station}", "wildcards"),
        ("--status-topic", "plant/{line}/status", "unknown placeholder {line}"),
    ],
)
def test_a_topic_that_cannot_be_published_to_is_refused_before_any_audio(
    tmp_path: Path, stdin_reads: list[int], option: str, value: str, shown: str
) -> None:
    args = ["run", "-", "--station", "C", option, value, "--broker", NO_BROKER]
    res = runner.invoke(app, [*args, "--no-llm", "--db", str(tmp_path / "o.sqlite")])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)  # not a crash
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and shown in lines[0]
    assert "Traceback" not in res.output
    assert stdin_reads == []  # and the broker was not tried (that error would come first)


def test_no_broker_and_no_failsafe_is_refused_at_start(
    tmp_path: Path, stdin_reads: list[int]
) -> None:
    args = ["run", "-", "--station", "C", "--broker", NO_BROKER, "--no-llm"]
    res = runner.invoke(app, [*args, "--db", str(tmp_path / "o.sqlite")])
    assert res.exit_code == 2, res.output
    assert "not reachable" in res.output and "--allow-no-failsafe" in res.output
    assert stdin_reads == []
    res = runner.invoke(app, [*args, "--db", str(tmp_path / "o.sqlite"), "--allow-no-failsafe"])
    assert res.exit_code == 0, res.output  # no audio, no stop: nothing undelivered
    assert stdin_reads == [1]  # the spy does see a read


@pytest.mark.slow
def test_allowed_without_failsafe_an_undelivered_stop_ends_the_run_with_exit_3(
    tmp_path: Path, fault_clip: Clip
) -> None:
    audit = tmp_path / "a.jsonl"
    args = ["run", "-", "--station", "C", "--broker", NO_BROKER, "--allow-no-failsafe"]
    args += ["--no-llm", "--db", str(tmp_path / "o.sqlite"), "--audit", str(audit)]
    res = runner.invoke(app, args, input=_pcm(fault_clip))
    assert res.exit_code == EXIT_UNDELIVERED == 3, res.output
    assert "1 stop(s) not delivered" in res.output
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    safe = [e for e in events if e["event"] == "failsafe"]
    assert len(safe) == 1 and safe[0]["action"] == "none" and safe[0]["station"] == "C"


@pytest.mark.slow
def test_with_a_failsafe_an_unreachable_broker_still_stops_the_line(
    tmp_path: Path, fault_clip: Clip
) -> None:
    out = tmp_path / "relay.json"
    cmd = f"{sys.executable} -c \"import os; open('{out}', 'w').write(os.environ['RTGATE_STOP'])\""
    args = ["run", "-", "--station", "C", "--broker", NO_BROKER, "--failsafe-cmd", cmd]
    res = runner.invoke(
        app, [*args, "--no-llm", "--db", str(tmp_path / "o.sqlite")], input=_pcm(fault_clip)
    )
    assert res.exit_code == 0, res.output
    _wait_for(lambda: out.exists() and bool(out.read_text()), 10.0, "fail-safe command")
    assert json.loads(out.read_text())["station"] == "C"


# -- a real guard process and its children -------------------------------------------------


def _wait_for(ok: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll a real process's state (there is no event to wait on across processes)."""
    end = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) from /proc, None when the process is gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return rest[0], int(rest[1])


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _children(pid: int) -> dict[int, str]:
    """Live children of ``pid``: their command lines."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _stat(int(d.name))) and st[1] == pid and st[0] != "Z":
            try:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                pass
    return out


def _start_guard(tmp_path: Path, status: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "rtgate", "guard", "run", "-", "--station", "C"]
    args += ["--topic", f"{status}/stop", "--status-topic", status, "--no-llm"]
    args += ["--db", str(tmp_path / "o.sqlite")]
    return subprocess.Popen(
        args,
        stdin=subprocess.PIPE,  # held open: the guard waits for audio until signalled
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as under a terminal or a service
    )


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "reason"), [("SIGTERM", "terminated"), ("SIGINT", "interrupted")])
def test_a_signal_ends_the_guard_and_every_child_and_sets_the_status_offline(
    tmp_path: Path, topic_root: str, shared_sub: Subscriber, sig: str, reason: str
) -> None:
    status = f"{topic_root}/C/status"
    proc = _start_guard(tmp_path, status)
    try:
        assert shared_sub.wait(1, timeout=60.0), "the guard never came online"
        assert shared_sub.got[0][1]["state"] == "online"
        kids: dict[int, str] = {}

        def both_children() -> bool:
            kids.update(_children(proc.pid))
            text = " ".join(kids.values())
            return "spawn_main" in text and "resource_tracker" in text

        _wait_for(both_children, 60.0, "the explainer child and the resource tracker")
        if sig == "SIGTERM":  # a service manager: the main process only
            proc.send_signal(signal.SIGTERM)
        else:  # Ctrl-C at a terminal: the whole foreground group
            os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
        assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()
        _wait_for(lambda: not any(_alive(k) for k in kids), 10.0, f"children {kids} to end")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    seen = subscribe(*SHARED_BROKER, status)  # the retained status, as a PLC would read it
    try:
        assert seen.wait(1, timeout=5.0)
        last = seen.got[-1][1]
        assert last["state"] == "offline" and last["reason"] == reason
    finally:
        seen.client.disconnect()
        seen.client.loop_stop()
        clear_retained(status)


_PARENT_OF_AN_EXPLAINER = """
import sys
from rtgate.apps.guard.explain_child import ExplainConfig, ExplainProcess
w = ExplainProcess(ExplainConfig(sys.argv[1], llm=False)).start(wait=True, wait_s=60)
print(w._proc.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_the_explainer_child_does_not_outlive_a_killed_parent(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PARENT_OF_AN_EXPLAINER, str(tmp_path / "o.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert _alive(child)
        proc.send_signal(signal.SIGKILL)  # no clean-up in the parent at all
        proc.wait(10)
        _wait_for(lambda: not _alive(child), 10.0, "the orphaned explainer to exit")
    finally:
        proc.kill()

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rtgate.apps.guard.audio import read_wav, write_wav
from rtgate.apps.guard.cli import app
from rtgate.apps.guard.features import HOP
from rtgate.apps.guard.simulate import Clip
from tests.apps.guard.guard_helpers import SHARED_BROKER, Subscriber, clear_retained

runner = CliRunner()


def test_scan_reports_stops_per_file(tmp_path: Path, normal_clip: Clip, fault_clip: Clip) -> None:
    write_wav(tmp_path / "ok.wav", normal_clip.audio)
    write_wav(tmp_path / "bad.wav", fault_clip.audio)
    out = tmp_path / "scan.json"
    res = runner.invoke(
        app, ["scan", "--json", str(out), str(tmp_path / "ok.wav"), str(tmp_path / "bad.wav")]
    )
    assert res.exit_code == 0, res.output
    ok, bad = json.loads(out.read_text())
    assert ok == {
        "file": str(tmp_path / "ok.wav"),
        "max_score": ok["max_score"],
        "stops": [],
        "station": "ok",  # the file's name: no enrolment of that station
        "enrolment": None,
        "max_detector_score": ok["max_score"],
    }
    assert "no enrolment for ok, bad" in res.stderr
    assert ok["max_score"] < 0.92 <= bad["max_score"]
    assert len(bad["stops"]) == 1
    onset_ms = 1000 * fault_clip.onset_s  # type: ignore[operator]
    assert onset_ms < bad["stops"][0]["t_ms"] <= onset_ms + 200
    assert bad["stops"][0]["t_ms"] % 20 == 0 and bad["stops"][0]["score"] >= 0.92


def test_scan_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "x.wav").write_bytes(b"nope")
    res = runner.invoke(app, ["scan", str(tmp_path / "x.wav")])
    assert res.exit_code == 2 and "not a RIFF/WAVE" in res.output


@pytest.mark.slow
def test_run_from_stdin_publishes_and_writes_a_work_order(
    tmp_path: Path, fault_clip: Clip, shared_sub: Subscriber, topic_root: str
) -> None:
    pcm = (fault_clip.audio * 32767).astype("<i2").tobytes()
    db = tmp_path / "o.sqlite"
    host, port = SHARED_BROKER
    args = ["run", "-", "--broker", f"mqtt://{host}:{port}", "--topic", f"{topic_root}/C/stop"]
    args += ["--station", "C", "--db", str(db), "--no-llm", "--audit", str(tmp_path / "a.jsonl")]
    args += ["--status-topic", f"{topic_root}/{{station}}/status"]
    try:
        res = runner.invoke(app, args, input=pcm)
        assert res.exit_code == 0, res.output
        printed = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
        assert [p["topic"] for p in printed] == [f"{topic_root}/C/stop"]
        assert shared_sub.wait(3)
    finally:
        clear_retained(f"{topic_root}/C/status")
    online, stop, offline = (m for _, m in shared_sub.got[:3])
    assert online["state"] == "online" and offline["state"] == "offline"  # around the stop
    assert stop["station"] == "C"
    res = runner.invoke(app, ["orders", "--json", "--db", str(db)])
    orders = json.loads(res.stdout)
    assert len(orders) == 1 and set(orders[0]) == {
        "id",
        "station",
        "score",
        "stop_ts",
        "created_ts",
        "explanation",
    }
    assert "C工位" in orders[0]["explanation"] and orders[0]["created_ts"] >= orders[0]["stop_ts"]


def test_simulate_writes_a_mimii_folder(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", "--out", str(tmp_path), "--n", "3", "--seconds", "1"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(manifest) == 3
    for m in manifest:
        label = "abnormal" if m["fault"] else "normal"
        assert f"/{label}/" in m["file"] and Path(m["file"]).stat().st_size > 32000


def test_orders_on_an_empty_store(tmp_path: Path) -> None:
    res = runner.invoke(app, ["orders", "--json", "--db", str(tmp_path / "none.sqlite")])
    assert res.exit_code == 0 and json.loads(res.stdout) == []


@pytest.fixture
def normal_then_fault(normal_clip: Clip, fault_clip: Clip) -> bytes:
    """Two-channel s16le: channel 0 a healthy motor, channel 1 one that develops a fault."""
    both = np.stack([normal_clip.audio, fault_clip.audio], axis=1)
    return (both * 32767).astype("<i2").tobytes()


@pytest.mark.slow
def test_run_guards_one_station_per_stdin_channel(
    tmp_path: Path, normal_then_fault: bytes, shared_sub: Subscriber, topic_root: str
) -> None:
    pcm = normal_then_fault  # stations A, B
    host, port = SHARED_BROKER
    args = ["run", "-", "--broker", f"mqtt://{host}:{port}", "--channels", "2"]
    args += ["--station", "A", "--station", "B", "--topic", f"{topic_root}/{{station}}/stop"]
    args += ["--db", str(tmp_path / "o.sqlite"), "--no-llm"]
    args += ["--status-topic", f"{topic_root}/{{station}}/status"]
    try:
        res = runner.invoke(app, args, input=pcm)
        assert res.exit_code == 0, res.output
        assert shared_sub.wait(3)
    finally:
        clear_retained(f"{topic_root}/A,B/status")
    printed = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [(p["topic"], p["station"]) for p in printed] == [(f"{topic_root}/B/stop", "B")]
    online, stop, offline = (m for _, m in shared_sub.got[:3])
    assert online["state"] == "online" and online["stations"] == ["A", "B"]
    assert stop["station"] == "B" and stop["score"] >= 0.92
    assert offline["state"] == "offline" and offline["stations"] == ["A", "B"]


def test_run_needs_a_station_name_per_file_or_channel(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "-", "--channels", "3", "--station", "A", "--station", "B"])
    assert res.exit_code == 2 and "2 stations for 3 channels" in res.output
    res = runner.invoke(app, ["run", str(tmp_path / "a.wav")])
    assert res.exit_code == 2 and "no such file" in res.output
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
        write_wav(tmp_path / d / "a.wav", np.zeros(HOP, np.float32))
    a, b = str(tmp_path / "x" / "a.wav"), str(tmp_path / "y" / "a.wav")
    res = runner.invoke(app, ["run", a, b, "--station", "A"])
    assert res.exit_code == 2 and "1 station names for 2 files" in res.output
    res = runner.invoke(app, ["run", a, b])
    assert res.exit_code == 2 and "unique" in res.output
    res = runner.invoke(app, ["run", "-", "a.wav"])
    assert res.exit_code == 2 and "cannot be mixed" in res.output


def test_files_replay_together_and_a_finished_file_drops_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtgate.apps.guard import cli

    rng = np.random.default_rng(1)
    short = (rng.standard_normal(3 * HOP) * 0.1).astype(np.float32)
    long = (rng.standard_normal(5 * HOP + 100) * 0.1).astype(np.float32)
    write_wav(tmp_path / "s.wav", short)
    write_wav(tmp_path / "l.wav", long)
    # no waiting: each tick is stamped with its index
    monkeypatch.setattr(cli, "paced", lambda ticks: ((t, float(i)) for i, t in enumerate(ticks)))
    got = list(cli._windows_of_files([tmp_path / "s.wav", tmp_path / "l.wav"]))
    assert [(w.shape, end, None if rows is None else rows.tolist()) for w, end, rows in got] == [
        ((2, HOP), 0.0, None),
        ((2, HOP), 1.0, None),
        ((2, HOP), 2.0, None),
        ((1, HOP), 3.0, [1]),
        ((1, HOP), 4.0, [1]),
    ]
    back = read_wav(tmp_path / "l.wav")
    np.testing.assert_array_equal(got[4][0][0], back[4 * HOP : 5 * HOP])


def _alsa_file_device(home: Path, raw: Path) -> None:
    """An ALSA capture device (the ``file`` plugin over ``null``) that plays ``raw`` into
    PortAudio: a real sound card path on a machine without a sound card."""
    (home / ".asoundrc").write_text(
        "pcm.rtgate_test {\n"
        "  type file\n"
        '  slave.pcm "null"\n'
        '  file "/dev/null"\n'
        f'  infile "{raw}"\n'
        '  format "raw"\n'
        '  hint { show on description "rtgate test capture" }\n'
        "}\n"
    )


@pytest.mark.slow
def test_run_reads_a_sound_card_one_station_per_channel(
    tmp_path: Path, normal_then_fault: bytes, shared_sub: Subscriber, topic_root: str
) -> None:
    import os
    import subprocess
    import sys

    raw = tmp_path / "in.raw"
    raw.write_bytes(normal_then_fault)  # stations C, D
    _alsa_file_device(tmp_path, raw)
    seconds = len(normal_then_fault) / 4 / 16000
    rtgate = str(Path(sys.executable).parent / "rtgate")

    def command(buffer_s: float) -> list[str]:
        args = [rtgate, "guard", "run", "--device", "rtgate_test", "--channels", "2"]
        args += ["--station", "C", "--station", "D", "--seconds", f"{seconds}"]
        args += ["--device-buffer-s", f"{buffer_s}", "--topic", f"{topic_root}/{{station}}/stop"]
        return [*args, "--status-topic", "", "--no-llm", "--db", str(tmp_path / "o.sqlite")]

    env = {**os.environ, "HOME": str(tmp_path)}
    res = subprocess.run(command(10.0), env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    printed = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [(p["topic"], p["station"]) for p in printed] == [(f"{topic_root}/D/stop", "D")]
    assert shared_sub.wait(1) and shared_sub.got[0][1]["station"] == "D"
    # this device delivers as fast as PortAudio reads it, not in real time: the first 10 s
    # were queued (the clip), the rest dropped. With room for 0.1 s the drops are reported.
    res = subprocess.run(command(0.1), env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "blocks dropped (stop path behind)" in res.stderr


def test_run_needs_exactly_one_kind_of_source() -> None:
    res = runner.invoke(app, ["run"])
    assert res.exit_code == 2 and "one of them" in res.output
    res = runner.invoke(app, ["run", "-", "--device", "0"])
    assert res.exit_code == 2 and "one of them" in res.output


def test_run_refuses_a_sound_card_it_cannot_open(tmp_path: Path) -> None:
    args = ["run", "--device", "no-such-card", "--no-llm", "--db", str(tmp_path / "o.sqlite")]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "cannot open sound card 'no-such-card'" in res.output

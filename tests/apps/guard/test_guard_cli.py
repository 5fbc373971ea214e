from __future__ import annotations

import json
from pathlib import Path

import pytest
from guard_helpers import SHARED_BROKER, Subscriber, clear_retained
from typer.testing import CliRunner

from rtgate.apps.guard.audio import write_wav
from rtgate.apps.guard.cli import app
from rtgate.apps.guard.simulate import Clip

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
    assert ok == {"file": str(tmp_path / "ok.wav"), "max_score": ok["max_score"], "stops": []}
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

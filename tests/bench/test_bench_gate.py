from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_gate_writes_the_two_keys(tmp_path: Path) -> None:
    out = tmp_path / "gate.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtgate.__main__",
            "bench",
            "gate",
            "--n",
            "300",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["n"] == 300
    for key in ("decision_p99_us", "template_hit_p99_us"):
        assert report[key] > 0
    assert report["decision_us"]["p50_us"] <= report["decision_p99_us"]
    assert (
        set(report["met"])
        == set(report["goals"])
        == {
            "decision_p99_us",
            "template_hit_p50_us",
            "template_hit_p99_us",
        }
    )
    assert "template hit" in proc.stdout

"""``guard enroll`` end to end: a station's own normal removes the general detector's false
stops on a machine unlike its training set, refuses a recording with a fault present from
the first second (and, accepted anyway, still stops a new fault), keeps its provenance, and
bad input is a clear exit 2. ``scan`` and ``run`` say which stations run without an
enrolment."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rtgate.apps.guard.audio import write_wav
from rtgate.apps.guard.baseline import EnrolmentStore
from rtgate.apps.guard.cli import app
from rtgate.apps.guard.detector import default_model_path
from rtgate.apps.guard.features import RATE
from rtgate.apps.guard.lines import HEARD, HOLD, STEP, WINDOWS
from rtgate.apps.guard.simulate import BEARINGS, FAULTS, SPEEDS, Bearing, Motor, make_clip

runner = CliRunner()

# A motor with every parameter outside the training population's ranges (simulate.py:
# shafts 14-66 Hz, 5-12 fan blades, 22-45 rotor slots, resonances 2-6.5 kHz, damping
# 0.03-0.1, level -38..-14 dBFS, noise -12..3 dB, none of these bearings): a slow machine on
# a big bearing, quiet and in a noisy hall. Found with evaluate_enrolment.outside_motor.
ODD = Motor(
    shaft_hz=7.97,
    line_hz=50.0,
    bearing=Bearing("6212", 10, 15.88, 85.0),
    fan_blades=3,
    rotor_slots=20,
    bearing_res_hz=(6946.0, 6613.0),
    damping=0.021,
    level_dbfs=-40.9,
    noise_db=7.1,
    seed=1181852859,
)


def test_the_odd_motor_is_outside_every_training_range() -> None:
    assert all(not lo <= ODD.shaft_hz <= hi for lo, hi in SPEEDS["train"])
    assert ODD.bearing.name not in {b.name for b in BEARINGS["train"]}
    assert not 5 <= ODD.fan_blades <= 12 and not 22 <= ODD.rotor_slots <= 45
    assert all(not 2000 <= f <= 6500 for f in ODD.bearing_res_hz)
    assert not 0.03 <= ODD.damping <= 0.1
    assert not -38 <= ODD.level_dbfs <= -14 and not -12 <= ODD.noise_db <= 3


@pytest.fixture(scope="module")
def odd_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """45 s of the healthy odd motor: the first 30 s to enrol on, the last 15 s to scan."""
    clip = make_clip(ODD, 45.0, impact_rate_hz=0.5, seed=155)
    d = tmp_path_factory.mktemp("odd")
    write_wav(d / "enrol.wav", clip.audio[: 30 * RATE])
    write_wav(d / "later.wav", clip.audio[30 * RATE :])
    return d / "enrol.wav", d / "later.wav"


def _scan(path: Path, station: str, enrolments: Path) -> tuple[dict[str, Any], str]:
    args = ["scan", "--json", str(path.with_suffix(".json")), "--station", station]
    res = runner.invoke(app, [*args, "--enrolments", str(enrolments), str(path)])
    assert res.exit_code == 0, res.output
    (out,) = json.loads(path.with_suffix(".json").read_text())
    return out, res.stderr


def _enroll(*args: str) -> Any:
    return runner.invoke(app, ["enroll", *args])


def test_enrolment_removes_false_stops_on_a_motor_unlike_the_training_set(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    enrol, later = odd_recording
    alone, err = _scan(later, "M7", tmp_path)
    assert alone["enrolment"] is None and "no enrolment for M7" in err
    assert alone["stops"], "the general detector alone stops this healthy motor"

    res = _enroll("--station", "M7", "--enrolments", str(tmp_path), str(enrol))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["general_detector"]["stops"] == 0

    fused, err = _scan(later, "M7", tmp_path)
    assert fused["stops"] == [] and "no enrolment" not in err
    assert fused["enrolment"]["id"] == json.loads(res.stdout)["id"]
    assert fused["max_detector_score"] == alone["max_detector_score"]  # the same detector
    assert fused["max_score"] < 0.92 <= alone["max_score"]


def test_a_fault_present_from_the_first_second_is_refused_and_a_new_one_still_stops(
    tmp_path: Path,
) -> None:
    bad = make_clip(ODD, 32.0, fault="outer", onset_s=0.0, severity_db=12.0, seed=3)
    write_wav(tmp_path / "faulty.wav", bad.audio)
    args = ["--station", "M7", "--enrolments", str(tmp_path / "e"), str(tmp_path / "faulty.wav")]
    refused = _enroll(*args)
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "the general detector stops 'M7'" in refused.stderr
    assert "% of the windows at or over the threshold" in refused.stderr
    assert not (tmp_path / "e" / "M7.json").exists()

    # someone insists the machine is healthy: the detector's range on this recording becomes
    # the station's calibration, so the fault as it was recorded is now its normal ...
    forced = _enroll(*args, "--accept-stops")
    assert forced.exit_code == 0, forced.output
    assert "--accept-stops" in forced.stderr
    kept = EnrolmentStore(tmp_path / "e").load("M7")
    assert kept is not None and kept.logit_max is not None and kept.logit_max > 5.0
    again = make_clip(ODD, 6.0, fault="outer", onset_s=0.0, severity_db=12.0, seed=4)
    write_wav(tmp_path / "again.wav", again.audio)
    res, _ = _scan(tmp_path / "again.wav", "M7", tmp_path / "e")
    assert res["enrolment"] is not None and res["max_detector_score"] > 0.99
    assert res["stops"] == []
    # ... and a new fault, once the machine has run without that sound, still stops it. The
    # detector was over the threshold on most of this recording: it is deaf on this station
    # (out of its domain, docs/guard.md Session 24), so the station's own clauses stop it
    # (the envelope's new lines, the steady rise): seconds after the onset, not 200 ms (the
    # lines' comb must hold its rate over HOLD evaluations, 0.32 s apart)
    assert kept.deaf_line is not None and kept.deaf_line > 2.44
    later = make_clip(ODD, 8.0, fault="inner", onset_s=3.0, severity_db=12.0, seed=5)
    write_wav(tmp_path / "later.wav", later.audio)
    res, _ = _scan(tmp_path / "later.wav", "M7", tmp_path / "e")
    assert res["stops"] and 3000 < res["stops"][0]["t_ms"] <= 4500 + (HOLD - 1) * 320
    assert res["stops"][0]["score"] < 0.92  # a deaf station's score never makes the hit


def test_provenance_is_stored_and_reported(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    enrol, later = odd_recording
    clip = make_clip(ODD, 12.0, impact_rate_hz=0.5, seed=9)
    x48 = np.interp(np.arange(12 * 48_000) / 3, np.arange(len(clip.audio)), clip.audio)
    write_wav(tmp_path / "more48k.wav", x48, rate=48_000)
    res = _enroll(
        "--station", "M7", "--out", str(tmp_path), str(enrol), str(tmp_path / "more48k.wav")
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "M7.json").read_text())
    prov = doc["provenance"]
    assert [s["name"] for s in prov["sources"]] == [str(enrol), str(tmp_path / "more48k.wav")]
    assert [s["sample_rate"] for s in prov["sources"]] == [16_000, 48_000]
    assert prov["sources"][0]["sha256"] == hashlib.sha256(enrol.read_bytes()).hexdigest()
    assert [s["seconds"] for s in prov["sources"]] == [30.0, 12.0] and prov["seconds"] == 42.0
    model_sha = hashlib.sha256(default_model_path().read_bytes()).hexdigest()
    assert prov["detector"]["sha256"] == model_sha
    assert doc["created"].endswith("Z") and doc["station"] == "M7"
    assert doc["general_detector"]["windows"] == 2100
    out, _ = _scan(later, "M7", tmp_path)
    assert out["enrolment"] == {
        "id": json.loads(res.stdout)["id"],
        "created": doc["created"],
        "seconds": 42.0,
        "sources": [str(enrol), str(tmp_path / "more48k.wav")],
        "rhythm_max": doc["model"]["rhythm"]["max"],
        "detector_logit_max": doc["model"]["detector_logit"]["max"],
        "slow_range": True,
        "median_range": True,
        "envelope_lines": True,
        "envelope_lines_mean": True,
        "envelope_lines_hold": HOLD,
        "quick_range": True,
    }
    # by default the median's range (and the slow range its veto needs), the envelope's
    # lines, their mean over 5.12 s and tops for a comb held at one rate (/9), and the quick
    # median's range: format /12
    assert doc["format"] == "rtgate-guard-enrolment/12"
    assert doc["model"]["quick"]["windows"] == 3 and len(doc["model"]["quick"]["scale"]) == 46
    # each of the two recordings gives a mean from its 13th evaluation (HEARD windows) on
    lines = doc["model"]["lines"]
    assert lines["mean"]["segments"] == lines["segments"] - 2 * (HEARD - WINDOWS) // STEP
    assert doc["model"]["lines"]["segments"] > 100 and doc["model"]["lines"]["top"] >= 0
    assert len(doc["model"]["persist"]["scale"]) == 46 and len(doc["model"]["slow"]["scale"]) == 46


def test_slow_range_writes_format_5_and_scan_says_so(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    enrol, later = odd_recording
    args = ("--station", "M7", "--out", str(tmp_path), "--no-median-range")
    res = _enroll(*args, "--slow-range", str(enrol))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "M7.json").read_text())
    assert doc["format"] == "rtgate-guard-enrolment/5" and len(doc["model"]["slow"]["scale"]) == 46
    out, _ = _scan(later, "M7", tmp_path)
    assert out["enrolment"]["slow_range"] is True and "median_range" not in out["enrolment"]
    res = _enroll(*args, str(enrol))  # neither: format /3, as before Session 13
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "M7.json").read_text())["format"] == "rtgate-guard-enrolment/3"


def test_a_bearing_s_orders_write_format_12_and_scan_decides_with_them(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    enrol, later = odd_recording
    orders = [ODD.bearing.defect_hz(f, 1.0) for f in FAULTS]
    given = ",".join(f"{o:.4f}" for o in orders)
    args = ("--station", "M7", "--out", str(tmp_path), "--orders", given, "--shaft-hz", "7-9.5")
    res = _enroll(*args, str(enrol))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "M7.json").read_text())
    assert doc["format"] == "rtgate-guard-enrolment/12"  # /11's orders and the quick range
    known = doc["model"]["lines"]["orders"]
    assert known["orders"] == pytest.approx(orders, abs=1e-4) and known["shaft_hz"] == [7.0, 9.5]
    assert len(known["top"]) == len(known["mean_top"]) == len(known["single_top"]) == 3
    out, _ = _scan(later, "M7", tmp_path)  # the same motor, healthy: decided with the orders
    assert out["stops"] == []
    assert out["enrolment"]["bearing_orders"]["shaft_hz"] == [7.0, 9.5]


def test_minutes_caps_the_audio_used(odd_recording: tuple[Path, Path], tmp_path: Path) -> None:
    enrol, _ = odd_recording
    res = _enroll("--station", "M7", "--out", str(tmp_path), "--minutes", "0.5", str(enrol))
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "M7.json").read_text())["provenance"]["seconds"] == 30.0


def test_enrol_from_stdin_hashes_the_bytes_read(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    clip = make_clip(ODD, 31.0, impact_rate_hz=0.5, seed=155)
    pcm = (clip.audio * 32767).astype("<i2").tobytes()
    res = runner.invoke(app, ["enroll", "--station", "M7", "--out", str(tmp_path), "-"], input=pcm)
    assert res.exit_code == 0, res.output
    (src,) = json.loads((tmp_path / "M7.json").read_text())["provenance"]["sources"]
    assert src["kind"] == "stdin" and src["sha256"] == hashlib.sha256(pcm).hexdigest()


def test_run_says_which_stations_have_no_enrolment(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    enrol, _ = odd_recording
    assert _enroll("--station", "A", "--out", str(tmp_path), str(enrol)).exit_code == 0
    faulty = make_clip(ODD, 3.0, fault="outer", onset_s=0.5, severity_db=14.0, seed=11)
    pcm = np.stack([faulty.audio, faulty.audio], axis=1)
    raw = (pcm * 32767).astype("<i2").tobytes()
    args = ["run", "-", "--channels", "2", "--station", "A", "--station", "B"]
    args += ["--broker", "mqtt://127.0.0.1:9", "--connect-timeout", "0.2"]  # nothing there
    args += ["--failsafe-cmd", "true", "--audit", str(tmp_path / "audit.jsonl"), "--no-llm"]
    args += ["--enrolments", str(tmp_path), "--db", str(tmp_path / "o.sqlite")]
    res = runner.invoke(app, [*args, "--status-topic", ""], input=raw)
    assert res.exit_code == 0, res.output
    assert "no enrolment for B" in res.stderr and "for A" not in res.stderr
    stops = {s["station"]: s for s in map(json.loads, res.stdout.splitlines())}
    enrolled = EnrolmentStore(tmp_path).load("A")
    assert enrolled is not None and stops["A"]["enrolment"] == enrolled.id
    assert stops["B"]["enrolment"] is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--station", "M7", "SHORT"], "too little audio"),
        (["SHORT"], "--station"),
        (["--station", "a+b", "ENROL"], "cannot be published to"),
        (["--station", "", "ENROL"], "--station"),
        (["--station", "M7", "NOWAV"], "not a RIFF/WAVE"),
        (["--station", "M7", "MISSING"], "no such file"),
        (["--station", "M7", "SILENT"], "silent"),
        (["--station", "M7", "--minutes", "0", "ENROL"], "--minutes"),
        (["--station", "M7", "-", "ENROL"], "stdin"),
        (["--station", "M7"], "give WAV files"),
        (["--station", "M7", "--orders", "3.1", "ENROL"], "--orders and --shaft-hz go together"),
        (["--station", "M7", "--orders", "3.1,x", "--shaft-hz", "7-9", "ENROL"], "a number"),
        (["--station", "M7", "--orders", "3.1", "--shaft-hz", "9-7", "ENROL"], "shaft range"),
        (
            [
                "--station",
                "M7",
                "--orders",
                "3.1",
                "--shaft-hz",
                "7-9",
                "--no-median-range",
                "ENROL",
            ],
            "--no-median-range",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], says: str, odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    enrol, later = odd_recording
    (tmp_path / "x.wav").write_bytes(b"RIFX nonsense")
    write_wav(tmp_path / "silent.wav", np.zeros(40 * RATE, np.float32))
    files = {
        "SHORT": str(later),
        "ENROL": str(enrol),
        "NOWAV": str(tmp_path / "x.wav"),
        "MISSING": str(tmp_path / "nope.wav"),
        "SILENT": str(tmp_path / "silent.wav"),
    }
    res = _enroll("--out", str(tmp_path / "e"), *[files.get(a, a) for a in args])
    assert res.exit_code == 2, res.output
    assert says in res.stderr and "Traceback" not in res.output
    assert res.stderr.startswith("error: ") and not (tmp_path / "e").exists()


def test_a_broken_enrolment_file_stops_scan_and_run_with_exit_2(
    odd_recording: tuple[Path, Path], tmp_path: Path
) -> None:
    _, later = odd_recording
    (tmp_path / "M7.json").write_text('{"format": "rtgate-guard-enrolment/1", "station": "M7"}')
    res = runner.invoke(app, ["scan", "--station", "M7", "--enrolments", str(tmp_path), str(later)])
    assert res.exit_code == 2 and "M7.json" in res.stderr and "Traceback" not in res.output

"""The benchmark report's shape and arithmetic, and the CLI wiring (no model loaded)."""

from __future__ import annotations

from typer.testing import CliRunner

from rtgate.apps.npc.bench import summarize
from rtgate.apps.npc.cli import app, bench_app
from rtgate.apps.npc.game import Exchange, LoopStats


def test_summarize_counts_fast_routes_and_frames() -> None:
    stats = LoopStats(60.0, frame_ms=[0.1] * 98 + [2.0, 20.0], missed=1)
    exchanges = [
        Exchange("Tom", "hi", sent=10, route="template", acted=11, spoken=11),
        Exchange("Mara", "why?", sent=20, route="local", acted=24, spoken=31, deeper=80),
        Exchange("Elda", "hm", sent=30, route="silent", acted=30, spoken=30, deeper=95),
        Exchange("Tom", "late", sent=40),  # cancelled: never answered
    ]
    r = summarize(stats, exchanges)
    assert r["frames"] == 100 and r["missed_frames"] == 1
    assert r["frame_ms"] == {"p50": 0.1, "p99": 2.0, "max": 20.0}
    it = r["intents"]
    assert it["count"] == 2  # template and local only
    assert (it["latency_frames_p50"], it["latency_frames_p99"]) == (1.0, 4.0)
    assert (it["line_frames_p50"], it["line_frames_p99"]) == (1.0, 11.0)
    assert it["routes"] == {"template": 1, "local": 1, "silent": 1, "cancelled": 1}
    assert r["followups"] == {"count": 2, "latency_frames_p50": 60.0}


def test_cli_verbs_are_wired_without_loading_a_model() -> None:
    runner = CliRunner()
    play = runner.invoke(app, ["--help"])
    bench = runner.invoke(bench_app, ["--help"])
    assert play.exit_code == 0 and "--seconds" in play.output and "--json" in play.output
    assert bench.exit_code == 0 and "--ablation-seconds" in bench.output

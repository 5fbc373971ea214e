"""`rtgate complete`, the typing replay and a tiny benchmark run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rtgate.apps.autocomplete.bench import run
from rtgate.apps.autocomplete.cli import app
from rtgate.apps.autocomplete.engine import MAX_PREFIX_CHARS
from rtgate.apps.autocomplete.pool import units
from rtgate.apps.autocomplete.sessions import LONG_TAIL, chunks, lexicon, sessions, typed


def test_complete_prints_the_api_json() -> None:
    result = CliRunner().invoke(app, ["我想把", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["route"] == "template"
    assert body["candidates"][0]["text"].startswith("我想把")


def test_complete_refuses_a_too_long_prefix() -> None:
    result = CliRunner().invoke(app, ["x" * (MAX_PREFIX_CHARS + 1)])
    assert result.exit_code == 2 and f"at most {MAX_PREFIX_CHARS}" in result.output


def test_chinese_arrives_in_ime_chunks_and_english_by_keystroke() -> None:
    lex = lexicon(["我想把积分兑换成话费", "积分怎么兑换", "积分兑换话费", "兑换成话费"], 2)
    assert chunks("我想把积分兑换成话费，谢谢", lex) == [
        "我", "想", "把", "积分兑换", "成话费，", "谢", "谢"
    ]  # fmt: skip
    assert chunks("额度5000块", lex) == ["额", "度", "5000", "块"]
    keys = typed("my card", lex, random.Random(0))
    assert [k.prefix for k in keys] == ["m", "my", "my ", "my c", "my ca", "my car", "my card"]
    assert all(60.0 <= k.gap_ms <= 220.0 for k in keys)
    assert units("我想把") == 3 and units("how do i act") == 4


def test_sessions_stop_at_the_requested_keystrokes() -> None:
    todo = list(sessions([("我想把积分兑换成话费", "points_exchange")], 50, long_tail=0.5))
    assert sum(len(s.keys) for s in todo) == 50
    assert any(s.query in LONG_TAIL for s in todo)


@pytest.mark.slow
def test_bench_reports_the_article_table(tmp_path: Path) -> None:
    plot = tmp_path / "cdf.png"
    r = run(120, concurrency=16, time_scale=0.0, with_accuracy=False, plot=plot)
    assert {"n", "budget_ms", "baseline_all_cloud", "gate"} <= set(r)
    assert set(r["baseline_all_cloud"]) == {"p50_ms", "p99_ms"}
    assert {"p50_ms", "p99_ms", "over_budget", "share"} <= set(r["gate"])
    late = r["gate"]["late_cloud_jobs"]  # cloud jobs the semantic check started after
    assert r["gate"]["cloud_share_with_late"] >= r["gate"]["share"]["cloud_async"]
    assert late == r["meta"]["engine"]["semantic"]["late_jobs"]
    pauses = r["gate"]["pauses"]  # sessions whose typing stopped, judged whole once more
    assert 0 < pauses["n"] and 0 <= pauses["cloud_async"] <= pauses["n"]
    assert r["n"] == 120 and abs(sum(r["gate"]["share"].values()) - 1.0) < 1e-3
    assert r["baseline_all_cloud"]["p50_ms"] > r["gate"]["p99_ms"]
    assert plot.stat().st_size > 1000


def test_refitting_the_judge_keeps_a_fused_judge_unless_told(tmp_path: Path) -> None:
    from rtgate.apps.autocomplete.intents_cli import app as intents_app
    from rtgate.domains.loader import judge_path
    from rtgate.tiers.answerability import CalibratedJudge

    shipped = tmp_path / "judge.json"
    shipped.write_bytes(judge_path().read_bytes())
    assert CalibratedJudge.load(shipped).weighs_semantic
    got = CliRunner().invoke(intents_app, ["judge", "--out", str(shipped)])
    assert got.exit_code == 2, got.output
    assert "weighs the semantic check" in got.output and "--replace" in got.output
    assert shipped.read_bytes() == judge_path().read_bytes()  # refused before any fitting

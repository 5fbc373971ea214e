"""The fault bench's pieces: its server config is valid, its report counts right."""

from __future__ import annotations

from pathlib import Path

from rtgate.bench.faults import DEFAULT_MIX, _config, _Outcome, _report
from rtgate.config.loader import load_config
from rtgate.fakellm import parse_plan


def test_bench_config_is_accepted_by_the_server_config(tmp_path: Path) -> None:
    path = tmp_path / "rtgate.toml"
    path.write_text(_config(18000, 18001, 8))
    cfg = load_config(path, env={})
    assert cfg.cloud.remote and cfg.cloud.base_url == "http://127.0.0.1:18001/v1"
    assert cfg.server.port == 18000 and cfg.local.max_tokens == 8
    assert {m for m, _ in parse_plan(DEFAULT_MIX).weights} >= {"hang", "reset", "malformed"}


def test_report_counts_overruns_with_the_slack_and_5xx() -> None:
    outs = [
        _Outcome(200, 100.0, "local"),
        _Outcome(200, 309.9, "template"),  # within budget + 10 ms
        _Outcome(200, 310.5, "silent"),  # over
        _Outcome(503, 5.0, "?"),
        _Outcome(0, 50.0, "client_error"),
    ]
    r = _report(outs, budget_ms=300.0, slack_ms=10.0)
    assert r["requests"] == 5 and r["over_budget"] == 1 and r["server_errors"] == 1
    assert r["max_overrun_ms"] == 10.5 and r["client_errors"] == 1
    assert r["over_budget_routes"] == {"silent": 1} and r["other_status"] == {503: 1}

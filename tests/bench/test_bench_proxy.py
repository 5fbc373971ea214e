"""rtgate bench proxy: one short real run, and how the summary reads the figures."""

from __future__ import annotations

from typing import Any

import pytest

from rtgate.bench.proxy import _summary, run

KEYS = {"p50_ms", "p90_ms", "p99_ms", "achieved_rps", "errors", "cpu_ms_per_request"}


def _m(p50: float, p99: float, rps: float, errors: int = 0) -> dict[str, Any]:
    return {"p50_ms": p50, "p99_ms": p99, "achieved_rps": rps, "errors": errors}


def test_added_latency_and_the_highest_sustained_rate() -> None:
    report: dict[str, Any] = {
        "targets": {
            "upstream": {"100.0": _m(0.5, 0.8, 100.0), "500.0": _m(0.3, 0.7, 500.0)},
            "rtgate": {"100.0": _m(1.5, 4.0, 100.0), "500.0": _m(900.0, 3000.0, 300.0)},
            "litellm": "not installed",
        }
    }
    _summary(report, [100.0, 500.0])
    assert report["sustained_rps"] == {"upstream": 500.0, "rtgate": 100.0}
    assert report["added_ms"]["rtgate"]["100.0"] == {"p50": 1.0, "p99": 3.2}
    assert "litellm" not in report["added_ms"]


@pytest.mark.slow
def test_a_short_run_measures_the_upstream_and_rtgate() -> None:
    report = run(rates=[20.0], seconds=1.0, connections=4, stream_requests=10)
    for name in ("upstream", "rtgate"):
        measured = report["targets"][name]["20.0"]
        assert KEYS <= set(measured) and measured["errors"] == 0
        assert report["max_throughput"][name] > 0
        streamed = report["streamed"][name]
        assert streamed["errors"] == 0 and streamed["requests"] == 10
        assert 0 < streamed["ttft_p50_ms"] <= streamed["ttft_p99_ms"]
        assert streamed["itl_p50_ms"] > 0  # eight chunks each: seven gaps
    assert "rtgate" in report["added_ms"] and "rtgate" in report["stream_added_ms"]


def test_litellm_is_found_in_its_own_virtualenv(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtgate.bench.proxy import litellm_command

    exe = tmp_path / "litellm"
    exe.write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.setenv("RTGATE_BENCH_LITELLM", str(exe))
    assert litellm_command() is None  # not executable: not a command
    exe.chmod(0o755)
    assert litellm_command() == str(exe)
    monkeypatch.setenv("RTGATE_BENCH_LITELLM", "")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert litellm_command() is None

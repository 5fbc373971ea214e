"""rtgate bench burst: the report's counting, and one small real run."""

from __future__ import annotations

from typing import Any

import pytest

from rtgate.bench.burst import run, summarize

KEYS = {
    "sent", "answered", "shed", "over_budget_client", "over_budget_server", "p50_ms",
    "p99_ms", "max_ms", "server_errors", "rss_mb_before", "rss_mb_after",
}  # fmt: skip


def test_summarize_counts_late_shed_and_errors() -> None:
    rows: list[dict[str, Any]] = [
        {"status": 200, "client_ms": 100.0, "server_ms": 90.0, "degraded": None},
        {"status": 200, "client_ms": 309.0, "server_ms": 305.0, "degraded": None},  # within +10
        {"status": 200, "client_ms": 400.0, "server_ms": 350.0, "degraded": None},  # late
        {"status": 200, "client_ms": 2.0, "server_ms": 1.0, "degraded": "shed: 300 in flight"},
        {"status": 503, "client_ms": 1.0, "code": "overloaded"},
        {"status": 500, "client_ms": 5.0, "code": "internal_error"},
        {"status": 0, "error": "ConnectionResetError()"},
    ]
    report = summarize(rows, budget_ms=300.0)
    assert report["sent"] == 7 and report["answered"] == 3 and report["shed"] == 2
    assert report["over_budget_client"] == 1 and report["over_budget_server"] == 1
    assert report["server_errors"] == 2
    assert report["max_ms"] == 400.0


@pytest.mark.slow
def test_a_small_burst_against_a_real_server() -> None:
    report = run(concurrency=20, waves=2, budget_ms=2000.0, interval_s=0.0)
    assert KEYS <= set(report)
    assert report["sent"] == 40 and report["server_errors"] == 0
    assert report["answered"] + report["shed"] == 40

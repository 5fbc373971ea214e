from __future__ import annotations

import pytest

from rtgate.backends.base import Generation
from rtgate.backends.fake import FakeBackend
from rtgate.bench import tier_latency as bench


@pytest.mark.looptime
async def test_ttft_and_tpot_follow_the_vllm_definitions() -> None:
    backend = FakeBackend(["a", "b", "c", "d", "e"], ttft_ms=80, tpot_ms=20)
    report = await bench._measure(backend, [Generation(prompt="x")], rounds=2)
    assert report["ttft"]["p50_ms"] == pytest.approx(80.0)
    assert report["tpot"]["p50_ms"] == pytest.approx(20.0)  # (160 - 80) / (5 - 1)
    assert report["e2e"]["p99_ms"] == pytest.approx(160.0)
    assert report["texts"] == ["abcde"] and report["ttft"]["n"] == 2


async def test_fast_tiers_report_measured_or_skipped() -> None:
    names = ("templates", "classifier", "cache_exact")
    report = await bench._fast_tiers(calls=20, only=names)
    for name in names:
        assert (name in report) != (name in report["skipped"])
    for name, res in report.items():
        if name != "skipped":
            assert 0 < res["p50_us"] <= res["p99_us"] and res["n"] == 20


def test_sse_overhead_is_measured() -> None:
    assert bench._sse_overhead(chunks=50)["sse_parse_us_per_chunk"] > 0

from __future__ import annotations

from rtgate.bench.fast_tiers import abench_fast_tiers


async def test_fast_tier_bench_reports_percentiles_and_hit_rates() -> None:
    report = await abench_fast_tiers(calls=40, slow=False)
    for name in ("templates", "classifier", "cache_exact"):
        res = report[name]
        assert 0 < res["p50_us"] <= res["p99_us"] and res["n"] == 40, name
        assert 0.0 < res["hit_rate"] < 1.0, name  # the inputs mix hits and misses
    assert "classifier_e5" not in report and report["machine"]["cpus"]

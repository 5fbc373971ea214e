from __future__ import annotations

import math
import random

import pytest

from rtgate.core.latency import (
    CENSORED_FACTOR,
    LatencyModel,
    LogBins,
    Prior,
    WindowedQuantiles,
)


def test_quantiles_match_samples_within_sketch_accuracy() -> None:
    rng = random.Random(1)
    w = WindowedQuantiles(window=10_000)
    xs = [rng.lognormvariate(math.log(100), 0.5) for _ in range(4000)]
    for x in xs:
        w.add(x)
    w.refresh()
    xs.sort()
    assert w.p50 == pytest.approx(xs[len(xs) // 2], rel=0.03)
    assert w.p99 == pytest.approx(xs[int(0.99 * (len(xs) - 1))], rel=0.03)


def test_few_samples_predict_their_maximum() -> None:
    w = WindowedQuantiles()
    for x in (10, 11, 12, 500):
        w.add(x)
    assert w.p99 == pytest.approx(500, rel=0.02)


def test_window_forgets_old_latencies() -> None:
    w = WindowedQuantiles(window=100, refresh_every=1)
    for _ in range(100):
        w.add(1000)
    for _ in range(120):
        w.add(10)
    assert w.p99 == pytest.approx(10, rel=0.02)


def test_cold_model_predicts_infinity_until_prior_or_sample() -> None:
    m = LatencyModel()
    assert m.cold and m.predict_ttft() == math.inf
    m.observe(25.0, 80.0)
    assert not m.cold
    assert m.predict_ttft() == pytest.approx(25, rel=0.02)
    assert m.predict_total() == pytest.approx(80, rel=0.02)
    p = LatencyModel(Prior(5, 9))
    assert not p.cold and p.predict_ttft() == 5 and p.predict_total() == 9


def test_cutoff_is_recorded_pessimistically() -> None:
    m = LatencyModel()
    m.observe_cutoff(100.0)
    assert m.predict_ttft() == pytest.approx(100 * CENSORED_FACTOR, rel=0.02)


def test_a_short_cutoff_never_lowers_the_prediction() -> None:
    m = LatencyModel(Prior(1800, 1800))
    m.observe_cutoff(100.0)
    assert m.predict_ttft() == pytest.approx(1800, rel=0.02)


def test_bad_window_refused() -> None:
    with pytest.raises(ValueError):
        WindowedQuantiles(window=1)


def test_old_outlier_ages_out_even_with_rare_samples() -> None:
    now = [0.0]
    w = WindowedQuantiles(window=512, max_age_s=60, clock=lambda: now[0])
    w.add(2000)  # one bad sample (a cold start)
    for _ in range(3):
        now[0] += 20  # a probe every 20 s
        w.add(50)
    assert w.p99 > 1000  # 60 s later it is still in the older half
    now[0] += 20
    w.add(50)  # 80 s: the half holding it has rotated out (at most 1.5 x max_age_s)
    assert w.p99 == pytest.approx(50, rel=0.02)


def test_everything_ages_out_after_a_long_silence() -> None:
    now = [0.0]
    w = WindowedQuantiles(max_age_s=10, clock=lambda: now[0])
    for _ in range(10):
        w.add(500)
    now[0] += 100
    w.add(5)
    assert w.count == 1 and w.p99 == pytest.approx(5, rel=0.02)


def test_a_slower_answer_than_the_p99_counts_at_once_a_faster_one_by_refresh_every() -> None:
    w = WindowedQuantiles(window=1000, refresh_every=32, clock=lambda: 0.0)  # time stands
    for _ in range(100):
        w.add(10.0)
    assert w.p99 == pytest.approx(10, rel=0.02)
    for _ in range(5):
        w.add(500.0)  # the tail grew: no waiting for the next refresh
    assert w.p99 == pytest.approx(500, rel=0.02)
    now = [0.0]
    fast = WindowedQuantiles(window=1000, refresh_every=500, refresh_s=0.05, clock=lambda: now[0])
    for _ in range(100):
        fast.add(500.0)
    for _ in range(200):
        fast.add(1.0)  # faster: read at the next refresh, not at once
    assert fast.p50 == pytest.approx(500, rel=0.02)
    now[0] = 0.06  # refresh_s later
    fast.add(1.0)
    assert fast.p50 == pytest.approx(1.0, rel=0.02)


def test_log_bins_are_within_their_accuracy_of_the_sample_at_each_rank() -> None:
    rng = random.Random(7)
    xs = [rng.lognormvariate(math.log(3.0), 1.5) for _ in range(2000)]
    bins = LogBins()
    for x in xs:
        bins.add(x)
    xs.sort()
    qs = (0.0, 0.1, 0.5, 0.9, 0.99, 1.0)
    for q, got in zip(qs, bins.quantiles(qs), strict=True):
        exact = xs[math.ceil(q * (len(xs) - 1) - 1e-9)]
        assert got == pytest.approx(exact, rel=0.0101)
        assert bins.quantile(q) == got


def test_log_bins_merge_counts_both_and_an_empty_one_has_no_quantile() -> None:
    a, b = LogBins(), LogBins()
    assert a.quantile(0.5) == math.inf
    for x in (1.0, 2.0):
        a.add(x)
    b.add(400.0)
    a.merge(b)
    assert a.count == 3
    assert a.quantile(0.99) == pytest.approx(400.0, rel=0.01)
    assert a.quantile(0.0) == pytest.approx(1.0, rel=0.01)

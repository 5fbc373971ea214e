from __future__ import annotations

import asyncio
import random

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.request import Request
from rtgate.tiers.emulated import CLOUD_70B, PRESETS, EmulatedLatency, LatencyProfile, LogNormal
from rtgate.tiers.fake import FakeTier


def test_lognormal_fit_reproduces_p50_and_p99() -> None:
    d = LogNormal(620, 1800)
    rng = random.Random(7)
    xs = sorted(d.sample(rng) for _ in range(50_000))
    assert xs[len(xs) // 2] == pytest.approx(620, rel=0.03)
    assert xs[int(0.99 * len(xs))] == pytest.approx(1800, rel=0.06)


def test_bad_profile_refused() -> None:
    with pytest.raises(ValueError):
        LogNormal(100, 50)


def test_presets_carry_the_article_numbers() -> None:
    assert PRESETS["cloud-70b"].ttft == LogNormal(620.0, 1800.0)
    assert PRESETS["template"].ttft.p99 < 5


@pytest.mark.looptime
async def test_emulated_tier_delays_a_real_tier_and_is_labelled() -> None:
    inner = FakeTier("local", 50, ["a", "b", "c"])
    prof = LatencyProfile("fixed", LogNormal(100, 100), LogNormal(10, 10))
    tier = EmulatedLatency(inner, prof, name="cloud", quality=80, delegable=True)
    assert tier.label == "cloud (emulated fixed)"
    assert tier.latency_prior.ttft_p99_ms == pytest.approx(100)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    times = []
    async for _ in tier.stream(Request("q"), Budget(5000)):
        times.append((loop.time() - t0) * 1000)
    assert times == pytest.approx([100, 110, 120], abs=0.5)
    assert inner.calls == 1


@pytest.mark.looptime
async def test_decline_waits_out_the_emulated_time() -> None:
    tier = EmulatedLatency(FakeTier("t", 1, decline=True), LatencyProfile("x", LogNormal(5, 5)))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(Declined):
        async for _ in tier.stream(Request("q"), Budget(100)):
            pass
    assert (loop.time() - t0) * 1000 == pytest.approx(5, abs=0.5)


def test_cloud_prior_uses_p99() -> None:
    assert CLOUD_70B.prior(pieces=1).ttft_p99_ms == 1800

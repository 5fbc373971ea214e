"""Wrapping tiers in their policies before the gate is built, and the per-tier overrides."""

from __future__ import annotations

import pytest

from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.gate import Gate
from rtgate.resilience import AdmissionTier, BreakerConfig, BreakerTier, RetryTier
from rtgate.resilience.admission import ConcurrencyLimiter
from rtgate.resilience.settings import ResilienceConfig, TierOverrides
from rtgate.resilience.wire import TierPolicy, resilience_snapshot, with_policy
from rtgate.tiers.fake import FakeTier

pytestmark = pytest.mark.looptime


async def test_policies_wrap_tiers_and_share_limiters_by_group() -> None:
    limiters: dict[str, ConcurrencyLimiter] = {}
    policy = TierPolicy(capacity=2, group="llama", breaker=BreakerConfig(), retries=2)
    cloud = with_policy(
        FakeTier("cloud", 80, ["deep"], ttft_ms=50, delegable=True), policy, limiters
    )
    local = with_policy(
        FakeTier("local", 50, ["quick"]), TierPolicy(capacity=5, group="llama"), limiters
    )
    template = with_policy(FakeTier("template", 10, ["canned"]), TierPolicy(), limiters)
    assert isinstance(cloud, AdmissionTier) and isinstance(cloud.inner, RetryTier)
    assert isinstance(cloud.inner.inner, BreakerTier)
    assert isinstance(local, AdmissionTier) and local.limiter is cloud.limiter
    assert local.limiter.capacity == 2  # the group's first policy sets it
    assert isinstance(template, FakeTier)  # an empty policy wraps nothing
    priors = {"cloud": Prior(100, 100), "local": Prior(40, 40), "template": Prior(2, 2)}
    g = Gate([template, local, cloud], priors=priors)
    assert g.by_name["cloud"] is cloud and cloud.delegable and cloud.quality == 80
    async with g:
        res = await g.answer(Request("hi", delegate=False), budget_ms=500)
    assert res.route == "cloud" and res.text == "deep"
    snap = resilience_snapshot(g)
    assert snap["cloud"]["AdmissionTier"]["admitted"] == 1
    assert snap["cloud"]["BreakerTier"]["state"] == "closed"
    assert "template" not in snap


def test_without_limiters_a_group_is_a_cap_of_its_own() -> None:
    a = with_policy(FakeTier("a", 1), TierPolicy(capacity=1, group="g"))
    b = with_policy(FakeTier("b", 2), TierPolicy(capacity=1, group="g"))
    assert isinstance(a, AdmissionTier) and isinstance(b, AdmissionTier)
    assert a.limiter is not b.limiter


def test_overrides_change_the_kinds_policy() -> None:
    r = ResilienceConfig()
    cloud = r.cloud_policy(probe=True)
    assert cloud.breaker is not None and cloud.probe and cloud.retries == 2
    assert TierOverrides().apply(cloud, r) is cloud
    assert TierOverrides().apply(None, r) is None
    off = TierOverrides(breaker=False, retries=1, capacity=3).apply(cloud, r)
    assert off is not None and off.breaker is None and not off.probe
    assert off.retries == 1 and off.capacity == 3
    on = TierOverrides(breaker=True, probe=True).apply(None, r)
    assert on is not None and on.breaker == r.breaker() and on.probe and on.capacity is None
    quiet = TierOverrides(probe=False).apply(cloud, r)
    assert quiet is not None and quiet.breaker is not None and not quiet.probe

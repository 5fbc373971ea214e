"""Wrapping a built gate's tiers by name."""

from __future__ import annotations

import pytest

from rtgate.core.errors import ConfigError
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.gate import Gate
from rtgate.resilience import AdmissionTier, BreakerConfig, BreakerTier, RetryTier
from rtgate.resilience.wire import TierPolicy, apply_policies, resilience_snapshot
from rtgate.tiers.fake import FakeTier

pytestmark = pytest.mark.looptime


def gate() -> Gate:
    tiers = [
        FakeTier("cloud", 80, ["deep"], ttft_ms=50, delegable=True),
        FakeTier("local", 50, ["quick"], ttft_ms=20),
        FakeTier("template", 10, ["canned"]),
    ]
    priors = {"cloud": Prior(100, 100), "local": Prior(40, 40), "template": Prior(2, 2)}
    return Gate(tiers, priors=priors)


async def test_policies_wrap_by_name_and_share_limiters() -> None:
    g = gate()
    out = apply_policies(
        g,
        {
            "cloud": TierPolicy(capacity=2, group="llama", breaker=BreakerConfig(), retries=2),
            "local": TierPolicy(capacity=5, group="llama"),
        },
    )
    cloud, local = out["cloud"], out["local"]
    assert isinstance(cloud, AdmissionTier) and isinstance(cloud.inner, RetryTier)
    assert isinstance(cloud.inner.inner, BreakerTier)
    assert isinstance(local, AdmissionTier) and local.limiter is cloud.limiter
    assert local.limiter.capacity == 2  # the group's first policy sets it
    assert [t.name for t in g.tiers] == ["cloud", "local", "template"]
    assert g.by_name["cloud"] is cloud and cloud.delegable and cloud.quality == 80
    async with g:
        res = await g.answer(Request("hi", delegate=False), budget_ms=500)
    assert res.route == "cloud" and res.text == "deep"
    snap = resilience_snapshot(g)
    assert snap["cloud"]["AdmissionTier"]["admitted"] == 1
    assert snap["cloud"]["BreakerTier"]["state"] == "closed"
    assert "template" not in snap


def test_unknown_tier_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown tier"):
        apply_policies(gate(), {"clod": TierPolicy(capacity=1)})

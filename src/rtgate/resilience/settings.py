"""The resilience settings: the ``[resilience]`` section (what each kind of model tier
gets by default) and the keys a ``[tiers.NAME]`` table may add to change it for one tier.

:class:`rtgate.config.loader.Config` reads both; a tier kind turns the section into a
:class:`~rtgate.resilience.wire.TierPolicy` for its tiers, and :class:`TierOverrides`
adjusts that policy for one tier.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rtgate.core.settings import setting
from rtgate.resilience.breaker import BreakerConfig
from rtgate.resilience.wire import TierPolicy

__all__ = ["ResilienceConfig", "TierOverrides"]


@dataclass(slots=True)
class ResilienceConfig:
    """Admission control, a circuit breaker and retries around the model tiers
    (:mod:`rtgate.resilience`), applied by :func:`~rtgate.assembly.build.assemble`.

    ``local_capacity``: streams at once on an embedded model (default 1: its one llama.cpp
    worker thread runs one inference at a time, so a second stream would only queue and
    miss its budget); past it the tier declines at once and the gate falls back.
    ``cloud_capacity``: the same for a remote or emulated cloud tier. The breaker opens
    when ``breaker_failure_rate`` of at least ``breaker_min_calls`` recent calls failed;
    ``cloud_probe`` health-checks a remote tier in the background while it is open.
    ``cloud_retries``: tries per cloud call (1: none), only while the budget allows.
    """

    enabled: bool = True
    local_capacity: int = setting(1, ge=1)
    cloud_capacity: int = setting(32, ge=1)
    cloud_breaker: bool = True
    cloud_probe: bool = True
    breaker_min_calls: int = setting(10, ge=1)
    breaker_failure_rate: float = setting(0.5, gt=0, le=1)
    breaker_open_s: float = setting(2.0, gt=0)
    breaker_max_open_s: float = setting(30.0, gt=0)
    breaker_slow_ms: float | None = setting(None, gt=0)
    cloud_retries: int = setting(2, ge=1, le=5)
    retry_backoff_ms: float = setting(0.0, ge=0)

    def breaker(self) -> BreakerConfig:
        """The circuit breaker these settings describe."""
        return BreakerConfig(
            min_calls=self.breaker_min_calls,
            max_samples=max(100, self.breaker_min_calls),
            failure_rate=self.breaker_failure_rate,
            open_s=self.breaker_open_s,
            max_open_s=self.breaker_max_open_s,
            slow_ms=self.breaker_slow_ms,
        )

    def cloud_policy(self, probe: bool) -> TierPolicy:
        """The policy of a cloud tier: its cap, the breaker (probed if ``probe`` and
        ``cloud_probe``) and the retries."""
        breaker = self.breaker() if self.cloud_breaker else None
        return TierPolicy(
            capacity=self.cloud_capacity,
            breaker=breaker,
            probe=breaker is not None and probe and self.cloud_probe,
            retries=self.cloud_retries,
            retry_backoff_ms=self.retry_backoff_ms,
        )


@dataclass(slots=True)
class TierOverrides:
    """Keys of a ``[tiers.NAME]`` table that change the policy its kind gives the tier:
    ``capacity`` (streams at once), ``breaker`` (on or off), ``probe`` (health-probe the
    open breaker), ``retries`` (tries per call). Unset keys keep the kind's choice."""

    capacity: int | None = setting(None, ge=1)
    breaker: bool | None = None
    probe: bool | None = None
    retries: int | None = setting(None, ge=1, le=5)

    def apply(self, policy: TierPolicy | None, r: ResilienceConfig) -> TierPolicy | None:
        """``policy`` (the kind's; ``None``: no wrapper) with these overrides."""
        if self == TierOverrides():
            return policy
        p = policy or TierPolicy()
        if self.capacity is not None:
            p = replace(p, capacity=self.capacity)
        if self.breaker is False:
            p = replace(p, breaker=None, probe=False)
        elif self.breaker and p.breaker is None:
            p = replace(p, breaker=r.breaker())
        if self.probe is not None:
            p = replace(p, probe=self.probe and p.breaker is not None)
        if self.retries is not None:
            p = replace(p, retries=self.retries, retry_backoff_ms=r.retry_backoff_ms)
        return p

"""Latency metrics with vLLM's definitions, per route, exported to Prometheus.

- TTFT: request start to the first piece of the answer.
- E2E: request start to the last piece.
- TPOT: ``(E2E - TTFT) / (tokens - 1)`` for answers of two or more pieces.
- ITL: every gap between two consecutive pieces.

Percentiles come from HDR histograms (microsecond resolution, 3 significant figures);
Prometheus gets the same observations as histograms for scraping. A *deadline miss* is an
answer later than its budget; *goodput* is the rate of requests that met their budget.
"""

from __future__ import annotations

import itertools
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

__all__ = ["GateMetrics", "LatencyStats", "percentiles"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10)
_MAX_US = 3_600_000_000  # one hour


def _hist() -> HdrHistogram:
    return HdrHistogram(1, _MAX_US, 3)


def percentiles(h: HdrHistogram) -> dict[str, float]:
    """p50/p90/p99/max in milliseconds (zeros when empty)."""
    if h.get_total_count() == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "count": 0}
    return {
        "p50": h.get_value_at_percentile(50) / 1000.0,
        "p90": h.get_value_at_percentile(90) / 1000.0,
        "p99": h.get_value_at_percentile(99) / 1000.0,
        "max": h.get_max_value() / 1000.0,
        "count": h.get_total_count(),
    }


@dataclass(slots=True)
class LatencyStats:
    """HDR histograms of one route."""

    ttft: HdrHistogram = field(default_factory=_hist)
    tpot: HdrHistogram = field(default_factory=_hist)
    itl: HdrHistogram = field(default_factory=_hist)
    e2e: HdrHistogram = field(default_factory=_hist)
    requests: int = 0
    deadline_misses: int = 0
    met_slo: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "deadline_misses": self.deadline_misses,
            "met_slo": self.met_slo,
            "ttft_ms": percentiles(self.ttft),
            "tpot_ms": percentiles(self.tpot),
            "itl_ms": percentiles(self.itl),
            "e2e_ms": percentiles(self.e2e),
        }


def _us(ms: float) -> int:
    return min(_MAX_US, max(1, round(ms * 1000.0)))


class _Counts:
    """A labelled Prometheus counter kept as plain integers until a scrape reads it."""

    __slots__ = ("doc", "labels", "name", "values")

    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.values: dict[tuple[str, ...], int] = {}

    def inc(self, key: tuple[str, ...]) -> None:
        self.values[key] = self.values.get(key, 0) + 1

    def family(self) -> CounterMetricFamily:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for key, n in list(self.values.items()):
            fam.add_metric(list(key), n)
        return fam


class _Buckets:
    """A labelled Prometheus histogram kept as bucket counts until a scrape reads it."""

    __slots__ = ("doc", "name", "values")

    def __init__(self, name: str, doc: str) -> None:
        self.name, self.doc = name, doc
        self.values: dict[str, list[float]] = {}  # route -> [count per bucket..., +Inf, sum]

    def observe(self, route: str, seconds: float) -> None:
        row = self.values.get(route)
        if row is None:
            row = self.values[route] = [0.0] * (len(_BUCKETS) + 2)
        row[bisect_left(_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def family(self) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(self.name, self.doc, labels=["route"])
        for route, row in list(self.values.items()):
            cumulative, total = [], 0.0
            for le, n in zip((*map(floatToGoString, _BUCKETS), "+Inf"), row[:-1], strict=True):
                total += n
                cumulative.append((le, total))
            fam.add_metric([route], cumulative, row[-1])
        return fam


class _Exported:
    """The registry's view of the counts and buckets (a Prometheus custom collector)."""

    def __init__(self, parts: Sequence[_Counts | _Buckets]) -> None:
        self.parts = parts

    def collect(self) -> Iterator[Metric]:
        for part in self.parts:
            yield part.family()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # no families known ahead of a scrape: registered without a check


class GateMetrics:
    """Collects per-route latency and outcome counts for one gate.

    Each instance has its own Prometheus ``registry`` unless one is given, so several gates
    (or tests) never collide. Counters and histograms are plain numbers on the request path
    and become Prometheus families only when the registry is scraped: prometheus_client's
    own metrics take a lock and check their labels on every observation, which cost more
    than the gate's decision.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.routes: dict[str, LatencyStats] = {}
        self.attempt_outcomes: dict[tuple[str, str], int] = {}
        self.started = time.monotonic()
        self._ttft = _Buckets("rtgate_ttft_seconds", "Time to first piece")
        self._tpot = _Buckets("rtgate_tpot_seconds", "Time per output piece after the first")
        self._e2e = _Buckets("rtgate_e2e_seconds", "Request start to last piece")
        self._requests = _Counts("rtgate_requests", "Answered requests", ("route",))
        self._misses = _Counts(
            "rtgate_deadline_misses", "Answers later than their budget", ("route",)
        )
        self._attempts = _Counts(
            "rtgate_tier_attempts", "Tier attempts by outcome", ("tier", "outcome")
        )
        self._delegated = _Counts(
            "rtgate_delegated", "Jobs sent to the background", ("tier", "result")
        )
        parts = (self._ttft, self._tpot, self._e2e, self._requests, self._misses)
        self.registry.register(_Exported((*parts, self._attempts, self._delegated)))
        self.queue_depth = Gauge(
            "rtgate_delegation_queue_depth", "Jobs waiting", registry=self.registry
        )

    def record(
        self,
        route: str,
        *,
        ttft_ms: float | None,
        e2e_ms: float,
        piece_times_ms: Sequence[float] = (),
        budget_ms: float | None = None,
        slo_ms: float | None = None,
    ) -> None:
        """One answered request. ``piece_times_ms`` are arrival times from request start;
        ``slo_ms`` is what the budget bounds (TTFT when streaming, E2E by default)."""
        stats = self.routes.get(route)
        if stats is None:
            stats = self.routes[route] = LatencyStats()
        stats.requests += 1
        key = (route,)
        self._requests.inc(key)
        stats.e2e.record_value(_us(e2e_ms))
        self._e2e.observe(route, e2e_ms / 1000.0)
        if ttft_ms is not None:
            stats.ttft.record_value(_us(ttft_ms))
            self._ttft.observe(route, ttft_ms / 1000.0)
        n = len(piece_times_ms)
        if n >= 2:
            tpot = (piece_times_ms[-1] - piece_times_ms[0]) / (n - 1)
            stats.tpot.record_value(_us(tpot))
            self._tpot.observe(route, tpot / 1000.0)
            for a, b in itertools.pairwise(piece_times_ms):
                stats.itl.record_value(_us(b - a))
        if budget_ms is not None:
            if (e2e_ms if slo_ms is None else slo_ms) > budget_ms:
                stats.deadline_misses += 1
                self._misses.inc(key)
            else:
                stats.met_slo += 1

    def attempt(self, tier: str, outcome: str) -> None:
        key = (tier, outcome)
        self.attempt_outcomes[key] = self.attempt_outcomes.get(key, 0) + 1
        self._attempts.inc(key)

    def delegated(self, tier: str, result: str) -> None:
        self._delegated.inc((tier, result))

    def snapshot(self) -> dict[str, Any]:
        """Everything as plain data: per route stats, shares, goodput."""
        total = sum(s.requests for s in self.routes.values())
        elapsed = max(1e-9, time.monotonic() - self.started)
        met = sum(s.met_slo for s in self.routes.values())
        return {
            "requests": total,
            "share": {k: s.requests / total for k, s in self.routes.items()} if total else {},
            "deadline_misses": sum(s.deadline_misses for s in self.routes.values()),
            "goodput_rps": met / elapsed,
            "routes": {k: s.to_dict() for k, s in self.routes.items()},
            "attempts": {f"{t}:{o}": n for (t, o), n in sorted(self.attempt_outcomes.items())},
        }

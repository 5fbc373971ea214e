"""Online latency models: what the gate predicts a tier will take.

Each tier gets a :class:`LatencyModel` holding two streaming quantile sketches
(:class:`LogBins`, DDSketch's log-binned scheme with 1 % relative accuracy), one for time to
first piece and one for the whole answer. The
sketches cover a sliding window of recent observations (two rotating halves, bounded in
count and in age), so the prediction follows a backend that gets slower or faster, and one
slow outlier ages out within 1.5 x ``max_age_s`` even for a tier that is rarely measured.
Quantiles are refreshed when an observation is recorded, never while the gate is
deciding: a decision only reads floats. The window's union (both halves) is kept as a
third sketch, added to with every observation and rebuilt only when the halves rotate, so
a refresh reads quantiles without merging two sketches first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LatencyModel", "LogBins", "Prior", "WindowedQuantiles"]

_INF = math.inf
CENSORED_FACTOR = 2.0
_ACCURACY = 0.01  # the sketches' relative accuracy
_ABOVE = 1.0 + 2 * _ACCURACY  # a value this far over the p99 is over it, not sketch error
_GAMMA = (1.0 + _ACCURACY) / (1.0 - _ACCURACY)
_PER_LOG = 1.0 / math.log(_GAMMA)
_MID = 2.0 / (1.0 + _GAMMA)  # a bin's value: within _ACCURACY of everything it holds


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


class LogBins:
    """A quantile sketch of positive values: bin ``k`` counts the values in
    ``(gamma**(k-1), gamma**k]``, so any quantile it returns is within ``_ACCURACY`` of a
    true sample's value (DDSketch's logarithmic mapping, without its store classes: the
    ``ddsketch`` package's ``add`` goes through four Python layers and was a tenth of a
    template hit's time in ``rtgate bench gate``'s profile)."""

    __slots__ = ("bins", "count")

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.count = 0

    def add(self, x: float) -> None:
        """Count ``x`` (> 0)."""
        k = math.ceil(math.log(x) * _PER_LOG)
        bins = self.bins
        bins[k] = bins.get(k, 0) + 1
        self.count += 1

    def merge(self, other: LogBins) -> None:
        bins = self.bins
        for k, n in other.bins.items():
            bins[k] = bins.get(k, 0) + n
        self.count += other.count

    def quantile(self, q: float) -> float:
        """The value at rank ``q * (count - 1)`` (``inf`` when empty), by upper nearest
        rank: with few samples, p99 is the maximum (the conservative reading for a
        deadline), not the second largest."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        """:meth:`quantile` of each of ``qs`` (ascending), in one walk of the bins."""
        n = self.count
        if not n:
            return [_INF] * len(qs)
        ranks = [math.ceil(q * (n - 1) - 1e-9) for q in qs]
        out: list[float] = []
        seen, bins = 0, self.bins
        for k in sorted(bins):
            seen += bins[k]
            while seen > ranks[len(out)]:
                out.append(_GAMMA**k * _MID)
                if len(out) == len(ranks):
                    return out
        top = _GAMMA ** max(bins) * _MID  # a q over 1: the largest
        return out + [top] * (len(ranks) - len(out))


class WindowedQuantiles:
    """p50/p90/p99 over the last ``window`` observations *and* the last ``max_age_s``
    seconds, in milliseconds: an old outlier ages out even when samples are rare."""

    __slots__ = (
        "_both",
        "_clock",
        "_cur",
        "_cur_started",
        "_prev",
        "_refreshed_at",
        "_since_refresh",
        "max_age_s",
        "p50",
        "p90",
        "p99",
        "refresh_every",
        "refresh_s",
        "window",
    )

    def __init__(
        self,
        window: int = 512,
        refresh_every: int = 32,
        max_age_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        refresh_s: float = 0.05,
    ) -> None:
        if window < 2:
            raise ValueError("window must be >= 2")
        if max_age_s <= 0:
            raise ValueError("max_age_s must be > 0")
        self.window = window
        self.refresh_every = refresh_every
        self.refresh_s = refresh_s
        self._refreshed_at = -math.inf
        self.max_age_s = max_age_s
        self._clock = clock
        self._cur = LogBins()
        self._cur_started = 0.0
        self._prev: LogBins | None = None
        self._both = LogBins()  # _prev and _cur together
        self._since_refresh = 0
        self.p50 = self.p90 = self.p99 = _INF

    @property
    def count(self) -> int:
        return self._both.count

    def _expire(self, now: float) -> None:
        age = now - self._cur_started
        if age >= self.max_age_s:  # everything held is older than the window
            self._prev, self._cur = None, LogBins()
            self._both = LogBins()
        elif age >= self.max_age_s / 2 and self._cur.count:
            self._rotate()

    def _rotate(self) -> None:
        """The current half becomes the previous one; the oldest half is dropped."""
        self._prev, self._cur = self._cur, LogBins()
        self._both = LogBins()
        self._both.merge(self._prev)

    def add(self, ms: float) -> None:
        now = self._clock()
        if self._cur.count:
            self._expire(now)
        if not self._cur.count:
            self._cur_started = now
        ms = max(ms, 1e-3)
        self._cur.add(ms)
        self._both.add(ms)
        if self._cur.count >= self.window // 2:
            self._rotate()
            self._cur_started = now
        self._since_refresh += 1
        # Refresh every observation while learning, and whenever the tail grows (a slower
        # answer than the p99 must count at once: predicting too fast costs cut-offs);
        # else every refresh_every observations or refresh_s seconds, whichever comes
        # first: quantiles move slowly, and a refresh walks the sketch's bins (at 20,000
        # answers a second, refreshing every 4th took a fifth of a template hit's time)
        if (
            self._both.count < 64
            or ms > self.p99 * _ABOVE
            or self._since_refresh >= self.refresh_every
            or now - self._refreshed_at >= self.refresh_s
        ):
            self._refreshed_at = now
            self.refresh()

    def refresh(self) -> None:
        self._since_refresh = 0
        sketch = self._both
        if not sketch.count:
            self.p50 = self.p90 = self.p99 = _INF
            return
        self.p50, self.p90, self.p99 = sketch.quantiles((0.50, 0.90, 0.99))

    def quantile(self, q: float) -> float:
        """Any quantile, computed now (slower than the cached p50/p90/p99)."""
        return self._both.quantile(q)


@dataclass(frozen=True, slots=True)
class Prior:
    """What to assume before a tier has answered: its expected p99s in ms."""

    ttft_p99_ms: float
    total_p99_ms: float


class LatencyModel:
    """What one tier takes: first piece and whole answer.

    With no observations and no prior the tier is *cold*: predictions are infinite, so the
    gate treats it as too slow for any inline budget until it has answered (at warm-up, or
    in the background). ``min_samples`` observations are needed before the sketch replaces
    the prior.
    """

    __slots__ = ("min_samples", "prior", "total", "ttft")

    def __init__(
        self,
        prior: Prior | None = None,
        window: int = 512,
        min_samples: int = 1,
        max_age_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prior = prior
        self.min_samples = min_samples
        self.ttft = WindowedQuantiles(window, max_age_s=max_age_s, clock=clock)
        self.total = WindowedQuantiles(window, max_age_s=max_age_s, clock=clock)

    @property
    def cold(self) -> bool:
        return self.prior is None and self.ttft.count < self.min_samples

    def observe(self, ttft_ms: float, total_ms: float | None = None) -> None:
        self.ttft.add(ttft_ms)
        if total_ms is not None:
            self.total.add(total_ms)

    def observe_cutoff(self, waited_ms: float) -> None:
        """The tier was cancelled after ``waited_ms`` without an answer.

        The true latency is unknown but larger; it is recorded pessimistically as
        ``CENSORED_FACTOR`` times the wait, so a tier that keeps missing its cut-off soon
        predicts itself out of the budget instead of being tried and cut off forever. It
        is never recorded below the current prediction.
        """
        # A short wait says little: never let a cut-off lower the prediction.
        self.ttft.add(max(waited_ms * CENSORED_FACTOR, _finite(self.predict_ttft())))
        self.total.add(max(waited_ms * CENSORED_FACTOR, _finite(self.predict_total())))

    def predict_ttft(self, q: str = "p99") -> float:
        if self.ttft.count >= self.min_samples:
            return float(getattr(self.ttft, q))
        return self.prior.ttft_p99_ms if self.prior else _INF

    def predict_total(self, q: str = "p99") -> float:
        if self.total.count >= self.min_samples:
            return float(getattr(self.total, q))
        return self.prior.total_p99_ms if self.prior else _INF

    def snapshot(self) -> dict[str, float | int | bool]:
        return {
            "cold": self.cold,
            "samples": self.ttft.count,
            "ttft_p50_ms": self.ttft.p50,
            "ttft_p99_ms": self.predict_ttft(),
            "total_p50_ms": self.total.p50,
            "total_p99_ms": self.predict_total(),
        }

"""The slow clauses' share of a tick: which due stations are evaluated in what is left of it.

The stop path of a tick (features, detector, baselines, rules, publishing) runs for every
station every 20 ms and must end before the next window does. The envelope lines
(``lines.py``) run after it, on a sixteenth of the stations a tick, and a station with known
bearing orders also reads its shaft speed (``speed.py``, about 0.3-0.9 ms a station on this
machine): at 256 stations that is most of the tick, and a slower moment would make the
next tick's stop path late. So when a tick has a deadline, the lines take what is left of it:

- the due stations are taken oldest first (the ones that waited since an earlier tick, then
  this tick's), in chunks of at most :data:`CHUNK`; a chunk starts only if the measured cost
  per station says it ends before the deadline (the cost follows a dearer chunk at once, a
  cheaper one slowly: a machine that slows down, another process on the core, is believed
  at once);
- the one that waited longest is evaluated even past the deadline, so no station waits for
  ever: with ``n`` due, the last waits at most ``n`` ticks;
- a station not reached waits (bounded: one flag per station, nothing queued twice) and is
  evaluated on a later tick, on its newest 1.28 s; if its next turn comes while it still
  waits, that turn is the same evaluation (``skipped`` counts it: one evaluation fewer).
  The lines count evaluations, not ticks: a hold of four evaluations then spans a little
  more time, and the mean's four segments (1.28 s apart when on time) overlap by the waits.

Without a deadline (``scan``, ``evaluate``, the tests that compare decisions) every due
station is evaluated in its own tick, so decisions do not depend on the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import InvalidRequest

__all__ = ["CHUNK", "LIVE_BUDGET_S", "TickShare"]

LIVE_BUDGET_S = 0.014  # a live run's tick (``guard run``, the bench): 14 ms of its 20 ms,
# the rest for what the tick's thread does not control (the MQTT thread, a collection)
CHUNK = 4  # stations per chunk: the cost is measured again after each (a chunk is what
# the share can overrun its deadline by when the machine slows at once)
WEIGHT = 0.25  # a cheaper chunk's weight in the cost per station (a dearer one sets it)

I64 = npt.NDArray[np.int64]


class TickShare:
    """For ``n_streams`` stations, which due stations a tick evaluates (module doc).

    ``clock`` is the clock deadlines are given in (seconds). Counters: ``deferred`` the
    evaluations put off to a later tick, ``skipped`` the turns that came while the station
    still waited, ``longest`` the most ticks a station waited.
    """

    def __init__(self, n_streams: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.since = np.full(n_streams, -1, np.int64)  # the tick a station waits since, -1: none
        self.tick = 0
        self.cost_s: float | None = None  # measured seconds per station evaluated
        self.deferred = 0
        self.skipped = 0
        self.longest = 0

    def reset(self, stream: int | None = None) -> None:
        """One station (or every station) waits for nothing: a new recording."""
        self.since[slice(None) if stream is None else stream] = -1

    def run(
        self,
        rows: I64,
        turn: npt.NDArray[np.bool_],
        ready: npt.NDArray[np.bool_],
        evaluate: Callable[[I64], None],
        deadline: float | None = None,
    ) -> None:
        """One tick over the stations ``rows``: those whose ``turn`` it is and the ``ready``
        ones that wait are due; ``evaluate`` is called on chunks of them (all at once
        without a ``deadline``), the rest wait."""
        if not (len(turn) == len(ready) == len(rows)):
            raise InvalidRequest("rows, turn and ready must have one entry per station")
        self.tick += 1
        waits = ready & (self.since[rows] >= 0)
        self.skipped += int((turn & waits).sum())
        due = rows[(turn & ready) | waits]
        if not len(due):
            return
        if deadline is None:
            evaluate(due)
            self.since[due] = -1
            return
        since = np.where(self.since[due] >= 0, self.since[due], self.tick)
        due = due[np.argsort(since, kind="stable")]
        done = 0
        while done < len(due):
            left = deadline - self.clock()
            if left <= 0.0:
                k = 0
            elif self.cost_s is None or self.cost_s <= 0.0:  # not measured yet: one chunk
                k = CHUNK
            else:
                k = int(left / self.cost_s)
            if done == 0:
                k = max(k, 1)  # the longest waiting, even past the deadline
            k = min(k, CHUNK, len(due) - done)
            if k <= 0:
                break
            chunk = due[done : done + k]
            t0 = self.clock()
            evaluate(chunk)
            per = (self.clock() - t0) / k
            if self.cost_s is None or per > self.cost_s:  # up at once, down slowly
                self.cost_s = per
            else:
                self.cost_s = (1 - WEIGHT) * self.cost_s + WEIGHT * per
            waited = self.tick - np.where(self.since[chunk] >= 0, self.since[chunk], self.tick)
            self.longest = max(self.longest, int(waited.max()))
            self.since[chunk] = -1
            done += k
        rest = due[done:]
        self.deferred += int((self.since[rest] < 0).sum())
        self.since[rest] = np.where(self.since[rest] >= 0, self.since[rest], self.tick)

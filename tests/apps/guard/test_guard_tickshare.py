"""The lines' share of a tick (``tickshare.py``), on a fake clock: without a deadline every
due station is evaluated in its tick; with one, what the measured cost affords, oldest
first, the longest waiting even past the deadline; nothing is lost (a station put off is
evaluated later, once, on its newest windows); the stations' decisions under an ample
deadline are the same as without one, and under none left a fault is still heard."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.guard.features import CREST_BANDS, HOP, N_SUB, RATE
from rtgate.apps.guard.lines import STEP, WINDOWS, Lines, LinesProfile
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.tickshare import CHUNK, TickShare
from rtgate.core.errors import InvalidRequest

I64 = npt.NDArray[np.int64]


class _Clock:
    """Seconds that pass only when a station is evaluated (``per_station_s`` each)."""

    def __init__(self, per_station_s: float) -> None:
        self.t = 0.0
        self.per = per_station_s
        self.chunks: list[list[int]] = []

    def __call__(self) -> float:
        return self.t

    def evaluate(self, rows: I64) -> None:
        self.chunks.append(rows.tolist())
        self.t += self.per * len(rows)


def _tick(share: TickShare, clock: _Clock, n: int, turn: list[int], budget_s: float | None) -> None:
    on = np.zeros(n, dtype=bool)
    on[turn] = True
    deadline = None if budget_s is None else clock.t + budget_s
    share.run(np.arange(n), on, np.ones(n, dtype=bool), clock.evaluate, deadline)


def test_without_a_deadline_every_due_station_is_evaluated_in_its_tick() -> None:
    clock = _Clock(0.010)  # far over any tick: it does not matter without a deadline
    share = TickShare(32, clock)
    _tick(share, clock, 32, list(range(16)), None)
    assert clock.chunks == [list(range(16))]
    assert share.deferred == share.skipped == 0 and (share.since == -1).all()


def test_a_deadline_takes_what_the_cost_affords_oldest_first_and_loses_nothing() -> None:
    clock = _Clock(0.001)
    share = TickShare(32, clock)
    # tick 1: nothing measured yet, one chunk; 16 - CHUNK wait
    _tick(share, clock, 32, list(range(16)), 0.0035)
    assert clock.chunks == [list(range(CHUNK))]
    assert share.cost_s == pytest.approx(0.001) and share.deferred == 16 - CHUNK
    # tick 2: 3.5 ms at 1 ms a station affords 3, the ones put off in tick 1 first
    _tick(share, clock, 32, [16, 17], 0.0035)
    assert clock.chunks[-1] == list(range(CHUNK, CHUNK + 3))
    # then on, with 2 turns a tick, until none waits: each evaluated once
    for _ in range(20):
        _tick(share, clock, 32, [], 0.0035)
    done = [r for c in clock.chunks for r in c]
    assert sorted(done) == list(range(18))
    assert share.longest >= 2 and (share.since == -1).all()


def test_the_cost_follows_a_dearer_chunk_at_once_and_a_cheaper_one_slowly() -> None:
    clock = _Clock(0.001)
    share = TickShare(8, clock)
    _tick(share, clock, 8, [0], 1.0)
    assert share.cost_s == pytest.approx(0.001)
    clock.per = 0.003  # another process took the core
    _tick(share, clock, 8, [1], 1.0)
    assert share.cost_s == pytest.approx(0.003)
    clock.per = 0.001
    _tick(share, clock, 8, [2], 1.0)
    assert share.cost_s == pytest.approx(0.75 * 0.003 + 0.25 * 0.001)


def test_the_longest_waiting_goes_even_with_nothing_left_so_no_station_waits_for_ever() -> None:
    n = 32
    clock = _Clock(0.001)
    share = TickShare(n, clock)
    for t in range(3 * n):  # two turns a tick, one evaluation a tick: the rest waits
        _tick(share, clock, n, [(2 * t) % n, (2 * t + 1) % n], -1.0)
    assert all(len(c) == 1 for c in clock.chunks) and len(clock.chunks) == 3 * n
    assert set(r for c in clock.chunks for r in c) == set(range(n))
    assert share.longest <= n  # a station has at most n - 1 waiting before it
    assert share.skipped > 0  # a turn that came while the station still waited


def test_a_station_reset_waits_for_nothing_and_bad_shapes_are_refused() -> None:
    clock = _Clock(0.001)
    share = TickShare(4, clock)
    share.cost_s = 0.001
    _tick(share, clock, 4, [0, 1, 2, 3], -1.0)
    assert (share.since[1:] > 0).all()
    share.reset(2)
    _tick(share, clock, 4, [], 1.0)
    assert clock.chunks[-1] == [1, 3]
    with pytest.raises(InvalidRequest):
        share.run(np.arange(4), np.ones(3, dtype=bool), np.ones(4, dtype=bool), clock.evaluate)


def _zero_profile() -> LinesProfile:
    bins = np.fft.rfftfreq(WINDOWS * N_SUB, 1 / (RATE / (HOP // N_SUB)))
    zeros = np.zeros((len(CREST_BANDS), len(bins)), np.float32)
    return LinesProfile(zeros, 0.0, 8, zeros, 0.0, 8)


def _noise(ticks: int, n: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(4)
    return (rng.random((ticks, n, len(CREST_BANDS), N_SUB)) + 0.1).astype(np.float32)


def test_lines_under_an_ample_deadline_decide_as_without_one() -> None:
    n = 40
    env = _noise(WINDOWS + 3 * STEP, n)
    free = Lines([_zero_profile()] * n, [0.01] * n)
    timed = Lines([_zero_profile()] * n, [0.01] * n, clock=lambda: 0.0)
    for e in env:
        hot = free.step(e)
        assert (timed.step(e, deadline=1.0) == hot).all()
        np.testing.assert_array_equal(timed.last, free.last)
    assert timed.share.deferred == 0 and free.hot.all()


def test_lines_with_no_time_left_still_evaluate_every_station_and_hear_it() -> None:
    # noise over a reference of zeros is over any small bar: every station must become hot
    n = 48  # three turns a tick, one evaluation a tick
    env = _noise(WINDOWS + 40 * STEP, n)
    lines = Lines([_zero_profile()] * n, [0.01] * n, clock=lambda: 0.0)
    for e in env:
        lines.step(e, deadline=-1.0)
    assert lines.hot.all()
    assert lines.share.deferred > 0 and lines.share.skipped > 0 and lines.share.longest <= n


def test_a_tick_budget_is_within_one_tick() -> None:
    for bad in (0.0, -0.001, 2 * HOP / RATE):
        with pytest.raises(InvalidRequest):
            Guard(["a"], tick_budget_s=bad)
    assert Guard(["a"], tick_budget_s=0.014).tick_budget_s == 0.014

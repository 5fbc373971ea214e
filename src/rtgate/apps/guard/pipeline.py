"""The stop path: windows in -> features -> detector -> baselines -> rules -> stop published.

``Guard`` runs many stations in step: each call takes one 20 ms window per station (or a
subset of stations), computes features and scores in one batch, moves the scores of the
stations that have an enrolment by their own normal (``baseline.py``) and feeds the rule
engine (with the novelty, the envelope's rhythm, ``rhythm.py``, and its new lines,
``lines.py``, of the stations whose rules have those clauses). The rhythm and the lines are
computed only when some station has them, and after the tick's stops are published: their
hits count from the next window on, so they add nothing to the time from a window's end to
its stop;
once every stop of the tick is published, each gets a copy of the last ``clip_s`` seconds
and goes to ``on_stop`` (the explainer's feed). Nothing here imports language-model code;
the ``before_publish`` hook exists only for the ablation that puts an explainer first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.baseline import Baselines, Enrolment
from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.events import StopEvent, StopMessage
from rtgate.apps.guard.features import CREST_BANDS, HOP, N_SUB, RATE, WindowFeatures
from rtgate.apps.guard.rhythm import Rhythm
from rtgate.apps.guard.rules import RuleEngine, Rules
from rtgate.core.errors import InvalidRequest

__all__ = ["Guard", "StopEvent", "StopSink"]

F32 = npt.NDArray[np.float32]


class StopSink(Protocol):
    """Where stops are published (``StopPublisher`` implements it)."""

    def publish(self, topic: str, msg: StopMessage) -> int: ...


class Guard:
    """Stations' stop path, batched across stations.

    Args:
        stations: station names (one row each).
        rules: the rule file's contents; every station's stop topic must be one a client
            may publish to (:class:`InvalidRequest` otherwise, see ``topics.py``).
        sink: the publisher; ``None`` decides without publishing (scans).
        detector: a detector with ``n_streams == len(stations)`` (default: the shipped one).
        on_stop: called with each ``StopEvent`` after it is published; must not block.
        before_publish: ablation only: runs before publishing (delays the stop).
        clip_s: seconds of audio kept per station for the explanation.
        clock: UNIX time for the ``ts`` of a stop.
        enrolments: per station its enrolment or None (default: none has one).
        tick_budget_s: a live run's share of each 20 ms tick, from the call's start: the
            envelope lines take what the stop path left of it and put off the stations
            they cannot afford (``tickshare.py``); None (scans, evaluations): every due
            station is evaluated in its tick, whatever it costs.
    """

    def __init__(
        self,
        stations: Sequence[str],
        rules: Rules | None = None,
        sink: StopSink | None = None,
        *,
        detector: Detector | None = None,
        on_stop: Callable[[StopEvent], object] | None = None,
        before_publish: Callable[[StopEvent], object] | None = None,
        clip_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        enrolments: Sequence[Enrolment | None] | None = None,
        tick_budget_s: float | None = None,
    ) -> None:
        if tick_budget_s is not None and not 0.0 < tick_budget_s <= HOP / RATE:
            raise InvalidRequest(f"a tick's budget must be in (0, {HOP / RATE}] s")
        self.tick_budget_s = tick_budget_s
        self.stations = list(stations)
        n = len(self.stations)
        self.rules = rules or Rules()
        if enrolments is not None and len(enrolments) != n:
            raise InvalidRequest(f"{len(enrolments)} enrolments for {n} stations")
        self._enrolled = [e is not None for e in enrolments or [None] * n]
        self.engine = RuleEngine(self.rules, self.stations, self._enrolled)
        # every stop topic checked now (InvalidRequest), not at a stop's publish
        self.topics = [self.rules.for_station(s).topic_for(s) for s in self.stations]
        self.detector = detector or Detector(n_streams=n)
        if self.detector.n_streams != n:
            raise InvalidRequest(f"detector has {self.detector.n_streams} streams, need {n}")
        novelty = [self.rules.for_station(s).novelty for s in self.stations]
        rhythm = [self.rules.for_station(s).rhythm for s in self.stations]
        thresholds = [self.rules.for_station(s).threshold for s in self.stations]
        slow = [self.rules.for_station(s).slow for s in self.stations]
        persist = [self.rules.for_station(s).persist for s in self.stations]
        lines = [self.rules.for_station(s).lines for s in self.stations]
        orders = [self.rules.for_station(s).orders for s in self.stations]
        strong = [self.rules.for_station(s).strong for s in self.stations]
        quick = [self.rules.for_station(s).quick for s in self.stations]
        quick_db = [self.rules.for_station(s).quick_db for s in self.stations]
        self.baselines = Baselines(
            enrolments or [None] * n,
            novelty,
            rhythm,
            thresholds,
            slow,
            persist,
            lines,
            orders,
            strong,
            quick,
            quick_db,
        )
        # the envelope's rhythm and lines, only when some station's rule and enrolment use them
        self.rhythm = Rhythm(n) if self.baselines.rhythm_clause else None
        self.lines = self.baselines.lines  # stepped through the baselines, after publishing
        self._envelope = np.zeros((n, len(CREST_BANDS), N_SUB), np.float32)
        self._rhythmic = np.zeros(n, dtype=bool)  # the last window's rhythm hits
        self._lined = np.zeros(n, dtype=bool)  # the envelope lines' hits for the next window
        self.sink = sink
        self.on_stop = on_stop
        self.before_publish = before_publish
        self.clock = clock
        self.features = WindowFeatures()
        slots = max(1, round(clip_s * RATE / HOP))
        self._ring = np.zeros((n, slots, HOP), dtype=np.float32)
        self._ring.fill(0.0)  # touch every page now, not on the first ticks
        self._slot = np.zeros(n, dtype=np.int64)
        self._all = np.arange(n)
        self.last_scores = np.zeros(n, dtype=np.float32)  # what the rules saw
        self.last_detector_scores = np.zeros(n, dtype=np.float32)  # the general detector's
        self.features_s = 0.0  # how long the last tick's features took
        self.infer_s = 0.0  # how long the last detector call took
        self.rhythm_s = 0.0  # how long the last tick's rhythm took (0: no station uses it)
        self.lines_s = 0.0  # how long the last tick's envelope lines took (0: none uses them)
        self._kept = False
        self.warm_up()

    def warm_up(self, ticks: int = 8) -> None:
        """Run ``ticks`` whole ticks on noise, then forget them (state, cool-downs, clips).

        A fresh stop path's first ticks are slow: onnxruntime's first runs, the feature work
        arrays, numpy's and the rule engine's first calls, the clip ring's first writes; a
        fault present from the first window would wait for that (256 stations, ticks back to
        back: first tick 3.7-4.5 ms after one run of the features and the detector, 2.4 ms
        after this). Nothing is published or handed on; a stop's message is built once on a
        dummy. Ticks after an idle spell are slower again (caches): that is the steady state.
        """
        n = len(self.stations)
        noise = np.random.default_rng(0).standard_normal((n, HOP)).astype(np.float32)
        sink, on_stop, before = self.sink, self.on_stop, self.before_publish
        self.sink = self.on_stop = self.before_publish = None
        try:
            self.detector.warm_up()
            for i in range(ticks):
                self.process(noise * np.float32(0.02 * (1 + i % 4)), (i + 1) * HOP / RATE)
            rule = self.rules.for_station(self.stations[0])
            StopMessage(self.stations[0], 0.0, self.clock(), 0.0, rule.describe()).to_json()
        finally:
            self.sink, self.on_stop, self.before_publish = sink, on_stop, before
            self.engine = RuleEngine(self.rules, self.stations, self._enrolled)
            self.detector.reset()
            self.baselines.reset()
            if self.rhythm is not None:
                self.rhythm.reset()
            self._rhythmic[:] = False
            self._lined[:] = False
            self._ring.fill(0.0)
            self._slot[:] = 0
            self.last_scores[:] = 0.0
            self.last_detector_scores[:] = 0.0

    def _keep(self, w: F32, idx: npt.NDArray[np.int64]) -> None:
        """Append this tick's windows to the stations' clip rings (once per tick)."""
        if self._kept:
            return
        self._ring[idx, self._slot[idx]] = w
        self._slot[idx] = (self._slot[idx] + 1) % self._ring.shape[1]
        self._kept = True

    def clip(self, index: int) -> F32:
        """The last ``clip_s`` seconds of a station, oldest sample first."""
        s = int(self._slot[index])
        return np.concatenate([self._ring[index, s:], self._ring[index, :s]]).reshape(-1)

    def process(
        self,
        windows: npt.ArrayLike,
        window_end_ts: float | npt.ArrayLike,
        rows: npt.ArrayLike | None = None,
    ) -> list[StopEvent]:
        """One window per station in ``rows`` (default all); returns the stops decided."""
        w = np.asarray(windows, dtype=np.float32)
        every = rows is None  # all stations in order: the detector steps them in place
        idx = self._all if every else np.asarray(rows, np.int64)
        if w.ndim != 2 or w.shape != (len(idx), HOP):
            raise InvalidRequest(f"windows must be ({len(idx)}, {HOP}), got {w.shape}")
        self._kept = False
        t0 = time.perf_counter()
        slow_env = self.rhythm is not None or self.lines is not None
        env = self._envelope[: len(idx)] if slow_env else None
        feats = self.features(w, env)
        t1 = time.perf_counter()
        general = self.detector.step(feats, None if every else idx)
        t2 = time.perf_counter()
        self.infer_s = t2 - t1
        self.features_s = t1 - t0
        base = self.baselines
        logits = self.detector.last_logit if every else self.detector.last_logit[idx]
        scores = base.adjust(feats, general, None if every else idx, logits)
        novel = None
        if base.novelty_clause:
            novel = base.last_novel if every else base.last_novel[idx]
        if self.rhythm is not None:  # the hits of the station's previous window
            hit = self._rhythmic if every else self._rhythmic[idx]
            novel = hit if novel is None else novel | hit
        if self.lines is not None:  # decided after the station's previous window
            hit = self._lined if every else self._lined[idx]
            novel = hit if novel is None else novel | hit
        decisions = self.engine.feed(scores, window_end_ts, None if every else idx, novel)
        self.last_detector_scores[idx] = general
        self.last_scores[idx] = scores
        stops = []
        for d in decisions:  # every stop of this tick is published before anything else
            now = self.clock()
            own_rhythm = bool(np.isfinite(base.rhythm_threshold[d.index]))
            own_model = bool(np.isfinite(base.own_threshold[d.index]))
            own_slow = bool(np.isfinite(base.slow_threshold[d.index]))
            own_persist = bool(np.isfinite(base.persist_threshold[d.index]))
            own_quick = bool(np.isfinite(base.quick_threshold[d.index]))
            own_quick_db = bool(np.isfinite(base.quick_db_threshold[d.index]))
            own_lines = float(base.lines_margin[d.index])  # the margins it applies (0: off)
            own_orders = float(base.orders_margin[d.index])
            own_strong = float(base.strong_margin[d.index])
            rule = d.rule.describe(
                d.instant,
                d.novel,
                own_rhythm,
                own_model,
                own_slow,
                own_persist,
                own_lines,
                own_orders,
                own_strong,
                own_quick,
                own_quick_db,
            )
            msg = StopMessage(d.station, round(d.score, 4), now, d.window_end_ts, rule)
            ev = StopEvent(msg, self.topics[d.index], d.index, np.zeros(0, np.float32), now)
            if self.before_publish is not None:  # the ablation: explain before the stop
                self._keep(w, idx)
                ev = replace(ev, clip=self.clip(d.index))
                self.before_publish(ev)
                ev = replace(ev, message=replace(msg, ts=self.clock()))
            if self.sink is not None:
                self.sink.publish(ev.topic, ev.message)
            stops.append(ev)
        self._keep(w, idx)
        if self.rhythm is not None and env is not None:  # for the next window's decision
            t3 = time.perf_counter()
            rows = None if every else idx
            self._rhythmic[idx] = base.rhythmic(self.rhythm.step(env, rows), rows)
            self.rhythm_s = time.perf_counter() - t3
        if self.lines is not None and env is not None:  # a sixteenth of the stations a tick,
            # in what is left of the tick's budget when it has one
            t4 = time.perf_counter()
            budget = self.tick_budget_s
            deadline = None if budget is None else t0 + budget
            self._lined[idx] = base.step_lines(env, None if every else idx, w, deadline)
            self.lines_s = time.perf_counter() - t4
        stops = [replace(ev, clip=self.clip(ev.index)) for ev in stops]
        if self.on_stop is not None:
            for ev in stops:
                self.on_stop(ev)
        return stops

"""The rule engine that decides a stop: deterministic, declarative, no model involved.

A rules file (TOML) sets defaults and per-station overrides::

    threshold = 0.92              # a window is a hit when its score >= threshold
    k = 2                         # stop when k of the last n windows are hits
    n = 3
    instant = 0.995               # or at once on one window scoring >= instant (0: off)
    enrolled_instant = 0.0        # the same for enrolled stations (0, the default: off)
    novelty = 0.0                 # enrolled stations: a window this novel is a hit (0: off)
    rhythm = 0.0                  # enrolled stations: a rhythm this far over its own is a hit
    slow = 0.0                    # enrolled stations (format /5): a slow rise this far is a hit
    persist = 6.0                 # enrolled stations (format /6): a steady rise this far (0: off)
    quick = 3.0                   # (format /12) the same over 60 ms (0: off)
    quick_db = 8.0                # (format /12) that median this many dB over its own (0: off)
    lines = 0.5                   # enrolled stations (format /7-/9): new envelope lines (0: off)
    orders = 0.35                 # enrolled with its bearing's orders (/10): a comb there (0: off)
    strong = 1.0                  # (/11) one evaluation's comb there, twice (0: off)
    cooldown_s = 10.0             # no second stop from a station within this time
    topic = "rtgate/guard/{station}/stop"

    [stations.C]
    threshold = 0.95
    topic = "line1/C/stop"

    [machines.C]                  # optional, read by the explainer only (see explain.py)
    shaft_hz = 29.95
    bearing = "6205"

Time is the audio's: a window's ``window_end_ts``. The engine reads no clock, so replaying a
file as fast as possible and a fake clock in tests behave exactly like real time.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.topics import expand_topic
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = ["Decision", "Rule", "RuleEngine", "Rules"]

_POPCOUNT = np.array([bin(i).count("1") for i in range(1 << 16)], dtype=np.int8)
_FIELDS = {
    "threshold",
    "k",
    "n",
    "instant",
    "enrolled_instant",
    "novelty",
    "rhythm",
    "slow",
    "persist",
    "quick",
    "quick_db",
    "lines",
    "orders",
    "strong",
    "cooldown_s",
    "topic",
    "name",
}


@dataclass(frozen=True, slots=True)
class Rule:
    """When one station stops, and where the stop goes.

    The shipped model's score is calibrated so that these defaults sit at the operating
    points chosen on a tuning set of unseen motors (``train.OPERATING_POINTS``, see
    docs/guard.md): 0.92 is there the lowest threshold without a false stop or a miss.

    ``instant``: one window scoring at least this (and at least ``threshold``) stops at
    once; 0 turns it off. A score that high is rare on healthy motors (no false stop on
    960 held-out clips of 8 s; at 0.985, one) and saves one window on clear faults; faint
    faults still need ``k`` of ``n``.

    ``enrolled_instant``: the one-window clause's bar for a station with an enrolment (its
    scores are calibrated on its own healthy recording, ``baseline.py``); 0 (the default)
    turns it off there, a station without one keeps ``instant``. On the outside set's
    machines, every station enrolled, the clause stopped healthy stations on a single
    window (most with babble or a conveyor behind them): 9 validation seeds, 600 stations,
    67 false stops with it and 52 without, one catch lost; a blind seed 12 -> 9, no catch
    lost. What it costs: on the benchmark's fleet enrolled (``bench guard --enrol-s 30``)
    onset -> stop p50 47 -> 63 ms, no stop lost (docs/guard.md, Session 16). Stations
    without an enrolment are the general detector's, whose calibration puts its second
    operating point at ``instant``.

    ``novelty``: for a station with an enrolment (``baseline.py``), a window whose novelty
    is at least this (1: the most its healthy recording reached) is a hit as well, whatever
    the detector's score; 0 (the default) turns it off. It hears faults the detector is
    deaf to on machines unlike its training set, and anything else the station did not do
    while it was enrolled (another speed, a new noise): see docs/guard.md.

    ``rhythm``: for a station whose enrolment measured its rhythm (``rhythm.py``), a window
    whose rhythm statistic is at least this much over the highest of the healthy recording
    (and at least ``baseline.RHYTHM_FLOOR``) is a hit as well; 0 (the default) turns it off.
    A train of impacts in the high band the station never made while healthy.
    ``baseline.RHYTHM_MARGIN`` (0.5) is the margin chosen on validation; it is off by default
    because on validation it also added a false stop on machines like the training set and
    on the outside set it changed nothing (docs/guard.md, Session 10).

    ``slow``: for a station whose enrolment measured its slow range (format /5,
    ``baseline.py``), a window is a hit as well when some feature's average over about a
    second (in units of the station's own spread) reaches this many times the highest that
    average reached on the healthy recording; 0 (the default) turns it off. A faint fault
    that persists moves such averages past anything the healthy recording did, where a
    single window stays inside its noise. ``baseline.SLOW_BAR`` (6) is the bar chosen on
    validation; it is off by default because on the guard's benchmark fleet (each station
    enrolled on another recording of its motor, with fewer handling knocks) it made a false
    stop (docs/guard.md, Session 13).

    ``persist``: for a station whose enrolment measured the median's range (format /6, what
    ``guard enroll`` writes by default), a window is a hit as well when the median of a high
    band's ``z`` over the last ``baseline.PERSIST_WINDOWS`` windows reaches this many times
    the highest that median reached on the healthy recording (under the slow clause's veto);
    0 turns it off. The median moves when nearly every window carries the fault's impacts,
    not when a knock hits one or two (docs/guard.md, Session 14). On by default at
    ``baseline.PERSIST_BAR``; files of formats /1-/5 decide as before it.

    ``lines``: for a station whose enrolment measured its envelope spectra (format /7 to
    /9, /9 what ``guard enroll`` writes by default), a window is a hit as well when the
    envelope's spectrum over the last 1.28 s (or its mean over 5.12 s, /8 and /9) has a comb
    of lines the healthy recording never had, held at one rate over four evaluations (/9),
    this margin over the highest the recording reached, on two evaluations in a row
    (``lines.py``); 0 turns it off. A faint defect adds such lines seconds after its onset.
    On by default at ``lines.LINES_MARGIN`` (chosen on validation seeds, docs/guard.md
    Session 24), twice it (``baseline.LINES_HEARING``) on a station whose detector is not
    deaf there; files of formats /1-/6 decide as before it.

    ``orders``: for a station enrolled with its bearing's defect orders and its shaft's
    range (format /10, ``guard enroll --orders … --shaft-hz …``), a window is a hit as well
    when the envelope's comb at those orders times the shaft speed read from the sound
    rises this margin over the highest the healthy recording reached (``orders.py``); 0
    turns it off. On by default at ``orders.ORDERS_MARGIN`` (docs/guard.md, Session 35).
    Where it watches, the ``lines`` clause is a backstop (a wrong bearing given makes the
    orders deaf) at ``orders.BACKSTOP`` times its margin.

    ``strong``: for a station the ``orders`` clause watches whose enrolment has the strong
    comb's tops (format /11, what ``guard enroll --orders`` writes from session 36 on), a
    window is a hit as well when one evaluation's comb at its bearing's orders, not held
    over four, rises this margin over the highest one evaluation of the healthy recording
    reached, on ``orders.STRONG_CONSECUTIVE`` (2) evaluations in a row; twice it where the
    detector hears; 0 turns it off. A loud defect's comb is there within an evaluation or
    two, and the hold made it wait 0.96 s more. On by default at ``orders.STRONG_MARGIN``
    (docs/guard.md, Session 36); files of formats /1-/10 decide as before it.

    ``quick``: for a station whose enrolment measured the quick median's range (format /12,
    what ``guard enroll`` writes from Session 38 on), the persist clause's statistic over the
    last ``baseline.QUICK_WINDOWS`` (3) windows instead of 31, against the highest that short
    median reached on the healthy recording, is a hit at this many times it, under the same
    vetoes plus the low bands' own short median (``baseline.QUICK_LOW_VETO``), and not in a
    run's first ``baseline.QUICK_WARMUP`` windows (``steady.py``); 0 turns it off. A defect
    ringing the high bands louder than anything the station's healthy recording rang there
    for two windows stops within tens of milliseconds instead of after the longer median
    fills. On by default at ``baseline.QUICK_BAR`` (docs/guard.md, Session 38); files of
    formats /1-/11 decide as before it.

    ``quick_db``: the quick clause's median against the same range, in decibels: a window
    is a hit when the second-highest high band's 3-window median stands this many decibels
    over the highest it reached on the healthy recording, unless a low band's stands
    ``baseline.QUICK_DB_LOW_VETO`` decibels over its own (same hold and warm-up, no mid
    veto); 0 turns it off. The ratio asks a band whose healthy median wandered far to rise
    further than a quiet one; decibels ask the same of every band. On by default at
    ``baseline.QUICK_DB_BAR`` (docs/guard.md, Session 39); files of formats /1-/11 decide
    as before it.
    """

    threshold: float = 0.92
    k: int = 2
    n: int = 3
    instant: float = 0.995
    enrolled_instant: float = 0.0
    novelty: float = 0.0
    rhythm: float = 0.0
    slow: float = 0.0
    persist: float = 6.0  # baseline.PERSIST_BAR
    quick: float = 3.0  # baseline.QUICK_BAR
    quick_db: float = 8.0  # baseline.QUICK_DB_BAR
    lines: float = 0.5  # lines.LINES_MARGIN
    orders: float = 0.35  # orders.ORDERS_MARGIN
    strong: float = 1.0  # orders.STRONG_MARGIN
    cooldown_s: float = 10.0
    topic: str = "rtgate/guard/{station}/stop"
    name: str = "default"

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, int | float) and 0.0 < self.threshold <= 1.0):
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold!r}")
        if not (isinstance(self.n, int) and 1 <= self.n <= 16):
            raise ConfigError(f"n must be an int in [1, 16], got {self.n!r}")
        if not (isinstance(self.k, int) and 1 <= self.k <= self.n):
            raise ConfigError(f"k must be an int in [1, n={self.n}], got {self.k!r}")
        ins = self.instant
        if not (isinstance(ins, int | float) and 0.0 <= ins <= 1.0):
            raise ConfigError(f"instant must be in [0, 1] (0: off), got {ins!r}")
        ein = self.enrolled_instant
        if not (isinstance(ein, int | float) and 0.0 <= ein <= 1.0):
            raise ConfigError(f"enrolled_instant must be in [0, 1] (0: off), got {ein!r}")
        nov = self.novelty
        if not (isinstance(nov, int | float) and (nov == 0 or 1.0 <= nov <= 1000.0)):
            raise ConfigError(f"novelty must be 0 (off) or in [1, 1000], got {nov!r}")
        rh = self.rhythm
        if not (isinstance(rh, int | float) and 0.0 <= rh <= 20.0):
            raise ConfigError(f"rhythm must be 0 (off) or a margin in (0, 20], got {rh!r}")
        sl = self.slow
        if not (isinstance(sl, int | float) and (sl == 0 or 1.0 <= sl <= 1000.0)):
            raise ConfigError(f"slow must be 0 (off) or in [1, 1000], got {sl!r}")
        pe = self.persist
        if not (isinstance(pe, int | float) and (pe == 0 or 1.0 <= pe <= 1000.0)):
            raise ConfigError(f"persist must be 0 (off) or in [1, 1000], got {pe!r}")
        qu = self.quick
        if not (isinstance(qu, int | float) and (qu == 0 or 1.0 <= qu <= 1000.0)):
            raise ConfigError(f"quick must be 0 (off) or in [1, 1000], got {qu!r}")
        qd = self.quick_db
        if not (isinstance(qd, int | float) and (qd == 0 or 1.0 <= qd <= 100.0)):
            raise ConfigError(f"quick_db must be 0 (off) or decibels in [1, 100], got {qd!r}")
        li = self.lines
        if not (isinstance(li, int | float) and 0.0 <= li <= 20.0):
            raise ConfigError(f"lines must be 0 (off) or a margin in (0, 20], got {li!r}")
        od = self.orders
        if not (isinstance(od, int | float) and 0.0 <= od <= 20.0):
            raise ConfigError(f"orders must be 0 (off) or a margin in (0, 20], got {od!r}")
        sg = self.strong
        if not (isinstance(sg, int | float) and 0.0 <= sg <= 20.0):
            raise ConfigError(f"strong must be 0 (off) or a margin in (0, 20], got {sg!r}")
        cd = self.cooldown_s
        if not (isinstance(cd, int | float) and math.isfinite(cd) and cd >= 0):
            raise ConfigError(f"cooldown_s must be a finite number >= 0, got {cd!r}")
        try:
            # the template here; each station's own topic when the Guard is built
            expand_topic(self.topic, "station", "stop topic")
        except InvalidRequest as e:
            raise ConfigError(str(e)) from None

    @property
    def instant_at(self) -> float:
        """The score that stops on one window (infinity when the clause is off)."""
        return max(self.instant, self.threshold) if self.instant else math.inf

    def describe(
        self,
        instant: bool = False,
        novel: bool = False,
        rhythm: bool = False,
        own: bool = False,
        slow: bool = False,
        persist: bool = False,
        lines: bool | float = False,
        orders: bool | float = False,
        strong: bool | float = False,
        quick: bool = False,
        quick_db: bool = False,
    ) -> str:
        """The rule (its k-of-n clause, or with ``instant`` its one-window clause) as it
        appears in a stop message; with ``novel``, the k-of-n clause with the station's own
        hits: novelty (when the rule has it), with ``rhythm`` (the station's enrolment
        measured its rhythm) the rhythm, with ``own`` its own model (format /4), and with
        ``slow`` its slow range (format /5), with ``persist`` its median's range (/6), with
        ``lines`` its envelope lines (/7), with ``orders`` its bearing's orders (/10), with
        ``strong`` its strong comb (/11), with ``quick`` its quick median's range (/12) and
        with ``quick_db`` the same in decibels; a
        number for ``lines``, ``orders`` or ``strong``
        is the margin the station applies (its hearing detector doubles the rule's, its
        orders make the lines a backstop), shown instead of the rule's."""
        if instant:
            return f"{self.name}: score>={self.instant_at:g} in 1 window"
        hit = f"score>={self.threshold:g}"
        if novel and self.novelty:
            hit += f" or novelty>={self.novelty:g}"
        if novel and rhythm and self.rhythm:
            hit += f" or rhythm>=own max+{self.rhythm:g}"
        if novel and own:
            hit += " or its own model"
        if novel and slow and self.slow:
            hit += f" or slow>={self.slow:g}x own max"
        if novel and persist and self.persist:
            hit += f" or median>={self.persist:g}x own max"
        if novel and quick and self.quick:
            hit += f" or 60 ms median>={self.quick:g}x own max"
        if novel and quick_db and self.quick_db:
            hit += f" or 60 ms median>=own max+{self.quick_db:g} dB"
        if novel and lines and self.lines:
            at = self.lines if isinstance(lines, bool) else lines
            hit += f" or new envelope lines>=own max+{at:.3g}"
        if novel and orders and self.orders:
            at = self.orders if isinstance(orders, bool) else orders
            hit += f" or a comb at its bearing's orders>=own max+{at:.3g}"
        if novel and orders and self.orders and strong and self.strong:
            at = self.strong if isinstance(strong, bool) else strong
            hit += f" or one evaluation's comb there>=own max+{at:.3g} twice"
        return f"{self.name}: {hit} in {self.k} of {self.n} windows"

    def topic_for(self, station: str) -> str:
        """The stop topic for ``station``; :class:`InvalidRequest` if it cannot be
        published to (see :func:`~rtgate.apps.guard.topics.expand_topic`)."""
        return expand_topic(self.topic, station, f"stop topic of station {station!r}")


@dataclass(frozen=True, slots=True)
class Rules:
    """The default rule and per-station overrides."""

    default: Rule = field(default_factory=Rule)
    stations: Mapping[str, Rule] = field(default_factory=dict)

    def for_station(self, station: str) -> Rule:
        return self.stations.get(station, self.default)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Rules:
        """Rules from a parsed TOML document. Raises :class:`ConfigError` on a bad key."""
        top = {k: v for k, v in data.items() if k not in ("stations", "machines")}
        unknown = set(top) - _FIELDS
        if unknown:
            raise ConfigError(f"unknown rule keys: {sorted(unknown)}")
        default = Rule(**top)
        stations: dict[str, Rule] = {}
        per = data.get("stations", {})
        if not isinstance(per, Mapping):
            raise ConfigError("[stations] must be a table of station tables")
        for name, over in per.items():
            if not isinstance(over, Mapping) or set(over) - _FIELDS:
                raise ConfigError(f"[stations.{name}] has unknown keys or is not a table")
            stations[name] = replace(default, **{"name": name, **over})
        return cls(default, stations)

    @classmethod
    def load(cls, path: str | Path) -> Rules:
        """Rules from a TOML file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
            return cls.parse(tomllib.loads(text))
        except (OSError, tomllib.TOMLDecodeError, TypeError) as e:
            raise ConfigError(f"cannot read rules {path}: {e}") from e


@dataclass(frozen=True, slots=True)
class Decision:
    """A stop decided for ``station`` by ``rule`` on the window ending at ``window_end_ts``."""

    station: str
    index: int
    score: float
    window_end_ts: float
    rule: Rule
    instant: bool = False  # decided by the one-window clause (k of n not reached)
    novel: bool = False  # k of n reached only with the station's novelty or rhythm hits

    @property
    def topic(self) -> str:
        return self.rule.topic_for(self.station)


class RuleEngine:
    """k-of-n hits and cool-down for many stations at once (vectorised over stations).

    ``enrolled``: per station, whether it has an enrolment (default: none has); an enrolled
    station's one-window bar is its rule's ``enrolled_instant`` (its decisions carry that
    rule, with ``instant`` set to it)."""

    def __init__(
        self, rules: Rules, stations: Sequence[str], enrolled: Sequence[bool] | None = None
    ) -> None:
        if not stations or len(set(stations)) != len(stations):
            raise InvalidRequest("stations must be non-empty and unique")
        if enrolled is not None and len(enrolled) != len(stations):
            raise InvalidRequest(f"{len(enrolled)} enrolled flags for {len(stations)} stations")
        self.rules = rules
        self.stations = list(stations)
        per = [rules.for_station(s) for s in self.stations]
        if enrolled is not None:
            per = [replace(r, instant=r.enrolled_instant) if e else r
                   for r, e in zip(per, enrolled, strict=True)]  # fmt: skip
        self._rule = per
        self._thr = np.array([r.threshold for r in per], dtype=np.float32)
        self._k = np.array([r.k for r in per], dtype=np.int8)
        self._inst = np.array([r.instant_at for r in per], dtype=np.float32)
        self._mask = np.array([(1 << r.n) - 1 for r in per], dtype=np.int64)
        self._cool = np.array([r.cooldown_s for r in per], dtype=np.float64)
        self._hits = np.zeros(len(per), dtype=np.int64)
        self._score_hits = np.zeros(len(per), dtype=np.int64)  # without novelty hits
        self._until = np.full(len(per), -np.inf)
        self.novelty = np.array([r.novelty for r in per], dtype=np.float32)

    def feed(
        self,
        scores: npt.ArrayLike,
        window_end_ts: float | npt.ArrayLike,
        rows: npt.ArrayLike | None = None,
        novel: npt.ArrayLike | None = None,
    ) -> list[Decision]:
        """Add one window's score per station (``rows``: which stations; default all).
        ``novel``: per station, whether the window is a novelty or rhythm hit (see
        ``Rule.novelty`` and ``Rule.rhythm``)."""
        s = np.asarray(scores, dtype=np.float32).reshape(-1)
        idx = np.arange(len(self.stations)) if rows is None else np.asarray(rows, np.int64)
        if len(s) != len(idx):
            raise InvalidRequest(f"{len(s)} scores for {len(idx)} stations")
        ts = np.broadcast_to(np.asarray(window_end_ts, dtype=np.float64), s.shape)
        over = (s >= self._thr[idx]).astype(np.int64)
        mask = self._mask[idx]
        if novel is None:
            hits = ((self._hits[idx] << 1) | over) & mask
            k_of_n = _POPCOUNT[hits] >= self._k[idx]
            novel_only = None
            self._score_hits[idx] = hits
        else:
            hits = ((self._hits[idx] << 1) | over | np.asarray(novel, np.int64)) & mask
            by_score = ((self._score_hits[idx] << 1) | over) & mask
            self._score_hits[idx] = by_score
            k_of_n = _POPCOUNT[hits] >= self._k[idx]
            novel_only = k_of_n & (_POPCOUNT[by_score] < self._k[idx])
        self._hits[idx] = hits
        fire = (k_of_n | (s >= self._inst[idx])) & (ts >= self._until[idx])
        out: list[Decision] = []
        for j in np.flatnonzero(fire):
            i = int(idx[j])
            self._until[i] = ts[j] + self._cool[i]
            self._hits[i] = self._score_hits[i] = 0
            rule, instant = self._rule[i], not bool(k_of_n[j])
            nov = novel_only is not None and bool(novel_only[j]) and not instant
            d = Decision(self.stations[i], i, float(s[j]), float(ts[j]), rule, instant, nov)
            out.append(d)
        return out

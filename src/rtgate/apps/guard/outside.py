"""The outside set: machines from a simulator of their own, never trained or tuned on.

An evaluation the detector is never tuned on must not share its simulator's habits, so this
module writes its own physics (nothing of ``simulate.py``'s generators is used) and draws
every parameter from ranges disjoint from those the training simulator draws from
(:data:`PARTITION`, checked by a test), with a fixed seed (:data:`SEED`):

- shaft speeds between the training bands (9-13.5 and 66.5-76 Hz), some driven by a
  variable-speed drive that runs up or down during the clip (by 10-30 %: while it does, the
  speed passes through the training bands above, up to 17.6 and 98.8 Hz; the set was fixed
  before this was noticed and is left as it is);
- supply lines of 25 or 400 Hz (hum at twice the line and its harmonics);
- bearings of other geometries (:data:`BEARINGS`), housing resonances below 2 kHz or above
  6.5 kHz, damping lighter or heavier than trained, a microphone path with reflections;
- fans of 17-23 blades, rotor-slot whine of 46-58 slots (3-4.4 kHz on the fast shafts,
  with sidebands at twice the line);
- backgrounds the training simulator has no generator for: speech babble (glottal pulses
  through vowel formants), a forklift (diesel firing, passing by, a reversing beeper at
  2.6-3.2 kHz), a screw compressor (lobe-pass tones and a high band pulsating at the lobe
  rate), a conveyor (roller rumble, belt-splice clicks, rattling totes);
- benign impacts of their own kind (long-ringing plate modes, pneumatic thumps).

A fault's level is the RMS of the defect's sound over the RMS of everything else, from -22
to -6 dB. ``simulate.py`` counts a defect's impact peak over the background RMS (4-16 dB);
measured on 40 training motors, a peak of 0 dB is an RMS of -18 dB (median; -25 to -13), so
the training faults are about -14 to -2 dB in this measure and the outside ones are fainter
by some 8 dB (the fault level is the one quantity whose ranges overlap).

Five machine families (:data:`FAMILIES`), each a bundle of speed band, resonances, fan and
background; the report is per family. Each station is one recording: ``enrol_s`` seconds
healthy (what ``guard enroll`` would hear), then ``score_s`` seconds scored as a new run;
half of the stations develop a fault part-way through the scored part.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.simulate import FAULTS, RATE, Bearing, Fault

__all__ = [
    "BEARINGS",
    "FAMILIES",
    "PARTITION",
    "SEED",
    "Machine",
    "Station",
    "draw_machine",
    "make_station",
    "make_stations",
]

SEED = 18_2026  # fixed: the outside set is this seed; another seed is another set
# What changes for one machine from one day to another (``make_station``'s ``day``):
DAY_SPEED = 0.01  # the set point, relative (a fixed-speed motor's slip under another load)
DAY_BACKGROUND_DB = 3.0  # the backgrounds' level over the machine's
DAY_LEVEL_DB = 1.0  # the machine's level
F64 = npt.NDArray[np.float64]
Gen = np.random.Generator
F32 = npt.NDArray[np.float32]
Bands = tuple[tuple[float, float], ...]

# parameter: (every range the training simulator may draw from, the outside set's ranges).
# The training side lists the shipped simulator's ranges and those of the randomised
# training physics (``simulate.py``'s ``"wide"`` population); the shaft speeds of the
# ``"unseen"`` population (20-27, 35-44, 52-60 Hz) are neither. A test checks that no
# interval of one side meets the other, and that the simulator draws inside its side.
PARTITION: dict[str, tuple[Bands, Bands]] = {
    "shaft_hz": (
        ((3.0, 9.0), (14.0, 20.0), (27.0, 35.0), (44.0, 52.0), (60.0, 66.0), (76.0, 90.0)),
        ((9.0, 13.5), (66.5, 76.0)),
    ),
    "line_hz": (((50.0, 50.0), (60.0, 60.0)), ((25.0, 25.0), (400.0, 400.0))),
    "bearing_res_hz": (
        ((1100.0, 1500.0), (1900.0, 6600.0)),
        ((700.0, 1100.0), (1500.0, 1900.0), (6600.0, 7000.0), (7300.0, 7800.0)),
    ),
    "damping": (((0.022, 0.13),), ((0.012, 0.022), (0.13, 0.2))),
    "fan_blades": (((3.0, 16.0),), ((17.0, 23.0),)),
    "rotor_slots": (((16.0, 45.0),), ((46.0, 58.0),)),
    "level_dbfs": (((-40.0, -13.0),), ((-52.0, -40.0), (-13.0, -11.0))),
    "beeper_hz": (((900.0, 1300.0),), ((2600.0, 3200.0),)),
    "speech_f0_hz": (((60.0, 85.0), (260.0, 380.0)), ((85.0, 260.0),)),
    "impacts_per_s": (((0.0, 0.0), (0.5, 0.5), (2.0, 2.0), (0.2, 0.7)), ((0.7, 1.6), (2.5, 4.0))),
}
# Catalogue-like geometries none of the training or unseen motors have:
# (name, rolling elements, element and pitch diameters in mm, contact angle)
BEARINGS: tuple[Bearing, ...] = (
    Bearing("6004", 9, 6.35, 30.0),
    Bearing("6302", 7, 7.94, 28.5),
    Bearing("6314", 8, 25.4, 110.0),
    Bearing("NU210", 14, 11.0, 70.0),  # cylindrical rollers
    Bearing("7208", 13, 12.7, 60.0, 40.0),
    Bearing("6020", 13, 15.08, 125.0),
)


@dataclass(frozen=True, slots=True)
class Family:
    """A kind of machine: the bands its parameters are drawn from and its background."""

    name: str
    shaft_hz: Bands
    res_hz: Bands
    backgrounds: tuple[str, ...]  # the first always; each other one half of the time
    drive: float  # share of the stations on a variable-speed drive that ramps


FAMILIES: tuple[Family, ...] = (
    Family("conveyor drive", ((9.0, 13.5),), ((700.0, 1100.0), (1500.0, 1900.0)),
           ("conveyor", "forklift"), 0.6),
    Family("screw compressor", ((66.5, 76.0),), ((6600.0, 7000.0),),
           ("compressor", "babble"), 0.2),
    Family("spindle", ((66.5, 76.0),), ((7300.0, 7800.0),), ("none", "forklift"), 0.5),
    Family("hall fan", ((9.0, 13.5),), ((1500.0, 1900.0), (6600.0, 7000.0)),
           ("babble", "conveyor"), 0.3),
    Family("pump by the break room", ((9.0, 13.5), (66.5, 76.0)),
           ((700.0, 1100.0), (7300.0, 7800.0)), ("babble", "forklift"), 0.0),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Machine:
    """One outside machine."""

    family: str
    shaft_hz: float
    ramp: float  # relative speed change over the clip (0: steady; -0.3: runs down)
    line_hz: float
    bearing: Bearing
    fan_blades: int
    rotor_slots: int
    res_hz: tuple[float, ...]
    damping: float
    level_dbfs: float
    background_db: float  # the background's RMS over the machine's
    backgrounds: tuple[str, ...]
    impacts_per_s: float
    seed: int


@dataclass(frozen=True, slots=True)
class Station:
    """A station's recording (16 kHz) and its truth. ``onset_s`` is from the start of the
    recording (None: healthy); ``fault_rms_db`` as in the module doc."""

    audio: F32
    machine: Machine
    fault: Fault | None
    onset_s: float | None
    fault_rms_db: float


def _pick(rng: np.random.Generator, bands: Bands) -> float:
    widths = np.array([hi - lo for lo, hi in bands])
    lo, hi = bands[int(rng.choice(len(bands), p=widths / widths.sum()))]
    return float(rng.uniform(lo, hi))


def draw_machine(rng: np.random.Generator, family: Family) -> Machine:
    """A random machine of ``family`` (every parameter in its outside range)."""
    part = {k: v[1] for k, v in PARTITION.items()}
    extra = tuple(b for b in family.backgrounds[1:] if rng.random() < 0.5)
    ramp = (
        float(rng.choice([-1, 1]) * rng.uniform(0.1, 0.3)) if rng.random() < family.drive else 0.0
    )
    return Machine(
        family=family.name,
        shaft_hz=_pick(rng, family.shaft_hz),
        ramp=ramp,
        line_hz=float(rng.choice([25.0, 400.0])),
        bearing=BEARINGS[int(rng.integers(len(BEARINGS)))],
        fan_blades=int(rng.integers(17, 24)),
        rotor_slots=int(rng.integers(46, 59)),
        res_hz=tuple(_pick(rng, family.res_hz) for _ in range(int(rng.integers(1, 3)))),
        damping=_pick(rng, part["damping"]),
        level_dbfs=_pick(rng, part["level_dbfs"]),
        background_db=float(rng.uniform(-8.0, 6.0)),
        backgrounds=(family.backgrounds[0], *extra),
        impacts_per_s=_pick(rng, ((0.7, 1.6), (2.5, 4.0))),
        seed=int(rng.integers(2**31)),
    )


def _unit(x: F64) -> F64:
    out: F64 = x / (np.sqrt(np.mean(np.square(x))) + 1e-12)
    return out


def _fftconv(x: F64, h: F64) -> F64:
    n = len(x) + len(h) - 1
    size = 1 << (n - 1).bit_length()
    out: F64 = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)[: len(x)]
    return out


def _band(rng: np.random.Generator, n: int, lo: float, hi: float) -> F64:
    """Gaussian noise with a flat spectrum between ``lo`` and ``hi`` Hz, unit RMS."""
    f = np.fft.rfftfreq(n, 1 / RATE)
    spec = (rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))) * (
        (f >= lo) & (f <= hi)
    )
    return _unit(np.fft.irfft(spec, n))


def _both(rng: Gen, day: Gen | None, draw: Callable[[Gen], F64]) -> F64:
    """``draw(rng)``, or on another ``day`` ``draw(day)`` after ``draw(rng)`` all the same:
    ``rng`` goes on as on day 0, so what is drawn from it next (a machine's or an
    installation's identity) is day 0's."""
    out = draw(rng)
    return out if day is None else draw(day)


def _ring(
    modes: tuple[float, ...], damping: float, seconds: float, rng: np.random.Generator
) -> F64:
    """The impulse response of a structure's modes, unit peak."""
    t = np.arange(int(seconds * RATE)) / RATE
    h = np.zeros_like(t)
    for f in modes:
        phase = rng.uniform(0, np.pi)
        h += (
            rng.uniform(0.5, 1.0)
            * np.exp(-2 * np.pi * damping * f * t)
            * np.sin(2 * np.pi * f * t + phase)
        )
    out: F64 = h / (np.max(np.abs(h)) + 1e-12)
    return out


def _speed(m: Machine, n: int, rng: np.random.Generator) -> F64:
    """Shaft frequency per sample: the drive's ramp (a smooth S between 30 % and 70 % of
    the clip) and a slow random wander."""
    u = np.arange(n) / n
    s = np.clip((u - 0.3) / 0.4, 0.0, 1.0)
    profile = 1.0 + m.ramp * (3 * s**2 - 2 * s**3)
    if m.ramp < 0:
        profile = profile - m.ramp  # runs down to the nominal speed
    walk = np.cumsum(rng.standard_normal(n // 800 + 2)) * 1.5e-3
    wander = np.interp(np.arange(n), np.arange(len(walk)) * 800, walk)
    out: F64 = m.shaft_hz * profile * (1 + wander - wander.mean())
    return out


def _machine_sound(m: Machine, fr: F64, rng: np.random.Generator, day: Gen | None = None) -> F64:
    n = len(fr)
    t = np.arange(n) / RATE
    phase = 2 * np.pi * np.cumsum(fr) / RATE  # shaft angle
    x = np.zeros(n)
    for k in range(1, 7):  # unbalance, misalignment (2x strong), looseness
        x += (
            rng.uniform(0.1, 1.0)
            * (0.7 if k == 2 else 0.5) ** k
            * np.sin(k * phase + rng.uniform(0, 6.3))
        )
    for k in range(1, 5):  # hum at twice the line
        x += rng.uniform(0.05, 0.4) * 0.6**k * np.sin(2 * np.pi * 2 * k * m.line_hz * t)
    slot = np.sin(m.rotor_slots * phase) * (1 + 0.4 * np.sin(2 * np.pi * 2 * m.line_hz * t))
    x += rng.uniform(0.05, 0.3) * slot  # slot whine with sidebands at twice the line
    blade = m.fan_blades * phase
    for k in range(1, 3):
        x += rng.uniform(0.05, 0.3) * 0.5**k * np.sin(k * blade)
    edge = rng.uniform(2500, 6000)
    air = _both(rng, day, lambda g: _band(g, n, 100, edge))  # the same air, new noise
    x += rng.uniform(0.1, 0.4) * air * (1 + 0.2 * np.sin(blade))
    return x


def _impacts(rng: np.random.Generator, n: int, rate: float) -> F64:
    """Benign impacts: a part dropped on a plate (modes ringing long), a pneumatic thump."""
    x = np.zeros(n)
    t0 = 0.0
    while True:
        t0 += float(rng.exponential(1 / rate))
        i = int(t0 * RATE)
        if i >= n:
            return x
        if rng.random() < 0.6:
            modes = tuple(float(f) for f in rng.uniform(300, 3000, int(rng.integers(2, 5))))
            h = _ring(modes, float(rng.uniform(0.002, 0.01)), 0.3, rng)
        else:
            h = _ring((float(rng.uniform(60, 250)),), 0.15, 0.08, rng)
            h[:40] += _band(rng, 40, 200, 4000) * 0.5
        seg = h[: n - i] * rng.uniform(1.0, 4.0)
        x[i : i + len(seg)] += seg


_VOWELS = ((730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480),
           (640, 1190, 2390), (490, 1350, 1690), (660, 1720, 2410))  # fmt: skip


def _babble(rng: np.random.Generator, n: int) -> F64:
    """Two to four people talking: glottal pulses at a moving pitch, shaped by vowel
    formants frame by frame, in syllables and pauses."""
    out = np.zeros(n)
    frame, hop = 512, 256
    win = np.hanning(frame)
    f = np.fft.rfftfreq(frame, 1 / RATE)
    for _ in range(int(rng.integers(2, 5))):
        f0 = rng.uniform(85, 260) * (
            1 + 0.12 * np.sin(2 * np.pi * rng.uniform(0.2, 0.7) * np.arange(n) / RATE)
        )
        pulses = np.diff(np.floor(np.cumsum(f0) / RATE), prepend=0.0)
        src = _fftconv(pulses, np.exp(-np.arange(60) / 12.0)) + 0.05 * rng.standard_normal(n)
        voice = np.zeros(n)
        syll = int(RATE / rng.uniform(3.5, 6.5))
        for start in range(0, n - frame, hop):
            k = (start // syll) * 7919 % len(_VOWELS)
            env = sum(1 / (1 + ((f - fm) / (60 + fm * 0.06)) ** 2) for fm in _VOWELS[k])
            seg = np.fft.irfft(np.fft.rfft(src[start : start + frame] * win) * env, frame)
            voice[start : start + frame] += seg
        talk = (rng.random(n // syll + 2) < 0.7).astype(float)
        gate = np.repeat(talk, syll)[:n] * np.abs(np.sin(np.pi * np.arange(n) / syll))
        out += _unit(voice * gate + 1e-9) * rng.uniform(0.5, 1.0)
    return out


def _forklift(rng: np.random.Generator, n: int) -> F64:
    """A diesel forklift passing by (firing pulses of 4 cylinders), a reversing beeper."""
    t = np.arange(n) / RATE
    rpm = rng.uniform(900, 2400) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(0.05, 0.2) * t))
    fire = np.diff(np.floor(np.cumsum(rpm / 60 * 2) / RATE), prepend=0.0)  # 4 cyl: 2 per rev
    engine = _fftconv(fire, _ring((float(rng.uniform(120, 400)),), 0.2, 0.03, rng))
    engine += 0.3 * _band(rng, n, 100, 1500) * _fftconv(fire, np.hanning(80))
    centre, width = rng.uniform(0.2, 0.8) * n / RATE, rng.uniform(2.0, 6.0)
    passing = np.exp(-0.5 * ((t - centre) / width) ** 2) + 0.1
    fb = rng.uniform(2600, 3200)
    beep = np.sign(np.sin(2 * np.pi * fb * t)) * (np.sin(2 * np.pi * rng.uniform(1.0, 2.0) * t) > 0)
    beeping = (t > centre) & (t < centre + rng.uniform(2, 6))
    out: F64 = _unit(engine) * passing + 0.4 * beep * beeping * passing
    return out


def _compressor(rng: np.random.Generator, n: int, day: Gen | None = None) -> F64:
    """A screw compressor: lobe-pass tones and a high band pulsating at the lobe rate. An
    installation: on another ``day`` the same tones, the band's noise new."""
    t = np.arange(n) / RATE
    lobe = rng.choice([4, 5, 6]) * rng.uniform(50, 100)
    x = sum(rng.uniform(0.2, 1.0) * 0.6**k * np.sin(2 * np.pi * k * lobe * t) for k in range(1, 6))
    pulse = (0.5 + 0.5 * np.sin(2 * np.pi * lobe * t)) ** 4
    amp = rng.uniform(0.2, 0.6)
    x = x + amp * _both(rng, day, lambda g: _band(g, n, 1000, 6000)) * (0.3 + pulse)
    return np.asarray(x, dtype=np.float64)


def _conveyor(rng: np.random.Generator, n: int, day: Gen | None = None) -> F64:
    """Roller rumble, a belt splice clicking over the rollers, totes rattling. An
    installation: on another ``day`` the same belt (the splice's period and ring), the
    rumble, the splice's phase and the totes new."""
    x = _both(rng, day, lambda g: _band(g, n, 30, 800))
    period = rng.uniform(0.25, 1.0)

    def clicks(g: Gen) -> F64:
        splice = np.zeros(n)
        for t0 in np.arange(g.uniform(0, period), n / RATE, period):
            splice[int(t0 * RATE)] = g.uniform(0.5, 1.0)
        return splice

    splice = _both(rng, day, clicks)
    x += 2.0 * _fftconv(splice, _ring((float(rng.uniform(400, 1500)),), 0.05, 0.05, rng))
    rattle = _both(
        rng, day, lambda g: (g.random(n) < g.uniform(5, 15) / RATE) * g.uniform(0.1, 0.5, n)
    )
    x += _fftconv(rattle, _ring((float(rng.uniform(800, 2500)),), 0.03, 0.02, rng))
    return x


_BACKGROUNDS = {"babble": _babble, "forklift": _forklift}  # people and vehicles passing by
_INSTALLED = {"compressor": _compressor, "conveyor": _conveyor}  # there every day


def _defect(m: Machine, fault: Fault, fr: F64, onset: int, rng: np.random.Generator) -> F64:
    """Impacts of a defect from sample ``onset`` on, each ringing the housing; the rate
    follows the shaft, with slip; the load zone modulates inner-race and ball impacts."""
    n = len(fr)
    x = np.zeros(n)
    ratio = m.bearing.defect_hz(fault, 1.0)
    cage = m.bearing.ftf(1.0)
    angle = 2 * np.pi * np.cumsum(fr) / RATE
    i = onset + int(rng.uniform(0, RATE / (ratio * fr[onset])))
    phase0 = rng.uniform(0, 2 * np.pi)
    k = 0
    while i < n:
        a = rng.uniform(0.8, 1.2)
        if fault == "inner":
            a *= 0.2 + 0.8 * (0.5 + 0.5 * math.cos(angle[i] + phase0)) ** 2
        elif fault == "ball":
            a *= 0.3 + 0.7 * (0.5 + 0.5 * math.cos(cage * angle[i] + phase0))
            a *= 1.0 if k % 2 else rng.uniform(0.5, 0.9)
        x[i] = a
        k += 1
        i += max(1, int(RATE / (ratio * fr[i]) * (1 + rng.normal(0, 0.015))))
    return _fftconv(x, _ring(m.res_hz, m.damping, 0.03, rng))


def _microphone(rng: np.random.Generator) -> F64:
    """A microphone a little away from the machine: the direct sound and two to four
    reflections 0.5-8 ms later."""
    h = np.zeros(int(0.009 * RATE))
    h[0] = 1.0
    for _ in range(int(rng.integers(2, 5))):
        h[int(rng.uniform(0.0005, 0.008) * RATE)] += rng.uniform(-0.6, 0.6)
    return h


def _passing(source: Callable[[Gen, int], F64], n: int, g: Gen) -> F64:
    """A passing background's ``n`` samples at its level in the mix."""
    out: F64 = _unit(source(g, n)) * g.uniform(0.6, 1.0)
    return out


def _level_on(day: np.random.Generator, level: float, change: float) -> float:
    """``level`` moved by up to ``change`` dB, kept inside the outside band it is in (so
    that another day's recording never enters the training simulator's levels)."""
    lo, hi = next(b for b in PARTITION["level_dbfs"][1] if b[0] <= level <= b[1])
    return float(np.clip(level + day.uniform(-change, change), lo, hi))


def make_station(
    m: Machine,
    seconds: float,
    fault: Fault | None,
    onset_s: float,
    fault_rms_db: float,
    day: int = 0,
) -> Station:
    """``seconds`` of machine ``m``; ``fault`` from ``onset_s`` at ``fault_rms_db``.

    ``day`` 0 is the set's recording. Another ``day`` is the same machine heard by the same
    microphone on another day: its harmonics, resonances, fan, slots, hum, air band and
    microphone path are the same, and what changes from day to day is drawn afresh from
    ``(m.seed, day)``: every noise's waveform (the air, the hiss, the installations'
    rumble), the people and vehicles passing by, the totes on a conveyor, the backgrounds'
    level (by up to :data:`DAY_BACKGROUND_DB`; a compressor's lobes and a conveyor's belt are
    the same installations every day), the benign impacts, the
    speed's wander and its set point (by up to :data:`DAY_SPEED`: the load's slip, or a
    drive set a little differently) and the machine's level (by up to :data:`DAY_LEVEL_DB`).
    The identity is drawn from the same stream as day 0's, which is why every noise of day
    0 is still drawn (and then replaced): day 0 stays the recording it always was. The
    number of those draws follows the length, so another day is the same machine only at
    the same ``seconds`` (at another length the identity drawn is another machine's)."""
    rng = np.random.default_rng(m.seed)
    alt = np.random.default_rng([m.seed, day]) if day else None
    n = int(seconds * RATE)
    fr = _speed(m, n, rng)
    if alt is not None:
        m = replace(
            m,
            shaft_hz=m.shaft_hz * (1 + alt.uniform(-DAY_SPEED, DAY_SPEED)),
            background_db=m.background_db + alt.uniform(-DAY_BACKGROUND_DB, DAY_BACKGROUND_DB),
            level_dbfs=_level_on(alt, m.level_dbfs, DAY_LEVEL_DB),
        )
        fr = _speed(m, n, alt)
    mic = _microphone(rng)
    machine = _unit(_fftconv(_machine_sound(m, fr, rng, alt), mic))
    bg = np.zeros(n)
    for kind in m.backgrounds:
        if kind in _INSTALLED:
            bg += _unit(_INSTALLED[kind](rng, n, alt)) * rng.uniform(0.6, 1.0)
        elif kind != "none":
            bg += _both(rng, alt, partial(_passing, _BACKGROUNDS[kind], n))
    bg += _both(rng, alt, lambda g: 0.05 * g.standard_normal(n))
    x = machine + _unit(bg) * 10 ** (m.background_db / 20)
    x += _both(rng, alt, lambda g: _impacts(g, n, m.impacts_per_s)) * np.sqrt(np.mean(np.square(x)))
    rms = float(np.sqrt(np.mean(np.square(x))))
    onset = int(onset_s * RATE)
    if fault is not None:
        d = _fftconv(_defect(m, fault, fr, onset, rng if alt is None else alt), mic)
        d_rms = float(np.sqrt(np.mean(np.square(d[onset:])))) + 1e-12
        x += d * rms * 10 ** (fault_rms_db / 20) / d_rms
    x *= 10 ** (m.level_dbfs / 20) / rms
    audio = np.clip(x, -1.0, 1.0).astype(np.float32)
    return Station(audio, m, fault, onset_s if fault is not None else None, fault_rms_db)


def make_stations(
    n: int, seed: int = SEED, enrol_s: float = 30.0, score_s: float = 15.0
) -> list[Station]:
    """``n`` stations, the families in turn; every other one develops a fault part-way
    through the scored part (2 s after its start at the earliest, 3 s before its end at the
    latest), at -22 to -6 dB."""
    rng = np.random.default_rng([seed, 2018])
    out = []
    for i in range(n):
        m = draw_machine(rng, FAMILIES[i % len(FAMILIES)])
        faulty = (i // len(FAMILIES)) % 2 == 1
        fault = FAULTS[int(rng.integers(3))] if faulty else None
        onset = enrol_s + float(rng.uniform(2.0, score_s - 3.0))
        level = float(rng.uniform(-22.0, -6.0))
        out.append(make_station(m, enrol_s + score_s, fault, onset, level))
    return out


def describe() -> dict[str, Any]:
    """The set's ranges, for the report."""
    return {
        "seed": SEED,
        "ranges": {k: {"training": v[0], "outside": v[1]} for k, v in PARTITION.items()},
        "bearings": [b.name for b in BEARINGS],
        "families": {f.name: {"shaft_hz": f.shaft_hz, "resonance_hz": f.res_hz,
                              "backgrounds": f.backgrounds, "variable_speed": f.drive}
                     for f in FAMILIES},
    }  # fmt: skip

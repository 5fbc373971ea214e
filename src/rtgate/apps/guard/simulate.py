"""A physically grounded simulator of an electric motor heard by a microphone.

What a clip contains (16 kHz, float32, seeded and reproducible):

- shaft harmonics ``k * fr`` (unbalance, misalignment) with a slow speed wander;
- electromagnetic hum at twice the supply frequency and its harmonics, and the rotor-slot
  whine ``R * fr``;
- a fan: blade-pass tones ``B * fr`` plus band-limited turbulence modulated at ``fr``;
- broadband (pink) and factory noise (distant tonal machines, compressed-air hiss);
- benign impacts: isolated clanks ringing at low frame resonances, with a broadband click;
- optionally a rolling-bearing fault: decaying resonance bursts at the defect frequency from
  the bearing geometry (BPFO outer race, BPFI inner race, 2*BSF ball), with slip (random
  jitter of each interval), amplitude modulation by the load zone at ``fr`` (inner race) or
  at the cage frequency (ball), starting at ``onset_s``.

Clips are drawn from two disjoint motor populations, ``"train"`` and ``"unseen"``: different
bearings, speed bands and seeds, so evaluation runs on motors training never saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import InvalidRequest

__all__ = [
    "BACKGROUNDS",
    "BEARINGS",
    "FAULTS",
    "HELD_OUT",
    "RATE",
    "WIDE_FAMILIES",
    "Bearing",
    "Clip",
    "Motor",
    "Population",
    "WideFamily",
    "draw_motor",
    "draw_wide",
    "make_clip",
    "make_set",
]

RATE = 16_000
Fault = Literal["outer", "inner", "ball"]
FAULTS: tuple[Fault, ...] = ("outer", "inner", "ball")
Population = Literal["train", "unseen", "wide"]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Bearing:
    """Rolling-bearing geometry: ball count, ball and pitch diameters (mm), contact angle."""

    name: str
    n_balls: int
    ball_mm: float
    pitch_mm: float
    contact_deg: float = 0.0

    @property
    def _r(self) -> float:
        return self.ball_mm / self.pitch_mm * math.cos(math.radians(self.contact_deg))

    def bpfo(self, fr: float) -> float:
        """Ball-pass frequency, outer race (Hz) at shaft frequency ``fr``."""
        return self.n_balls / 2 * fr * (1 - self._r)

    def bpfi(self, fr: float) -> float:
        """Ball-pass frequency, inner race."""
        return self.n_balls / 2 * fr * (1 + self._r)

    def bsf(self, fr: float) -> float:
        """Ball spin frequency (a ball defect strikes twice per spin: ``2 * bsf``)."""
        return self.pitch_mm / (2 * self.ball_mm) * fr * (1 - self._r**2)

    def ftf(self, fr: float) -> float:
        """Fundamental train (cage) frequency."""
        return fr / 2 * (1 - self._r)

    def orders(self) -> tuple[float, ...]:
        """Its defect orders (per shaft revolution), one per fault of :data:`FAULTS`, as a
        catalogue prints them: what ``guard enroll --orders`` takes."""
        return tuple(self.defect_hz(f, 1.0) for f in FAULTS)

    def defect_hz(self, fault: Fault, fr: float) -> float:
        """Impact rate of a defect of kind ``fault``."""
        if fault == "outer":
            return self.bpfo(fr)
        if fault == "inner":
            return self.bpfi(fr)
        return 2 * self.bsf(fr)


# Geometries close to common deep-groove / angular-contact catalogue bearings.
BEARINGS: dict[Population, tuple[Bearing, ...]] = {
    "train": (
        Bearing("6203", 8, 6.75, 28.5),
        Bearing("6205", 9, 7.94, 39.04),
        Bearing("6206", 9, 9.53, 46.5),
        Bearing("6208", 9, 11.9, 60.0),
        Bearing("6305", 8, 10.32, 44.5),
        Bearing("6309", 8, 17.46, 72.5),
        Bearing("7205", 13, 7.94, 38.5, 25.0),
    ),
    "unseen": (
        Bearing("6204", 8, 7.94, 33.5),
        Bearing("6207", 9, 11.11, 53.5),
        Bearing("6306", 8, 12.3, 52.5),
        Bearing("6310", 8, 19.05, 80.0),
        Bearing("7206", 14, 9.53, 46.0, 40.0),
    ),
}
# Shaft speed bands (Hz) per population: interleaved, and the training bands enclose the
# unseen ones, so an unseen speed is new but never an extrapolation.
SPEEDS: dict[Population, tuple[tuple[float, float], ...]] = {
    "train": ((14.0, 20.0), (27.0, 35.0), (44.0, 52.0), (60.0, 66.0)),
    "unseen": ((20.0, 27.0), (35.0, 44.0), (52.0, 60.0)),
}


@dataclass(frozen=True, slots=True)
class WideFamily:
    """A family of the randomised training physics: a speed band, its own bearings, the
    noises around it. Whole families are held out for validation (:data:`HELD_OUT`)."""

    name: str
    shaft_hz: tuple[float, float]
    bearings: tuple[Bearing, ...]
    backgrounds: tuple[str, ...]


# Bearings of no other population; speeds, resonances and everything else drawn inside the
# training side of ``outside.PARTITION`` (never the unseen or outside ranges).
WIDE_FAMILIES: tuple[WideFamily, ...] = (
    WideFamily("W1 3-9 Hz", (3.0, 9.0),
               (Bearing("6000", 7, 4.76, 18.0), Bearing("6211", 10, 14.29, 77.5)),
               ("conveyor", "electric forklift", "hum")),
    WideFamily("W2 14-20 Hz", (14.0, 20.0),
               (Bearing("6200", 7, 4.76, 20.0), Bearing("6308", 8, 15.08, 65.0)),
               ("talk", "fan", "hiss")),
    WideFamily("W3 27-35 Hz", (27.0, 35.0),
               (Bearing("6202", 8, 5.95, 25.0), Bearing("6209", 9, 12.7, 65.0)),
               ("reciprocating compressor", "talk", "impacts")),
    WideFamily("W4 44-52 Hz", (44.0, 52.0),
               (Bearing("6201", 7, 5.95, 22.0), Bearing("7204", 12, 7.94, 33.5, 25.0)),
               ("electric forklift", "hum", "talk")),
    WideFamily("W5 60-66 Hz", (60.0, 66.0),
               (Bearing("6304", 7, 9.53, 35.0), Bearing("6018", 16, 14.29, 115.0)),
               ("conveyor", "reciprocating compressor", "fan")),
    WideFamily("W6 76-90 Hz", (76.0, 90.0),
               (Bearing("7307", 12, 14.29, 57.5, 40.0), Bearing("NU205", 12, 7.0, 38.5)),
               ("talk", "electric forklift", "impacts")),
)  # fmt: skip
HELD_OUT: tuple[str, ...] = ("W3 27-35 Hz", "W6 76-90 Hz")  # validation only, never trained


@dataclass(frozen=True, slots=True)
class Motor:
    """One machine: speed, supply, bearing, fan, structure and microphone level."""

    shaft_hz: float
    line_hz: float
    bearing: Bearing
    fan_blades: int
    rotor_slots: int
    bearing_res_hz: tuple[float, ...]  # housing resonances a bearing impact excites
    damping: float  # damping ratio of those resonances
    level_dbfs: float  # RMS of the whole clip
    noise_db: float  # broadband + factory noise relative to the machine's own sound
    seed: int
    # the randomised ("wide") physics only; the defaults are the train / unseen motors
    family: str = ""
    ramp: float = 0.0  # relative speed change over the clip (a drive running up or down)
    backgrounds: tuple[str, ...] = ()  # extra noises (see BACKGROUNDS)
    background_db: float = 0.0  # their level relative to the machine's sound
    slot_gain: float = 0.0  # rotor-slot whine amplitude (0: the population's own draw)

    @property
    def rpm(self) -> float:
        return self.shaft_hz * 60


@dataclass(frozen=True, slots=True)
class Clip:
    """A simulated recording and its ground truth."""

    audio: F32
    motor: Motor
    fault: Fault | None = None
    onset_s: float | None = None  # when the fault starts (None: no fault)
    severity_db: float = 0.0  # fault impact peak over the background RMS
    impacts_s: tuple[float, ...] = field(default_factory=tuple)  # benign impacts
    hiss_s: tuple[float, float] | None = None  # compressed-air hiss on (start, end)
    # the defect's RMS over the RMS of everything else, from the onset on (outside.py's
    # measure of a fault's level; None: no fault)
    fault_rms_db: float | None = None

    def labels(self, hop: int = 320) -> npt.NDArray[np.int8]:
        """Per-window labels: 1 when at least half of the window has the fault."""
        n = len(self.audio) // hop
        if self.onset_s is None:
            return np.zeros(n, dtype=np.int8)
        mid = (np.arange(n) + 0.5) * hop / RATE
        return (mid >= self.onset_s).astype(np.int8)


def draw_motor(rng: np.random.Generator, population: Population = "train") -> Motor:
    """A random motor from ``population``."""
    if population == "wide":
        return draw_wide(rng)
    if population not in SPEEDS:
        raise InvalidRequest(f"population must be 'train', 'unseen' or 'wide', got {population!r}")
    bands = SPEEDS[population]
    lo, hi = bands[int(rng.integers(len(bands)))]
    base = BEARINGS[population][int(rng.integers(len(BEARINGS[population])))]
    scale = float(rng.uniform(0.97, 1.03))  # manufacturing spread of the geometry
    bearing = replace(base, ball_mm=base.ball_mm * scale)
    n_res = int(rng.integers(1, 3))
    return Motor(
        shaft_hz=float(rng.uniform(lo, hi)),
        line_hz=float(rng.choice([50.0, 60.0])),
        bearing=bearing,
        fan_blades=int(rng.integers(5, 13)),
        rotor_slots=int(rng.integers(22, 46)),
        bearing_res_hz=tuple(float(f) for f in rng.uniform(2000, 6500, n_res)),
        damping=float(rng.uniform(0.03, 0.1)),
        level_dbfs=float(rng.uniform(-38, -14)),
        noise_db=float(rng.uniform(-12, 3)),
        seed=int(rng.integers(2**31)),
    )


def _either(rng: np.random.Generator, *bands: tuple[float, float]) -> float:
    widths = np.array([hi - lo for lo, hi in bands])
    lo, hi = bands[int(rng.choice(len(bands), p=widths / widths.sum()))]
    return float(rng.uniform(lo, hi))


def draw_wide(rng: np.random.Generator, families: tuple[str, ...] | None = None) -> Motor:
    """A motor of the randomised training physics, from one of ``families`` (default:
    every family but the held-out ones)."""
    names = families or tuple(f.name for f in WIDE_FAMILIES if f.name not in HELD_OUT)
    pool = [f for f in WIDE_FAMILIES if f.name in names]
    if not pool:
        raise InvalidRequest(f"no such family: {names}")
    fam = pool[int(rng.integers(len(pool)))]
    lo, hi = fam.shaft_hz
    start, end = (float(v) for v in rng.uniform(lo, hi, 2))
    drive = rng.random() < 0.4  # a variable-speed drive running up or down in the clip
    base = fam.bearings[int(rng.integers(len(fam.bearings)))]
    bearing = replace(base, ball_mm=base.ball_mm * float(rng.uniform(0.97, 1.03)))
    n_bg = int(rng.integers(0, 3))
    bgs = tuple(str(b) for b in rng.choice(fam.backgrounds, n_bg, replace=False))
    n_res = int(rng.integers(1, 4))
    return Motor(
        shaft_hz=start,
        line_hz=float(rng.choice([50.0, 60.0])),
        bearing=bearing,
        fan_blades=int(rng.integers(3, 17)),
        rotor_slots=int(rng.integers(16, 46)),
        bearing_res_hz=tuple(_either(rng, (1100, 1500), (1900, 6600)) for _ in range(n_res)),
        damping=float(rng.uniform(0.022, 0.13)),
        level_dbfs=float(rng.uniform(-40, -13)),
        noise_db=float(rng.uniform(-14, 5)),
        seed=int(rng.integers(2**31)),
        family=fam.name,
        ramp=end / start - 1.0 if drive else 0.0,
        backgrounds=bgs,
        background_db=float(rng.uniform(-12, 4)),
        slot_gain=float(rng.uniform(0.02, 0.5)),
    )


def _tone(t: F64, f_hz: float, wander: F64, phase: float) -> F64:
    """A tone whose frequency follows the relative speed wander ``1 + wander``."""
    inst = f_hz * (1.0 + wander)
    out: F64 = np.sin(2 * np.pi * np.cumsum(inst) / RATE + phase)
    return out


def _shaped_noise(rng: np.random.Generator, n: int, lo: float, hi: float, slope: float) -> F64:
    """Noise with power ~ f**slope between ``lo`` and ``hi`` Hz, unit RMS."""
    spec = rng.standard_normal(n // 2 + 1) + 1j * rng.standard_normal(n // 2 + 1)
    f = np.fft.rfftfreq(n, 1 / RATE)
    gain = np.where((f >= lo) & (f <= hi), np.maximum(f, 1.0) ** (slope / 2), 0.0)
    x = np.fft.irfft(spec * gain, n)
    return x / (np.std(x) + 1e-12)


def _burst(f_res: tuple[float, ...], damping: float, n: int, rng: np.random.Generator) -> F64:
    """Impulse response of a few lightly damped resonances (sum of decaying sines)."""
    t = np.arange(n) / RATE
    h: F64 = np.zeros(n)
    for f in f_res:
        h += (
            rng.uniform(0.6, 1.0) * np.exp(-2 * np.pi * damping * f * t) * np.sin(2 * np.pi * f * t)
        )
    h /= np.max(np.abs(h)) + 1e-12
    return h


def _machine(m: Motor, rng: np.random.Generator, t: F64, wander: F64) -> F64:
    fr = m.shaft_hz
    x = np.zeros_like(t)
    for k in range(1, 9):  # shaft harmonics, falling off
        x += rng.uniform(0.2, 1.0) * 0.6**k * _tone(t, k * fr, wander, rng.uniform(0, 6.3))
    for k in range(1, 6):  # magnetostriction hum at 2x supply (not speed-locked)
        x += rng.uniform(0.05, 0.5) * 0.5**k * np.sin(2 * np.pi * 2 * k * m.line_hz * t)
    slot = rng.uniform(0.02, 0.15) * _tone(t, m.rotor_slots * fr, wander, rng.uniform(0, 6.3))
    if m.slot_gain:  # the wide physics: louder whine, with sidebands at twice the line
        slot *= m.slot_gain / 0.15 * (1 + 0.3 * np.sin(2 * np.pi * 2 * m.line_hz * t))
    x += slot
    for k in range(1, 4):  # fan blade pass
        x += rng.uniform(0.05, 0.4) * 0.5**k * _tone(t, k * m.fan_blades * fr, wander, 0.0)
    turb = _shaped_noise(rng, len(t), 200, rng.uniform(1500, 4000), -1.0)
    x += rng.uniform(0.05, 0.3) * turb * (1 + 0.3 * np.sin(2 * np.pi * fr * t))
    return x


def _factory(rng: np.random.Generator, t: F64) -> tuple[F64, tuple[float, float] | None]:
    n = len(t)
    hiss = None
    x = _shaped_noise(rng, n, 20, 8000, -1.0)  # pink
    x += 0.1 * rng.standard_normal(n)  # sensor floor
    for _ in range(int(rng.integers(0, 5))):  # distant machines, slowly modulated
        f = rng.uniform(80, 4000)
        am = 1 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.1, 2) * t + rng.uniform(0, 6.3))
        x += rng.uniform(0.05, 0.6) * am * np.sin(2 * np.pi * f * t)
    if rng.random() < 0.4:  # compressed-air hiss switching on and off
        gate = np.zeros(n)
        start = int(rng.integers(0, n))
        stop = start + int(rng.uniform(0.2, 2.0) * RATE)
        gate[start:stop] = 1.0
        hiss = (start / RATE, min(stop, n) / RATE)
        gate = np.convolve(gate, np.hanning(801) / 400, mode="same")
        x += rng.uniform(0.3, 1.5) * gate * _shaped_noise(rng, n, 3000, 8000, 0.0)
    return x, hiss


def _benign_impacts(rng: np.random.Generator, n: int, rate_hz: float) -> tuple[F64, list[float]]:
    x = np.zeros(n)
    times: list[float] = []
    for t0 in np.cumsum(rng.exponential(1 / rate_hz, 64)) if rate_hz > 0 else []:
        i = int(t0 * RATE)
        if i >= n:
            break
        frame = tuple(float(f) for f in rng.uniform(150, 2200, int(rng.integers(1, 4))))
        h = _burst(frame, float(rng.uniform(0.005, 0.03)), int(0.12 * RATE), rng)
        h[:8] += rng.standard_normal(8) * 0.8  # the click of the contact
        seg = h[: n - i] * rng.uniform(1.0, 6.0)
        x[i : i + len(seg)] += seg
        times.append(float(t0))
    return x, times


def _fault(m: Motor, fault: Fault, rng: np.random.Generator, t: F64, onset_s: float) -> F64:
    """Bearing-defect impacts from ``onset_s`` on, unit peak, with slip and modulation."""
    n = len(t)
    fr = m.shaft_hz
    rate = m.bearing.defect_hz(fault, fr)
    slip = rng.uniform(0.005, 0.02)
    top = rate * (1 + max(m.ramp, 0.0))  # the fastest the impacts come
    periods = (1 / rate) * (1 + slip * rng.standard_normal(int(t[-1] * top) + 8))
    times = onset_s + np.concatenate([[rng.uniform(0, 1 / rate)], periods]).cumsum()
    if m.ramp:  # evenly spaced in shaft turns, not in time: follow the drive's speed
        clock = np.cumsum(_profile(m.ramp, n)) / RATE  # turns / nominal rate, per sample
        times = np.interp(np.interp(onset_s, t, clock) + (times - onset_s), clock, t)
    times = times[times < t[-1]]
    amp = rng.uniform(0.85, 1.15, len(times))
    if fault == "inner":  # the defect enters the load zone once per shaft turn
        phase = rng.uniform(0, 2 * np.pi)
        amp *= (0.5 + 0.5 * np.cos(2 * np.pi * fr * times + phase)) ** rng.uniform(1, 2.5)
        amp = 0.15 + 0.85 * amp
    elif fault == "ball":  # the ball rides with the cage through the load zone
        cage = m.bearing.ftf(fr)
        amp *= 0.35 + 0.65 * (0.5 + 0.5 * np.cos(2 * np.pi * cage * times))
        amp[1::2] *= rng.uniform(0.4, 0.8)  # alternately hits the inner and outer race
    train = np.zeros(n)
    np.add.at(train, (times * RATE).astype(np.int64), amp)
    h = _burst(m.bearing_res_hz, m.damping, int(0.02 * RATE), rng)
    return np.convolve(train, h)[:n]


def _profile(ramp: float, n: int) -> F64:
    """Relative shaft speed per sample of a drive changing speed by ``ramp`` (smoothly,
    between 20 % and 80 % of the clip)."""
    u = np.clip((np.arange(n) / max(n, 1) - 0.2) / 0.6, 0.0, 1.0)
    out: F64 = 1.0 + ramp * (3 * u**2 - 2 * u**3)
    return out


def _unit(x: F64) -> F64:
    out: F64 = x / (np.std(x) + 1e-12)
    return out


def _talk(rng: np.random.Generator, t: F64) -> F64:
    """People talking nearby: a buzz (sawtooth at a voice pitch) exciting voice-band noise,
    in syllables and pauses."""
    n = len(t)
    x = np.zeros(n)
    for _ in range(int(rng.integers(1, 5))):
        f0 = _either(rng, (60.0, 85.0), (260.0, 380.0))
        f0t = f0 * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.3, 1.0) * t + rng.uniform(0, 6)))
        saw = (np.cumsum(f0t) / RATE) % 1.0
        voiced = _shaped_noise(rng, n, 300, rng.uniform(2500, 4000), -1.0) * (0.3 + saw**3)
        syll = int(RATE / rng.uniform(3.0, 7.0))
        on = np.repeat(rng.random(n // syll + 2) < 0.65, syll)[:n]
        x += _unit(voiced * on * np.abs(np.sin(np.pi * np.arange(n) / syll)) + 1e-9)
    return x


def _reciprocating(rng: np.random.Generator, t: F64) -> F64:
    """A piston compressor: a knock per crank turn ringing a low structure, valve clatter."""
    n = len(t)
    crank = rng.uniform(8.0, 25.0)
    train = np.zeros(n)
    train[(np.arange(0, t[-1], 1 / crank) * RATE).astype(np.int64)] = 1.0
    knock = np.convolve(train, _burst((float(rng.uniform(300, 2500)),), 0.04, 1600, rng))[:n]
    valves = np.roll(train, int(RATE / crank / 2)) * rng.uniform(0.2, 0.6)
    clatter = np.convolve(valves, _burst((float(rng.uniform(2000, 6000)),), 0.08, 160, rng))[:n]
    return knock + clatter + 0.2 * _shaped_noise(rng, n, 50, 2000, -1.0)


def _electric_forklift(rng: np.random.Generator, t: F64) -> F64:
    """An electric forklift: drive-motor whine sweeping as it speeds up, tyres, a beeper."""
    f = rng.uniform(800, 1500) * (
        1 + 0.8 * (0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.05, 0.3) * t))
    )
    whine = np.sin(2 * np.pi * np.cumsum(f) / RATE)
    beep_on = np.sin(2 * np.pi * rng.uniform(1.0, 2.5) * t) > 0.2
    beep = np.sin(2 * np.pi * rng.uniform(900, 1300) * t) * beep_on * (rng.random() < 0.6)
    out: F64 = 0.5 * whine + _shaped_noise(rng, len(t), 30, 600, -1.0) + beep
    return out


def _conveyor(rng: np.random.Generator, t: F64) -> F64:
    """A belt conveyor: rumble, an idler roller squealing at a wandering pitch."""
    f = rng.uniform(1000, 5000) * (1 + 0.02 * np.sin(2 * np.pi * rng.uniform(0.1, 1.0) * t))
    squeal = np.sin(2 * np.pi * np.cumsum(f) / RATE) * rng.uniform(0.1, 0.6)
    return _shaped_noise(rng, len(t), 20, 1000, -1.5) + squeal


def _fan(rng: np.random.Generator, t: F64) -> F64:
    """Another machine's fan: blade pass tones and turbulence."""
    bp = rng.uniform(60, 600)
    tones = sum(0.5**k * np.sin(2 * np.pi * k * bp * t + rng.uniform(0, 6)) for k in range(1, 4))
    return np.asarray(tones, np.float64) + _shaped_noise(rng, len(t), 100, 6000, -0.5)


def _hum(rng: np.random.Generator, t: F64) -> F64:
    """A transformer's hum: twice the line and its harmonics."""
    line = rng.choice([50.0, 60.0])
    hum = sum(rng.uniform(0.2, 1.0) * np.sin(2 * np.pi * 2 * k * line * t) for k in range(1, 8))
    return np.asarray(hum, np.float64)


def _hiss(rng: np.random.Generator, t: F64) -> F64:
    """A leaking air line: steady high hiss."""
    return _shaped_noise(rng, len(t), rng.uniform(1500, 4000), 8000, rng.uniform(-1.0, 1.0))


def _more_impacts(rng: np.random.Generator, t: F64) -> F64:
    """Handling noise: knocks at a varying rate."""
    x, _ = _benign_impacts(rng, len(t), float(rng.uniform(0.2, 0.7)))
    return x


BACKGROUNDS = {
    "talk": _talk,
    "reciprocating compressor": _reciprocating,
    "electric forklift": _electric_forklift,
    "conveyor": _conveyor,
    "fan": _fan,
    "hum": _hum,
    "hiss": _hiss,
    "impacts": _more_impacts,
}


def make_clip(
    motor: Motor,
    seconds: float = 4.0,
    *,
    fault: Fault | None = None,
    onset_s: float = 0.0,
    severity_db: float = 6.0,
    impact_rate_hz: float = 0.5,
    seed: int | None = None,
) -> Clip:
    """Simulate ``seconds`` of ``motor``; a ``fault`` starts at ``onset_s`` if given.

    ``severity_db`` sets the peak of a defect impact over the RMS of everything else.
    Raises :class:`InvalidRequest` on an unknown fault or an onset outside the clip.
    """
    if fault is not None and fault not in FAULTS:
        raise InvalidRequest(f"fault must be one of {FAULTS}, got {fault!r}")
    if not 0 < seconds <= 600:
        raise InvalidRequest(f"seconds must be in (0, 600], got {seconds}")
    if fault is not None and not 0 <= onset_s < seconds:
        raise InvalidRequest(f"onset_s {onset_s} outside the clip of {seconds} s")
    rng = np.random.default_rng(motor.seed if seed is None else seed)
    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    wander = np.cumsum(rng.standard_normal(n)) * 2e-5
    wander = np.clip(wander - wander.mean(), -0.01, 0.01)
    if motor.ramp:
        wander = (1 + wander) * _profile(motor.ramp, n) - 1
    machine = _machine(motor, rng, t, wander)
    machine /= np.std(machine) + 1e-12
    noise, hiss = _factory(rng, t)
    noise *= 10 ** (motor.noise_db / 20) / (np.std(noise) + 1e-12)
    bg = machine + noise
    if motor.backgrounds:  # their own generator: the clip's other draws stay as they were
        extra_rng = np.random.default_rng([motor.seed if seed is None else seed, 7])
        extra = sum(_unit(BACKGROUNDS[b](extra_rng, t)) for b in motor.backgrounds)
        bg = bg + _unit(np.asarray(extra, np.float64)) * 10 ** (motor.background_db / 20)
    impacts, times = _benign_impacts(rng, n, impact_rate_hz)
    bg_rms = float(np.std(bg))
    x = bg + impacts * bg_rms
    fault_rms_db = None
    if fault is not None:
        defect = _fault(motor, fault, rng, t, onset_s) * bg_rms * 10 ** (severity_db / 20)
        a = int(onset_s * RATE)
        power = float(np.mean(np.square(defect[a:]))) / max(float(np.mean(np.square(x[a:]))), 1e-30)
        fault_rms_db = round(10 * math.log10(max(power, 1e-24)), 2)
        x += defect
    x *= 10 ** (motor.level_dbfs / 20) / bg_rms
    audio = np.clip(x, -1.0, 1.0).astype(np.float32)
    return Clip(
        audio,
        motor,
        fault,
        onset_s if fault is not None else None,
        severity_db if fault is not None else 0.0,
        tuple(times),
        hiss,
        fault_rms_db,
    )


def make_set(
    n_clips: int,
    population: Population = "train",
    *,
    seed: int = 0,
    seconds: float = 4.0,
    fault_share: float = 0.5,
    severity_db: tuple[float, float] = (4.0, 16.0),
    families: tuple[str, ...] | None = None,
) -> list[Clip]:
    """``n_clips`` clips of random motors; about ``fault_share`` of them develop a fault.

    A faulty clip starts healthy and the fault begins somewhere inside it (a quarter of them
    are faulty from the first sample). ``families``: of the ``"wide"`` population (default:
    all but :data:`HELD_OUT`).
    """
    rng = np.random.default_rng([seed, {"train": 0, "unseen": 1, "wide": 2}.get(population, 3)])
    clips = []
    for _ in range(n_clips):
        motor = draw_wide(rng, families) if population == "wide" else draw_motor(rng, population)
        fault: Fault | None = None
        onset = 0.0
        if rng.random() < fault_share:
            fault = FAULTS[int(rng.integers(3))]
            onset = 0.0 if rng.random() < 0.25 else float(rng.uniform(0.3, seconds - 0.5))
        clips.append(
            make_clip(
                motor,
                seconds,
                fault=fault,
                onset_s=onset,
                severity_db=float(rng.uniform(*severity_db)),
                impact_rate_hz=float(rng.choice([0.0, 0.5, 2.0])),
            )
        )
    return clips

"""Generic nuisances: sounds that are periodic, tonal or impulsive and are not a bearing fault.

A detector that has only heard motors learns that anything periodic and impulsive in the
high bands is a defect; on a machine unlike its training (a voice nearby, a compressor's
pulsating band, a whine in the envelope bands) it is then as sure as on a fault. These
generators make hard negatives for training out of four generic shapes, with every
parameter drawn wide and at random (none imitates a particular machine or background, and
nothing here comes from ``outside.py``, whose set must stay unseen):

- ``pulse_train``: pulses (a click or a short noise burst) at one rate of 15-700 Hz with
  jitter, through 1-3 random resonances of 0.3-7.8 kHz, switched on and off in stretches of
  0.05-1.5 s;
- ``tonal_series``: a harmonic series (fundamental 40-1,600 Hz, 2-24 partials of random
  weight, cut to a random band) with a slowly wandering pitch;
- ``modulated_band``: a band of noise (random edges) whose amplitude is modulated at
  2-700 Hz, sine or pulse-shaped, 30-100 % deep;
- ``drops``: isolated hits (0.2-4 per second) ringing 1-3 random modes for 5-400 ms.

``add_nuisances(clip, rng)`` mixes 1-2 of them into a simulated clip at -14..0 dB against
the clip's own RMS (healthy or faulty: a fault must still be heard under them) and says
where they sound, so training can weigh those healthy windows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.simulate import RATE, Clip

__all__ = ["KINDS", "add_nuisances", "drops", "modulated_band", "pulse_train", "tonal_series"]

F64 = npt.NDArray[np.float64]


def _norm(x: F64) -> F64:
    out: F64 = x / (np.sqrt(np.mean(np.square(x))) + 1e-12)
    return out


def _resonator(rng: np.random.Generator, n_modes: int, length: int) -> F64:
    """An impulse response: ``n_modes`` decaying sines at random frequencies and dampings."""
    t = np.arange(length) / RATE
    h = np.zeros(length)
    for _ in range(n_modes):
        f = float(np.exp(rng.uniform(np.log(300.0), np.log(7800.0))))
        tau = float(np.exp(rng.uniform(np.log(0.0004), np.log(0.02))))
        amp = rng.uniform(0.3, 1.0)
        h += amp * np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) * np.exp(-t / tau)
    return h


def _gate(rng: np.random.Generator, n: int) -> F64:
    """On/off stretches of 0.05-1.5 s (on about 60 % of the time), with soft edges."""
    g = np.zeros(n)
    i = 0
    while i < n:
        length = int(rng.uniform(0.05, 1.5) * RATE)
        g[i : i + length] = float(rng.random() < 0.6)
        i += length
    ramp = np.hanning(161)
    return np.convolve(g, ramp / ramp.sum(), mode="same")


def _conv(x: F64, h: F64) -> F64:
    n = len(x) + len(h) - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)[: len(x)]


def pulse_train(rng: np.random.Generator, n: int) -> F64:
    """Pulses at one jittered rate through random resonances, in stretches."""
    rate = float(np.exp(rng.uniform(np.log(15.0), np.log(700.0))))
    jitter = rng.uniform(0.0, 0.08)
    periods = RATE / rate * (1 + jitter * rng.standard_normal(int(n * rate / RATE) + 2))
    at = np.cumsum(np.clip(periods, 2, None)).astype(np.int64)
    x = np.zeros(n)
    at = at[at < n]
    if rng.random() < 0.5:
        x[at] = 1.0
    else:  # a short noise burst per pulse
        width = int(rng.integers(4, 40))
        for a in at:
            x[a : a + width] += rng.standard_normal(len(x[a : a + width]))
    x *= 1 + 0.3 * rng.standard_normal(n) * (rng.random() < 0.3)
    return _conv(x, _resonator(rng, int(rng.integers(1, 4)), 1600)) * _gate(rng, n)


def tonal_series(rng: np.random.Generator, n: int) -> F64:
    """A harmonic series with a wandering pitch, cut to a random band."""
    t = np.arange(n) / RATE
    f0 = float(np.exp(rng.uniform(np.log(40.0), np.log(1600.0))))
    wander = 1 + rng.uniform(0.0, 0.05) * np.sin(2 * np.pi * rng.uniform(0.05, 2.0) * t + 1.0)
    phase = 2 * np.pi * np.cumsum(f0 * wander) / RATE
    lo = float(rng.uniform(0.0, 6000.0))
    x = np.zeros(n)
    for k in range(1, int(rng.integers(2, 25)) + 1):
        if lo <= k * f0 < RATE / 2 - 200:
            x += rng.uniform(0.1, 1.0) * np.sin(k * phase + rng.uniform(0, 6))
    if not x.any():
        x = np.sin(phase)
    return x * (_gate(rng, n) if rng.random() < 0.5 else 1.0)


def modulated_band(rng: np.random.Generator, n: int) -> F64:
    """Band noise, amplitude-modulated at 2-700 Hz."""
    lo = float(rng.uniform(200.0, 6500.0))
    hi = min(lo + float(rng.uniform(300.0, 4000.0)), RATE / 2 - 100)
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / RATE)
    spec[(f < lo) | (f > hi)] = 0
    band = np.fft.irfft(spec, n)
    rate = float(np.exp(rng.uniform(np.log(2.0), np.log(700.0))))
    depth = rng.uniform(0.3, 1.0)
    inst = rate * (1 + 0.02 * rng.standard_normal(n))
    wave = 0.5 + 0.5 * np.sin(2 * np.pi * np.cumsum(inst) / RATE)
    if rng.random() < 0.5:
        wave = wave ** float(rng.uniform(2.0, 12.0))  # pulse-shaped
    return band * (1 - depth + depth * wave)


def drops(rng: np.random.Generator, n: int) -> F64:
    """Isolated hits ringing a few modes for 5-400 ms (a Poisson count: a short stretch may
    have none)."""
    x = np.zeros(n)
    count = rng.poisson(rng.uniform(0.2, 4.0) * n / RATE)
    for a in rng.integers(0, n, count):
        ring = int(rng.uniform(0.005, 0.4) * RATE)
        h = _resonator(rng, int(rng.integers(1, 4)), ring) * np.exp(-np.arange(ring) / ring * 3)
        m = min(ring, n - a)
        x[a : a + m] += rng.uniform(0.3, 1.0) * h[:m]
    return x


KINDS: dict[str, Callable[[np.random.Generator, int], F64]] = {
    "pulse train": pulse_train,
    "tonal series": tonal_series,
    "modulated band": modulated_band,
    "drops": drops,
}


def add_nuisances(clip: Clip, rng: np.random.Generator) -> tuple[Clip, list[str]]:
    """``clip`` with 1-2 nuisances mixed in at -14..0 dB against its RMS; their kinds."""
    x = clip.audio.astype(np.float64)
    n = len(x)
    rms = float(np.sqrt(np.mean(np.square(x)))) + 1e-9
    kinds = list(rng.choice(list(KINDS), size=int(rng.integers(1, 3)), replace=False))
    for kind in kinds:
        x = x + _norm(KINDS[kind](rng, n)) * rms * 10 ** (rng.uniform(-14.0, 0.0) / 20)
    audio = np.clip(x, -1.0, 1.0).astype(np.float32)
    return replace(clip, audio=audio), kinds

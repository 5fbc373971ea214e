"""A small per-station model, fitted at enrolment on the station's own healthy audio.

The enrolment recording is the station running healthy. Bearing faults are added to it
(``simulate.py``'s defect physics, every parameter drawn wide, since the station's geometry
is unknown: shaft 4-90 Hz, any catalogue geometry, 1-3 resonances of 0.8-7.9 kHz, damping
0.01-0.18, the defect's RMS at -24..-4 dB of the recording's) for the positives, and benign
nuisances (knocks, speech, a forklift, hiss, hum, a fan, tonal series, modulated bands) for
hard negatives, beside the plain healthy windows. The model is a logistic regression on the
features ``features.py`` computes per 20 ms window, standardised by the station's own mean
and spread (``z``), and their average over ~5 windows (``m``, the same average the
enrolment's novelty uses): ``2 * N_FEATURES`` inputs, one dot product per window and station.

Its bar (``threshold``, in logit) is set on the last ``HOLD_BACK`` of the recording, which
the fit never sees: the highest logit there plus ``MARGIN``. A window over the bar is a hit
for the rules (``baseline.Baselines``, with the novelty and rhythm hits), so a station stops
when ``k`` of the last ``n`` windows are hits of the detector or of its own model.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import HOP, N_FEATURES, RATE, WindowFeatures
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = [
    "ALPHA",
    "HOLD_BACK",
    "MARGIN",
    "N_INPUTS",
    "StationModel",
    "fit_station_model",
    "model_inputs",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
ALPHA = 0.2  # the inputs' average: as baseline.ALPHA
N_INPUTS = 2 * N_FEATURES
Z_CLIP = 30.0  # a standardised feature is clipped to +-this
HOLD_BACK = 0.2  # the last share of the recording: the bar, never the fit
MARGIN = 6.0  # logit over the held-back windows' highest (chosen on validation)
PIECE_S = 2.0  # each piece of the recording gets its own fault or nuisance
L2 = 1.0  # ridge on the weights (per window of data: L2 / n)
LOGIT_BOUND = 60.0


def _fault_piece(rng: np.random.Generator, n: int) -> F64:
    """One defect, unit RMS, of a random geometry, speed and resonance."""
    from rtgate.apps.guard.simulate import BEARINGS, FAULTS, WIDE_FAMILIES, Motor, _fault

    wide = (b for f in WIDE_FAMILIES for b in f.bearings)
    bearings = (*BEARINGS["train"], *BEARINGS["unseen"], *wide)
    n_res = int(rng.integers(1, 4))
    res = tuple(float(np.exp(rng.uniform(np.log(800), np.log(7900)))) for _ in range(n_res))
    motor = Motor(
        shaft_hz=float(np.exp(rng.uniform(np.log(4.0), np.log(90.0)))),
        line_hz=50.0,
        bearing=bearings[int(rng.integers(len(bearings)))],
        fan_blades=8,
        rotor_slots=30,
        bearing_res_hz=res,
        damping=float(np.exp(rng.uniform(np.log(0.01), np.log(0.18)))),
        level_dbfs=-30.0,
        noise_db=0.0,
        seed=0,
    )
    t = np.arange(n) / RATE
    x = _fault(motor, FAULTS[int(rng.integers(3))], rng, t, 0.0)
    return x / (np.std(x) + 1e-12)


def _nuisance_piece(rng: np.random.Generator, n: int) -> F64:
    """One benign sound, unit RMS: speech, a forklift, hiss, hum, a fan, knocks, drops, a
    tonal series or a modulated band (no pulse train: to the envelope, that is a defect)."""
    from rtgate.apps.guard.generic import drops, modulated_band, tonal_series
    from rtgate.apps.guard.simulate import (
        _electric_forklift,
        _fan,
        _hiss,
        _hum,
        _more_impacts,
        _talk,
    )

    kinds: tuple[Callable[[np.random.Generator, F64], F64], ...] = (
        _talk,
        _electric_forklift,
        _hiss,
        _hum,
        _fan,
        _more_impacts,
        lambda r, t: drops(r, len(t)),
        lambda r, t: tonal_series(r, len(t)),
        lambda r, t: modulated_band(r, len(t)),
    )
    t = np.arange(n) / RATE
    x = kinds[int(rng.integers(len(kinds)))](rng, t)
    return np.asarray(x, np.float64) / (np.std(x) + 1e-12)


def _mixed(
    audio: F32,
    rng: np.random.Generator,
    make: Callable[[np.random.Generator, int], F64],
    db: tuple[float, float],
) -> F32:
    """``audio`` with a piece of ``make`` added every ``PIECE_S``, each at a level drawn
    from ``db`` against the recording's RMS."""
    x = audio.astype(np.float64)
    rms = float(np.sqrt(np.mean(np.square(x)))) + 1e-9
    step = int(PIECE_S * RATE)
    out = x.copy()
    for a in range(0, len(x), step):
        b = min(a + step, len(x))
        out[a:b] += make(rng, b - a) * rms * 10 ** (rng.uniform(*db) / 20)
    return np.clip(out, -1.0, 1.0).astype(np.float32)


def model_inputs(features: F32, mean: F32, sd: F32) -> F32:
    """``(T, N_FEATURES)`` features of one run -> ``(T, N_INPUTS)``: ``z`` and its average
    ``m`` (from 0 at the run's start), each clipped to ``+-Z_CLIP``, as
    :class:`~rtgate.apps.guard.baseline.Baselines` computes them (the same float32 steps)."""
    z = ((features - mean) * (np.float32(1.0) / sd)).astype(np.float32)
    m = np.zeros_like(z)
    acc = np.zeros(z.shape[1], np.float32)
    for t in range(len(z)):
        acc += np.float32(ALPHA) * (z[t] - acc)
        m[t] = acc
    out: F32 = np.clip(np.concatenate([z, m], axis=1), -Z_CLIP, Z_CLIP)
    return out


def _logistic(x: F64, y: F64, weight: F64, l2: float, iters: int = 25) -> tuple[F64, float]:
    """Weighted L2 logistic regression by Newton's method (a few seconds at most)."""
    n, d = x.shape
    xa = np.concatenate([x, np.ones((n, 1))], axis=1)
    w = np.zeros(d + 1)
    reg = np.full(d + 1, l2)
    reg[-1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(xa @ w, -30, 30)))
        g = xa.T @ (weight * (p - y)) + reg * w
        h = (xa * (weight * p * (1 - p))[:, None]).T @ xa + np.diag(reg + 1e-9)
        step = np.linalg.solve(h, g)
        w -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return w[:-1], float(w[-1])


@dataclass(frozen=True)
class StationModel:
    """A station's own fault model: ``logit = inputs . weights + bias``; a hit at
    ``logit >= threshold``. ``info``: how it was fitted (windows, the bar's data)."""

    weights: F32
    bias: float
    threshold: float
    info: Mapping[str, Any]

    def __post_init__(self) -> None:
        w = np.asarray(self.weights)
        if w.shape != (N_INPUTS,) or not np.isfinite(w).all():
            raise ConfigError(f"station model: weights must be {N_INPUTS} finite numbers")
        for name in ("bias", "threshold"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and abs(v) <= 1e6):
                raise ConfigError(f"station model: {name} must be a finite number")

    def logits(self, inputs: F32) -> F32:
        """The model's logit of each row of ``inputs`` (:func:`model_inputs`)."""
        w = self.weights.astype(np.float64)
        out: F32 = (inputs.astype(np.float64) @ w + self.bias).astype(np.float32)
        return out

    @property
    def digest(self) -> str:
        """sha256 of the numbers that decide (weights, bias, threshold)."""
        h = hashlib.sha256(np.asarray(self.weights, "<f4").tobytes())
        h.update(f"{self.bias!r},{self.threshold!r}".encode())
        return h.hexdigest()

    def record(self) -> dict[str, Any]:
        """What the enrolment file keeps (``sha256``: :attr:`digest`, checked on load)."""
        return {
            "weights": [float(x) for x in self.weights],
            "bias": self.bias,
            "threshold": self.threshold,
            "sha256": self.digest,
            "info": dict(self.info),
        }

    @classmethod
    def from_record(cls, data: Any, where: str) -> StationModel:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the station model must be an object")
        try:
            w = np.asarray(data["weights"], np.float64)
            if w.shape != (N_INPUTS,):
                raise ConfigError(f"{where}: the station model needs {N_INPUTS} weights")
            own = cls(
                w.astype(np.float32),
                float(data["bias"]),
                float(data["threshold"]),
                dict(data.get("info") or {}),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{where}: bad station model ({e})") from None
        if data.get("sha256") != own.digest:
            raise ConfigError(
                f"{where}: the station model's numbers do not match its sha256 (the file was "
                "edited or damaged); enrol the station again"
            )
        return own


def fit_station_model(
    audio: F32,
    mean: F32,
    sd: F32,
    *,
    seed: int = 0,
    margin: float = MARGIN,
    fault_db: tuple[float, float] = (-24.0, -4.0),
    nuisance_db: tuple[float, float] = (-14.0, 0.0),
) -> StationModel:
    """Fit the station's model on its healthy ``audio`` (16 kHz; its first
    ``1 - HOLD_BACK`` for the fit, the rest for the bar). ``mean``, ``sd``: the station's
    feature statistics (its enrolment)."""
    n_win = len(audio) // HOP
    cut = int(n_win * (1 - HOLD_BACK))
    if cut < 50 or n_win - cut < 25:
        raise InvalidRequest(f"too little audio for a station model: {n_win} windows")
    rng = np.random.default_rng(seed)
    wf = WindowFeatures()
    train = np.asarray(audio[: cut * HOP], np.float32)
    plain = model_inputs(wf.frames(train), mean, sd)
    faulty = model_inputs(wf.frames(_mixed(train, rng, _fault_piece, fault_db)), mean, sd)
    benign = model_inputs(wf.frames(_mixed(train, rng, _nuisance_piece, nuisance_db)), mean, sd)
    x = np.concatenate([plain, benign, faulty]).astype(np.float64)
    y = np.concatenate([np.zeros(len(plain) + len(benign)), np.ones(len(faulty))])
    weight = np.concatenate([np.full(len(plain) + len(benign), 0.5), np.ones(len(faulty))])
    w, b = _logistic(x, y, weight, L2)
    held = model_inputs(wf.frames(np.asarray(audio[cut * HOP : n_win * HOP], np.float32)), mean, sd)
    held_logit = held.astype(np.float64) @ w + b
    top = float(held_logit.max())
    info = {
        "fit_windows": len(x),
        "held_back_windows": len(held),
        "held_back_max_logit": round(top, 4),
        "margin": margin,
        "seed": seed,
    }
    thr = float(np.clip(top + margin, -LOGIT_BOUND, LOGIT_BOUND))
    return StationModel(w.astype(np.float32), float(b), thr, info)

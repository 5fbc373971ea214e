"""The envelope comb at a station's known defect orders, offline (#18, session 34).

The shipped lines clause (``lines.py``) looks for a new comb at every rate from 15 to 260
Hz in three bands: some 900 candidates, and the station's healthy top is the highest of
them all. A station whose bearing is known (its catalogue gives the defect orders: BPFO,
BPFI and 2 x BSF per shaft revolution) can strike only at those orders times the shaft
speed, so this study looks there alone: each evaluation, the shaft speed read from the
station's own sound (``speed.shaft_hz``, in 0.9-1.4 times the station's nominal speed, or
the simulator's true speed with ``--speed true``), and for each order (of the bearing
fitted, or with ``--bearing other`` of a wrong one given) the best rate within ``--tol`` of
order x speed, its comb the runtime's (``orders.known_combs``: the mean of its first three
harmonics' new lines over the enrolled reference, a harmonic past 800 Hz counting as no
line since session 35; session 34's figures were with the mean over the harmonics under 800
Hz, ``cc3bd66``); the statistic per band the best order's, held at its least over ``HOLD``
evaluations. Variants: ``seg`` (one 1.28 s segment, as the shipped clause's) and ``mean``
(the mean of four that do not overlap, 5.12 s). The top per band is the highest held
statistic on the 30 s enrolled, a hit on ``CONSECUTIVE`` evaluations over top + margin, as
``guard_lines_alone.py`` scores (whose ``score`` this uses: false stops and misses in
stations, the clause alone).

    PYTHONPATH=src python scripts/guard_known_orders.py dump OUT.npz --seeds 20261205
    PYTHONPATH=src python scripts/guard_known_orders.py score OUT.npz --margins 0.5,0.75 \\
        --union seg:0.75,mean:0.75

About 1 s of CPU a station; ``dump`` runs two at a time. Docs: docs/guard.md, Session 34.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from guard_lines_alone import (  # scripts/ is on the path when run as a script
    ENROL_S,
    ENV_RATE,
    HOP,
    SEGMENT,
    Held,
    dump_with,
    enrolled_part,
    envelopes,
    parser,
    recording,
    report,
    spectra_of,
)

from rtgate.apps.guard import lines
from rtgate.apps.guard import orders as orders_module
from rtgate.apps.guard.evaluate_outside import SPEED_RANGE
from rtgate.apps.guard.features import CREST_BANDS
from rtgate.apps.guard.outside import BEARINGS, Station, _speed
from rtgate.apps.guard.simulate import RATE, Bearing
from rtgate.apps.guard.speed import LOW_RATE, low_band, shaft_hz

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def known_combs(new: F32, speeds: F64, orders: Sequence[float], tol: float) -> F32:
    """The runtime's comb (``orders.known_combs``) at one station's ``orders`` for each
    evaluation's speed: ``(S, bands, bins)`` -> ``(S, bands)``."""
    return orders_module.known_combs(new, speeds.tolist(), [orders] * len(new), tol)


def held(stat: F32) -> F32:
    return orders_module.held_bands(stat, lines.HOLD)


def variants(
    env: F64, speeds: F64, orders: Sequence[float], tol: float,
    enrol: tuple[F64, F64] | None = None,
) -> Held:  # fmt: skip
    """``seg`` and ``mean``: the held statistic per band and the evaluations' end times (s);
    the reference and the enrolled part's statistic from ``enrol`` (another recording's
    envelopes and speeds) when given."""
    ends, spectra = spectra_of(env)
    e_env, e_speeds = (env, speeds) if enrol is None else enrol
    e_spectra = spectra if enrol is None else spectra_of(e_env)[1]
    enrolled = ends <= ENROL_S * ENV_RATE
    t = ends / ENV_RATE
    out: Held = {}
    for name, of in (("seg", lambda sp: sp), ("mean", lines.averaged)):
        sp, e_sp = of(spectra), of(e_spectra)
        skip = len(spectra) - len(sp)
        reference = np.quantile(e_sp[enrolled[skip:]], lines.REFERENCE_Q, axis=0)
        stat = held(known_combs(lines.new_lines(sp, reference), speeds[skip:], orders, tol))
        times = t[skip + lines.HOLD - 1 :].astype(np.float32)
        e_stat = None
        if enrol is not None:
            e_new = lines.new_lines(e_sp, reference)
            e_stat = held(known_combs(e_new, e_speeds[skip:], orders, tol))
        out[name] = (enrolled_part(times, stat, e_stat), times)
    return out


def speeds_of(st: Station, ends: npt.NDArray[np.int64], speed: str) -> F64:
    """The shaft speed at each evaluation: read from the sound, or the simulator's own."""
    m = st.machine
    if speed == "true":  # day 0's speed, drawn first from the machine's own stream
        fr = _speed(m, len(st.audio), np.random.default_rng(m.seed))
        per = RATE / ENV_RATE  # audio samples per envelope value
        return np.array([fr[int((e - SEGMENT) * per) : int(e * per)].mean() for e in ends])
    low = low_band(st.audio, RATE)
    per = LOW_RATE / ENV_RATE  # low-band samples per envelope value
    lo, hi = (m.shaft_hz * k for k in SPEED_RANGE)  # the range evaluate --known-orders gives
    return np.array([shaft_hz(low[int((e - SEGMENT) * per) : int(e * per)], lo, hi)
                     for e in ends])  # fmt: skip


def bearing_given(st: Station, given: str) -> Bearing:
    """The station's bearing as its user gives it: the one fitted, or (``other``) the next
    of the outside set's catalogue, a wrong designation typed in."""
    fitted = st.machine.bearing
    if given == "fitted":
        return fitted
    return BEARINGS[(BEARINGS.index(fitted) + 1) % len(BEARINGS)]


def _one(job: tuple[int, int, int, int, str, float, str]) -> tuple[int, int, Held]:
    seed, i, day, enrol_day, speed, tol, given = job
    st = recording(seed, i, day)
    env = envelopes(st.audio.astype(np.float64), CREST_BANDS)
    ends = np.arange(SEGMENT, env.shape[1] + 1, HOP)
    enrol = None
    if enrol_day != day:
        se = recording(seed, i, enrol_day)
        enrol = (envelopes(se.audio.astype(np.float64), CREST_BANDS), speeds_of(se, ends, speed))
    orders = list(bearing_given(st, given).orders())
    return seed, i, variants(env, speeds_of(st, ends, speed), orders, tol, enrol)


def dump(
    out: Path, seeds: Sequence[int], day: int, enrol_day: int, speed: str, tol: float, given: str
) -> None:
    if speed == "true" and (day or enrol_day):
        raise SystemExit("--speed true is day 0's only")
    n = dump_with(out, seeds, _one, (day, enrol_day, speed, tol, given))
    print(f"wrote {out}: {n} stations, day {day}, enrolled on day {enrol_day}, speed {speed}, "
          f"tol {tol}, bearing {given}")  # fmt: skip


def main() -> None:
    ap, d = parser(__doc__, "0.5,0.75,1.0")
    d.add_argument("--speed", choices=("tracked", "true"), default="tracked")
    d.add_argument("--tol", type=float, default=0.02)
    d.add_argument("--bearing", choices=("fitted", "other"), default="fitted")
    args = ap.parse_args()
    if args.cmd == "dump":
        enrol_day = args.day if args.enrol_day is None else args.enrol_day
        seeds = [int(v) for v in args.seeds.split(",")]
        dump(args.out, seeds, args.day, enrol_day, args.speed, args.tol, args.bearing)
        return
    report(args.data, ("seg", "mean"), args.margins, args.union)


if __name__ == "__main__":
    main()

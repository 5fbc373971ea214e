"""The envelope lines clause alone, over the outside set's stations, offline (#18, session 32).

A quick bench for ideas about the lines (``lines.py``): each station's audio from
``outside.make_stations`` (or another day's recording of it), its bands' envelopes (energy
per 0.625 ms, as ``features.py`` computes them, here by one FFT over the whole recording),
the lines' own ``log_spectra`` of 1.28 s segments every 0.32 s, the reference and the top
from the first 30 s (the enrolment), the comb held over ``HOLD`` evaluations, a hit on
``CONSECUTIVE`` evaluations in a row over top + margin. No detector, no persist clause, no
mean: what the lines see by themselves (docs/guard.md, Session 32, for what it measured).
``--day D`` scores another day's recording of each station (enrolled on its own first 30 s);
``--enrol-day D`` enrols on day D's recording (the reference, and the top from its first 30
s) and scores the set's, as ``guard evaluate --enrol-day`` does (session 34).

``dump`` saves each station's held statistic per band for each variant:

- ``crest``: the three crest bands, rates 15-260 Hz (the shipped clause);
- ``crest-fast``: the crest bands, rates 260-780 Hz, each with its harmonics under the
  envelope's Nyquist (the fast-rates trial, ``1e2155e``);
- ``narrow``: 31 bands 500 Hz wide every 250 Hz over 0.5-8 kHz, rates 15-260 Hz;
- ``third``: third-octave bands from 500 Hz, rates 15-260 Hz.

``score`` prints false stops and misses (stations) per variant and margin, per family, and
for the union of two variants each at its own margin.

    PYTHONPATH=src python scripts/guard_lines_alone.py dump OUT.npz --seeds 20261205,20261206
    PYTHONPATH=src python scripts/guard_lines_alone.py dump OUT.npz --variants crest
    PYTHONPATH=src python scripts/guard_lines_alone.py score OUT.npz --margins 0.5,1.0
    PYTHONPATH=src python scripts/guard_lines_alone.py score OUT.npz \\
        --union crest:0.5,crest-fast:1.5

About 1 s of CPU a station; ``dump`` runs two at a time. Validation seeds only.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard import lines
from rtgate.apps.guard.features import CREST_BANDS, RATE
from rtgate.apps.guard.outside import Station, make_station, make_stations

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
ENROL_S, SCORE_S = 30.0, 15.0
SUB = 10  # samples per envelope value (1,600 Hz)
ENV_RATE = RATE / SUB
SEGMENT = lines.WINDOWS * (320 // SUB)  # envelope values per 1.28 s segment
HOP = lines.STEP * (320 // SUB)  # envelope values per 0.32 s
F_FAST_HZ = 780.0  # the fast-rates trial's highest rate
Band = tuple[float, float]


def banks() -> dict[str, list[Band]]:
    narrow = [(float(lo), float(lo) + 500.0) for lo in np.arange(500.0, 7501.0, 250.0)]
    centres = [500.0 * 2 ** (k / 3) for k in range(13)]
    third = [(c / 2 ** (1 / 6), min(7990.0, c * 2 ** (1 / 6))) for c in centres
             if c / 2 ** (1 / 6) < 7900.0]  # fmt: skip
    return {"crest": list(CREST_BANDS), "narrow": narrow, "third": third}


# variant: (bank, fast rates)
VARIANTS: dict[str, tuple[str, bool]] = {
    "crest": ("crest", False),
    "crest-fast": ("crest", True),
    "narrow": ("narrow", False),
    "third": ("third", False),
}


def envelopes(x: F64, bands: Sequence[Band]) -> F64:
    """Each band's energy per ``SUB`` samples, ``(bands, n)``."""
    spec = np.fft.rfft(x)
    f = np.fft.rfftfreq(len(x), 1 / RATE)
    out = []
    for lo, hi in bands:
        y = np.fft.irfft(spec * ((f >= lo) & (f < hi)), n=len(x))
        out.append((y * y)[: len(y) // SUB * SUB].reshape(-1, SUB).mean(axis=1))
    return np.stack(out)


def fast_combs(spectra: F32, reference: npt.NDArray[np.floating]) -> F32:
    """:func:`lines.combs` for the rates ``F_MAX_HZ``-``F_FAST_HZ``: each the mean of its
    harmonics that have a bin on each side under the envelope's Nyquist."""
    bins = spectra.shape[-1]
    df = ENV_RATE / SEGMENT
    rates = np.arange(int(lines.F_MAX_HZ / df) + 1, int(F_FAST_HZ / df) + 1)
    best = lines.new_lines(spectra, reference)
    acc = np.zeros((*best.shape[:-1], len(rates)))
    count = np.zeros(len(rates))
    for h in range(1, lines.HARMONICS + 1):
        fits = rates * h <= bins - 2
        acc[..., fits] += best[..., rates[fits] * h]
        count += fits
    out: F32 = (acc / count).astype(np.float32)
    return out


def spectra_of(env: F64) -> tuple[npt.NDArray[np.int64], F32]:
    """The evaluations' ends (in envelope values) and their segments' ``L`` (``lines.py``)."""
    ends = np.arange(SEGMENT, env.shape[1] + 1, HOP)
    return ends, lines.log_spectra(np.stack([env[:, e - SEGMENT : e] for e in ends]))


def enrolled_part(t: npt.NDArray[np.floating], stat: F32, enrol_stat: F32 | None) -> F32:
    """``stat`` with the evaluations of the enrolled 30 s taken from ``enrol_stat`` (the
    station enrolled on another recording: its top is that recording's) when given."""
    if enrol_stat is None:
        return stat
    out: F32 = np.where((t <= ENROL_S)[:, None], enrol_stat, stat).astype(np.float32)
    return out


def held_per_band(env: F64, fast: bool, enrol_env: F64 | None = None) -> tuple[F32, F32]:
    """The held comb's statistic per band at each evaluation once ``HOLD`` have passed,
    over the reference of the enrolled part (of ``enrol_env``'s, another recording of the
    station, when given), and the evaluations' end times (s)."""
    ends, spectra = spectra_of(env)
    enrol_spectra = spectra if enrol_env is None else spectra_of(enrol_env)[1]
    enrolled = ends <= ENROL_S * ENV_RATE
    reference = np.quantile(enrol_spectra[enrolled], lines.REFERENCE_Q, axis=0)
    combs = fast_combs if fast else lines.combs

    def per_band(sp: F32) -> F32:
        acc = combs(sp, reference)
        return np.stack([lines.held_run(acc[:, b : b + 1]) for b in range(acc.shape[1])], axis=1)

    times = (ends[lines.HOLD - 1 :] / ENV_RATE).astype(np.float32)
    enrol_stat = None if enrol_env is None else per_band(enrol_spectra)
    return enrolled_part(times, per_band(spectra), enrol_stat), times


STATIONS: dict[tuple[int, int], Station] = {}  # filled before the pool forks
Held = dict[str, tuple[F32, F32]]  # variant: (statistic per evaluation and band, end times)
Job = tuple[int, int, int, int, tuple[str, ...]]  # seed, station, day, enrolment's day, variants


def recording(seed: int, i: int, day: int) -> Station:
    """Station ``i`` of ``seed``'s outside set, on ``day`` (0: the set's own recording)."""
    st = STATIONS[(seed, i)]
    if not day:
        return st
    onset = st.onset_s or 0.0
    return make_station(st.machine, ENROL_S + SCORE_S, st.fault, onset, st.fault_rms_db, day=day)


def _one(job: Job) -> tuple[int, int, Held]:
    seed, i, day, enrol_day, wanted = job
    x = recording(seed, i, day).audio.astype(np.float64)
    picked = {v: VARIANTS[v] for v in wanted}
    needed = {b for b, _fast in picked.values()}
    env = {b: envelopes(x, bands) for b, bands in banks().items() if b in needed}
    enrol: dict[str, F64 | None] = dict.fromkeys(needed)
    if enrol_day != day:
        xe = recording(seed, i, enrol_day).audio.astype(np.float64)
        enrol = {b: envelopes(xe, bands) for b, bands in banks().items() if b in needed}
    return seed, i, {v: held_per_band(env[b], fast, enrol[b]) for v, (b, fast) in picked.items()}


def dump_with(
    out: Path, seeds: Sequence[int], worker: Callable[[Any], tuple[int, int, Held]],
    extra: tuple[Any, ...],
) -> int:  # fmt: skip
    """``worker((seed, i, *extra))`` for the 100 stations of each seed, two at a time, saved
    with each station's truth to ``out``; returns how many stations."""
    meta = []
    for s in seeds:
        for i, st in enumerate(make_stations(100, seed=s, enrol_s=ENROL_S, score_s=SCORE_S)):
            STATIONS[(s, i)] = st
            meta.append([s, i, st.machine.family, st.fault or "", st.onset_s or -1.0,
                         st.fault_rms_db])  # fmt: skip
    arrays: dict[str, npt.NDArray[np.generic]] = {}
    with Pool(2) as pool:
        jobs = [(s, i, *extra) for s in seeds for i in range(100)]
        for s, i, res in pool.imap_unordered(worker, jobs, chunksize=4):
            for v, (stat, t) in res.items():
                arrays[f"{s}/{i}/{v}"], arrays[f"{s}/{i}/{v}/t"] = stat, t
    np.savez(out, meta=np.array(meta, dtype=object), **arrays)  # type: ignore[arg-type]
    return len(meta)


def dump(
    out: Path, seeds: Sequence[int], day: int, enrol_day: int, variants: Sequence[str]
) -> None:
    n = dump_with(out, seeds, _one, (day, enrol_day, tuple(variants)))
    print(f"wrote {out}: {n} stations, day {day}, enrolled on day {enrol_day}")


def first_hit(stat: F32, t: F32, margin: float, lo: float, hi: float) -> float | None:
    """The end of the first of ``CONSECUTIVE`` evaluations in a row over the enrolled top +
    ``margin`` (per band), within ``[lo, hi)`` s; None without one."""
    top = stat[t <= ENROL_S].max(axis=0)
    over = ((stat - top - margin).max(axis=1) > 0) & (t > ENROL_S) & (t >= lo) & (t < hi)
    run = 0
    for k in range(len(t)):
        run = run + 1 if over[k] else 0
        if run >= lines.CONSECUTIVE:
            return float(t[k])
    return None


def score(path: Path, picks: Sequence[tuple[str, float]]) -> tuple[int, int, Counter[str]]:
    """False stops and misses (stations) of the union of ``picks`` (variant, margin)."""
    data = np.load(path, allow_pickle=True)
    false = missed = 0
    by_family: Counter[str] = Counter()

    def hit(key: str, lo: float, hi: float) -> bool:
        return any(first_hit(data[f"{key}/{v}"], data[f"{key}/{v}/t"], m, lo, hi) is not None
                   for v, m in picks)  # fmt: skip

    for s, i, family, fault, onset, _db in data["meta"]:
        key = f"{s}/{i}"
        if fault:
            false += hit(key, 0.0, float(onset))
            if not hit(key, float(onset), np.inf):
                missed += 1
                by_family[str(family)] += 1
        else:
            false += hit(key, 0.0, np.inf)
    return false, missed, by_family


def data_key(path: Path) -> str:
    """The first station's key in a dump."""
    s, i = np.load(path, allow_pickle=True)["meta"][0][:2]
    return f"{s}/{i}"


def report(data: Path, variants: Sequence[str], margins: str, unions: Sequence[str]) -> None:
    """Print false stops and misses for each of ``variants`` at each of ``margins`` ("0.5,1")
    and for each union ("variant:margin,variant:margin")."""
    rows = [[(v, float(m))] for v in variants for m in margins.split(",")]
    rows += [[(p.split(":")[0], float(p.split(":")[1])) for p in u.split(",")] for u in unions]
    for picks in rows:
        false, missed, fam = score(data, picks)
        name = " or ".join(f"{v}@{m:g}" for v, m in picks)
        print(f"{name:32s} false stops {false:3d}  misses {missed:3d}  {dict(sorted(fam.items()))}")


def parser(doc: str, margins: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """A study's command line: ``dump OUT --seeds --day`` (the second parser returned, for
    the study's own options) and ``score DATA --margins --union``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--seeds", default="20261205,20261206,20261207")
    d.add_argument("--day", type=int, default=0, help="the recording scored (0: the set's)")
    d.add_argument(
        "--enrol-day", type=int, default=None,
        help="enrolled on this day's recording (default: the scored one's first 30 s)",
    )  # fmt: skip
    s = sub.add_parser("score")
    s.add_argument("data", type=Path)
    s.add_argument("--margins", default=margins)
    s.add_argument("--union", action="append", default=[], help="variant:margin,variant:margin")
    return ap, d


def main() -> None:
    ap, d = parser(__doc__, "0.5,0.75,1.0,1.25")
    d.add_argument("--variants", default=",".join(VARIANTS), help="which to dump (default all)")
    args = ap.parse_args()
    if args.cmd == "dump":
        wanted = args.variants.split(",")
        if unknown := set(wanted) - set(VARIANTS):
            raise SystemExit(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
        enrol_day = args.day if args.enrol_day is None else args.enrol_day
        dump(args.out, [int(v) for v in args.seeds.split(",")], args.day, enrol_day, wanted)
        return
    files, first = np.load(args.data).files, data_key(args.data)
    report(args.data, [v for v in VARIANTS if f"{first}/{v}" in files], args.margins, args.union)


if __name__ == "__main__":
    main()

"""`rtgate bench gate`: what the gate itself costs, in process, on one core.

- ``decision_p99_us``: choosing a tier from learned latency statistics (``Gate.choose``).
- ``template_hit_p99_us``: a whole request (budget, choice, template tier, trace, metrics)
  answered by the real template tier.

The gate in the benchmark is a realistic chain: an emulated 70B cloud tier (skipped on its
predicted p99 within a 150 ms budget), the exact in-memory cache, which misses, then the
template tier. As in ``rtgate serve`` (``create_app(freeze_gc=True)``), what was built before
the first request is moved out of the collector's sight (``gc.freeze()``) once it is built,
so a full collection walks only what requests allocate.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from hdrh.histogram import HdrHistogram

from rtgate.cli.output import show_table, write_json
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.gate import Gate
from rtgate.tiers.base import Tier
from rtgate.tiers.cache import CacheTier, ExactCache
from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency
from rtgate.tiers.fake import FakeTier

__all__ = ["GOALS", "run"]

GOALS = {"decision_p99_us": 50.0, "template_hit_p50_us": 30.0, "template_hit_p99_us": 100.0}


def _pin_one_core() -> int | None:
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})
        return cpus[-1]
    except (AttributeError, OSError):
        return None


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # nanoseconds up to 60 ms


def _summary(h: HdrHistogram) -> dict[str, float]:
    return {
        "p50_us": h.get_value_at_percentile(50) / 1000.0,
        "p90_us": h.get_value_at_percentile(90) / 1000.0,
        "p99_us": h.get_value_at_percentile(99) / 1000.0,
        "max_us": h.get_max_value() / 1000.0,
        "mean_us": h.get_mean_value() / 1000.0,
    }


def _template_tier() -> tuple[Tier, list[str]]:
    """The autocomplete domain's real template table, and inputs that hit it."""
    from importlib.resources import files

    from rtgate.tiers.templates import TemplateTier

    path = files("rtgate.domains").joinpath("cards/templates.json")
    tier = TemplateTier.from_file(str(path))
    inputs = [p for t in tier.table.templates if t.kind == "prefix" for p in t.patterns]
    return tier, inputs


def _gate(template: Tier) -> Gate:
    # the cloud is skipped on its prediction (never run: delegate=False); the cache, the
    # real exact in-memory one (`[cache]`'s default store), is empty: it misses
    cloud = EmulatedLatency(FakeTier("cloud-inner", 80), CLOUD_70B, name="cloud", delegable=True)
    declines = CacheTier(ExactCache(), name="cache", quality=95)
    return Gate(
        [cloud, declines, template],
        priors={"cache": Prior(0.05, 0.05), template.name: Prior(0.1, 0.1)},
    )


def _time_calls(fn: Callable[[], Any], n: int) -> HdrHistogram:
    h = _hist()
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        h.record_value(max(1, clock() - t0))
    return h


async def _time_requests(gate: Gate, inputs: list[str], n: int, budget_ms: float) -> HdrHistogram:
    h = _hist()
    clock = time.perf_counter_ns
    rng = random.Random(3)
    for _ in range(n):
        req = Request(rng.choice(inputs), delegate=False)
        t0 = clock()
        res = await gate.answer(req, budget_ms)
        h.record_value(max(1, clock() - t0))
        if res.route == "silent":
            raise RuntimeError(f"template missed on {req.input!r}: {res.trace.to_dict()}")
    return h


def run(n: int = 20_000, budget_ms: float = 150.0) -> dict[str, Any]:
    """Measure and return the JSON-ready report."""
    core = _pin_one_core()
    template, prefixes = _template_tier()
    gate = _gate(template)
    rng = random.Random(1)
    lefts = [rng.uniform(0.5, 2500.0) for _ in range(1024)]
    i = 0

    def decide() -> None:
        nonlocal i
        gate.choose(lefts[i & 1023])
        i += 1

    _time_calls(decide, 2000)  # warm
    decision = _time_calls(decide, n)

    async def requests() -> HdrHistogram:
        async with gate:
            await _time_requests(gate, prefixes, 500, budget_ms)  # warm
            gc.collect()
            gc.freeze()  # as the server does once it has started
            try:
                return await _time_requests(gate, prefixes, n, budget_ms)
            finally:
                gc.unfreeze()

    try:
        import uvloop

        hit = uvloop.run(requests())
        loop_name = "uvloop"
    except ImportError:
        hit = asyncio.run(requests())
        loop_name = "asyncio"
    d, t = _summary(decision), _summary(hit)
    return {
        "bench": "gate",
        "n": n,
        "core": core,
        "event_loop": loop_name,
        "tiers": [x.name for x in gate.tiers],
        "decision_p99_us": d["p99_us"],
        "template_hit_p99_us": t["p99_us"],
        "decision_us": d,
        "template_hit_us": t,
        "goals": GOALS,
        "met": {
            "decision_p99_us": d["p99_us"] <= GOALS["decision_p99_us"],
            "template_hit_p50_us": t["p50_us"] <= GOALS["template_hit_p50_us"],
            "template_hit_p99_us": t["p99_us"] <= GOALS["template_hit_p99_us"],
        },
    }


app = typer.Typer()


@app.command("gate")
def bench_gate(
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    n: int = typer.Option(20_000, help="timed calls per measurement"),
) -> None:
    """The gate's own cost on one core: tier decision and a template-hit request."""
    report = run(n=n)
    rows = [
        (
            "decision p50 / p99",
            f"{report['decision_us']['p50_us']:.1f} / "
            f"{report['decision_p99_us']:.1f} µs (goal ≤ 50)",
        ),
        (
            "template hit p50 / p99",
            f"{report['template_hit_us']['p50_us']:.1f} / "
            f"{report['template_hit_p99_us']:.1f} µs (goals ≤ 30 / ≤ 100)",
        ),
        ("event loop", str(report["event_loop"])),
    ]
    show_table("rtgate bench gate", rows)
    write_json(report, json_out)

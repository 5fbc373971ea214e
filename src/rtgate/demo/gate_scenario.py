"""The gate's own demo section: a hanging and a slow cloud, and every answer on time."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from rtgate.bench.plots import latency_cdf
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.demo.runner import DemoSection
from rtgate.gate import Gate
from rtgate.tiers.emulated import CLOUD_70B, LOCAL_8B, EmulatedLatency
from rtgate.tiers.fake import FakeTier

__all__ = ["gate_demo"]


async def _run(n: int, budget_ms: float) -> tuple[list[float], dict[str, int], int]:
    cloud = EmulatedLatency(
        FakeTier("cloud-inner", 80, ["deep answer"]),
        CLOUD_70B,
        name="cloud",
        delegable=True,
        seed=1,
    )
    local = EmulatedLatency(
        FakeTier("local-inner", 50, ["quick answer"]), LOCAL_8B, name="local", seed=2
    )
    hanging = FakeTier("vendor-b", 70, hang=True)  # a second provider that never answers
    template = FakeTier("template", 10, ["canned answer"], ttft_ms=0.2)
    gate = Gate(
        [cloud, hanging, local, template],
        priors={"vendor-b": Prior(200, 200), "template": Prior(1, 1)},
    )
    rng = random.Random(5)
    latencies: list[float] = []
    routes: dict[str, int] = {}
    async with gate:
        for i in range(n):
            req = Request(f"q{i}", delegate=rng.random() < 0.2)
            res = await gate.answer(req, budget_ms)
            latencies.append(res.trace.elapsed_ms)
            routes[res.route] = routes.get(res.route, 0) + 1
        done = 0
        for jid in gate.job_ids():
            done += (await gate.wait_job(jid)).status == "done"
    return latencies, routes, done


def gate_demo(out_dir: Path) -> DemoSection:
    """A budget of 300 ms against an emulated 70B cloud, a provider that hangs, an emulated
    8B local model and a template; 20% of requests ask for the deeper answer later."""
    n, budget = 100, 300.0
    lat, routes, done = asyncio.run(_run(n, budget))
    lat_sorted = sorted(lat)
    p50 = lat_sorted[len(lat) // 2]
    p99 = lat_sorted[int(0.99 * (len(lat) - 1))]
    over = sum(1 for x in lat if x > budget)
    fig = latency_cdf(
        {"gate (300 ms budget)": lat},
        out_dir / "gate_cdf.png",
        title="Gate latency with a hanging provider (emulated tiers)",
        budget_ms=budget,
    )
    rows = [
        ("requests", str(n)),
        ("latency p50 / p99", f"{p50:.1f} / {p99:.1f} ms"),
        ("over budget", str(over)),
        ("routes", ", ".join(f"{k} {v}" for k, v in sorted(routes.items()))),
        ("delegated answers delivered", str(done)),
    ]
    return DemoSection(
        "Gate: budgets hold when a provider hangs",
        rows,
        [fig],
        notes="Model tiers here are emulated latency profiles (named as such); "
        "the scenarios below run the real models.",
    )

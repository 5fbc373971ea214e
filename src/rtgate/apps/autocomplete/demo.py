"""The autocomplete's demo section: a short replay of typing sessions, baseline vs gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rtgate.apps.autocomplete.bench import GOALS, run
from rtgate.apps.autocomplete.engine import AutocompleteEngine, EngineConfig
from rtgate.demo.runner import DemoSection

__all__ = ["EXAMPLES", "demo"]

EXAMPLES = (
    "我想把",
    "我想把积",
    "信用卡丢了",
    "how do i act",
    "我下个月要去日本旅游两周，想临时提额到5万，同时把上个月那笔消费分6期，另外境外手续费能免吗",
)


async def _examples() -> list[tuple[str, str]]:
    rows = []
    async with AutocompleteEngine.build(EngineConfig()) as engine:
        for prefix in EXAMPLES:
            res = await engine.complete(prefix)
            shown = " / ".join(c.text for c in res.candidates[:3])
            rows.append((f"“{prefix}”", f"{res.route}, {res.elapsed_ms:.2f} ms: {shown}"))
    return rows


def demo(out_dir: Path) -> DemoSection:
    """2,000 keystrokes of typing sessions (emulated latency profiles, ~20 s) and five
    example prefixes."""
    fig = out_dir / "autocomplete_cdf.png"
    r = run(2_000, mode="emulated", concurrency=64, time_scale=0.5, with_accuracy=False, plot=fig)
    g, b = r["gate"], r["baseline_all_cloud"]
    rows = [
        ("keystrokes replayed", str(r["n"])),
        ("all-cloud p50 / p99", f"{b['p50_ms']:.0f} / {b['p99_ms']:.0f} ms"),
        ("gate p50 / p99", f"{g['p50_ms']:.2f} / {g['p99_ms']:.1f} ms"),
        ("over the 150 ms budget", str(g["over_budget"])),
        ("routes", ", ".join(f"{k} {v:.1%}" for k, v in g["share"].items())),
    ]
    rows += asyncio.run(_examples())
    ok = (
        g["over_budget"] == 0
        and g["p99_ms"] <= GOALS["p99_ms"]
        and g["share"]["cloud_async"] <= GOALS["cloud_share"]
    )
    return DemoSection(
        "Autocomplete: suggestions within 150 ms while typing",
        rows,
        [fig],
        notes="Local ranking and the 70B cloud are emulated latency profiles here "
        "(`rtgate bench autocomplete --mode real` runs Gemma 3 270M on this CPU).",
        ok=ok,
    )

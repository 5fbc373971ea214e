"""The NPC section of `rtgate demo`: 10 s of the 60 fps loop, then 5 s of the ablation."""

from __future__ import annotations

from pathlib import Path

from rtgate.apps.npc.bench import run
from rtgate.demo.runner import DemoSection

__all__ = ["demo"]


def demo(out_dir: Path) -> DemoSection:
    r = run(seconds=10.0, ablation_seconds=5.0)
    fm, ab, it = r["frame_ms"], r["inline_ablation"], r["intents"]
    rows = [
        ("frames (60 fps, 10 s)", str(r["frames"])),
        ("frame time p50 / p99 / max", f"{fm['p50']:.2f} / {fm['p99']:.2f} / {fm['max']:.2f} ms"),
        ("missed frames (> 16.7 ms)", str(r["missed_frames"])),
        ("intents (template/local)", f"{it['count']}, p99 {it['latency_frames_p99']:.0f} frames"),
        (
            "ablation: model inside the frame",
            f"p99 {ab['frame_ms']['p99']:.1f} ms, {ab['missed_frames']} missed frames",
        ),
    ]
    return DemoSection(
        "NPCs: a 60 fps loop that never waits on a model",
        rows,
        notes="The cloud tier is the local model wrapped in the emulated 70B latency profile.",
    )

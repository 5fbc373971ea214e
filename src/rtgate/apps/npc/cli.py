"""CLI verbs: ``rtgate npc`` (watch the village) and ``rtgate bench npc`` (measure it).

Mount: ``app`` at the root, ``bench_app`` under ``rtgate bench``. Models load inside the
commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from rtgate.cli.output import console, show_table

__all__ = ["app", "bench_app"]

app = typer.Typer(add_completion=False, help="A 60 fps village whose NPCs ask the gate.")
bench_app = typer.Typer(add_completion=False)

_MODEL = typer.Option("smollm2", help="packaged GGUF model for the local and cloud tiers")
_REALTIME = typer.Option(
    True, help="run the frame thread under SCHED_FIFO when the system allows it"
)
_BUDGET = typer.Option(
    100.0, "--budget-ms", help="budget for the first piece of an answer to a player line"
)


@app.command("npc")
def npc(
    seconds: float = typer.Option(20.0, min=1.0, help="how long to play"),
    json_out: bool = typer.Option(False, "--json", help="print a JSON report, no log"),
    model: str = _MODEL,
    budget_ms: float = _BUDGET,
    realtime: bool = _REALTIME,
) -> None:
    """Play the scripted session at 60 fps and show what the NPCs decide, frame by frame."""
    from rtgate.apps.npc.bench import run
    from rtgate.apps.npc.game import Arrival

    def show(frame: int, arrivals: list[Arrival]) -> None:
        for a in arrivals:
            colour = {"deeper": "magenta", "head": "yellow"}.get(a.label, "cyan")
            head, _, line = a.intent.line().partition(" | ")
            what = a.intent.line() if a.act and a.speak else (head if a.act else line)
            console.print(
                f"[dim]frame {frame:5d}[/] {a.npc:<5} [{colour}]{a.label:<8}[/] "
                f"[dim]+{a.latency_frames:>3} frames[/]  {what}",
                highlight=False,
            )

    if not json_out:
        console.print(f"[bold]warming up[/] {model} (templates, local, emulated cloud)…")
    on_frame = None if json_out else show
    report = run(
        seconds,
        model=model,
        budget_ms=budget_ms,
        ablation_seconds=0.0,
        frame_sched="fifo" if realtime else "none",
        on_frame=on_frame,
    )
    if json_out:
        report.pop("inline_ablation", None)
        typer.echo(json.dumps(report, indent=2))
    else:
        _table("rtgate npc", report)


@bench_app.command("npc")
def bench_npc(
    seconds: float = typer.Option(30.0, min=1.0, help="length of each run"),
    json_file: Path | None = typer.Option(None, "--json", help="write the report here"),
    model: str = _MODEL,
    budget_ms: float = _BUDGET,
    ablation_seconds: float | None = typer.Option(
        None, help="length of the inline ablation (default: --seconds; 0 skips it)"
    ),
    realtime: bool = _REALTIME,
) -> None:
    """Frame times with NPC intents through the gate, vs. the model called inside frames."""
    from rtgate.apps.npc.bench import run

    report = run(
        seconds,
        model=model,
        budget_ms=budget_ms,
        ablation_seconds=ablation_seconds,
        frame_sched="fifo" if realtime else "none",
    )
    _table("rtgate bench npc", report)
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        console.print(f"[dim]wrote {json_file}[/dim]")


def _table(title: str, r: dict[str, Any]) -> None:
    goals = r["goals"]
    fm, it = r["frame_ms"], r["intents"]
    rows = [
        ("frames", str(r["frames"])),
        (
            "frame ms p50 / p99 / max",
            f"{fm['p50']:.2f} / {fm['p99']:.2f} / {fm['max']:.2f} "
            f"(goal p99 ≤ {goals['frame_p99_ms']:.1f})",
        ),
        ("missed frames", f"{r['missed_frames']} (goal {goals['missed_frames']})"),
        (
            "intents (template/local)",
            f"{it['count']}: {it['latency_frames_p50']:.0f} / {it['latency_frames_p99']:.0f} "
            f"frames p50 / p99 (goal p99 ≤ {goals['intent_latency_frames_p99']})",
        ),
        ("routes", ", ".join(f"{k} {v}" for k, v in sorted(it["routes"].items()))),
        (
            "deeper lines (cloud)",
            f"{r['followups']['count']}, {r['followups']['latency_frames_p50']:.0f} frames p50",
        ),
        ("warm-up", f"{r['warmup_s']:.1f} s, warm={r['warm']}"),
    ]
    ab = r.get("inline_ablation") or {}
    if ab:
        rows += [
            (
                "inline ablation frame ms p99 / max",
                f"{ab['frame_ms']['p99']:.1f} / {ab['frame_ms']['max']:.1f}",
            ),
            ("inline ablation missed frames", f"{ab['missed_frames']} of {ab['frames']}"),
        ]
    show_table(title, rows)

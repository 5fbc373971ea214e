"""``rtgate bench tiers``: the typer command (the lead mounts ``app`` under ``rtgate bench``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Tier and local-model latency benchmarks.")


@app.callback()
def _group() -> None:
    """Keeps ``tiers`` a subcommand when this app runs on its own."""


def _fmt(d: dict[str, Any], unit: str) -> str:
    if not d:
        return "-"
    return f"{d[f'p50_{unit}']:.1f} / {d[f'p99_{unit}']:.1f}"


@app.command("tiers")
def tiers(
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    models: str = typer.Option("smollm2,gemma3-270m", help="comma-separated local models"),
    rounds: int = typer.Option(3, help="passes over the ten prompts per configuration"),
    threads: int = typer.Option(2, help="llama.cpp threads"),
    fast_calls: int = typer.Option(2000, help="timed calls per fast tier"),
    server: bool = typer.Option(False, help="also measure through llama_cpp.server (HTTP)"),
) -> None:
    """p50/p99 per tier call; local models' TTFT and TPOT with and without prefix cache."""
    from rtgate.bench.tier_latency import run_tiers_bench

    names = [m.strip() for m in models.split(",") if m.strip()]
    report = run_tiers_bench(
        names, rounds=rounds, n_threads=threads, fast_calls=fast_calls, server=server
    )
    console = Console()
    fast = Table(title="fast tiers: one call (µs, p50 / p99)")
    for col in ("tier", "p50 / p99 µs", "hit rate"):
        fast.add_column(col)
    for name, res in report["fast_tiers"].items():
        if name != "skipped":
            fast.add_row(name, _fmt(res, "us"), f"{res['hit_rate']:.2f}")
    for name, why in report["fast_tiers"]["skipped"].items():
        fast.add_row(name, "skipped", why)
    console.print(fast)
    local = Table(title=f"local models, {threads} llama.cpp threads (ms, p50 / p99)")
    for col in ("model", "prefix cache", "TTFT", "TPOT", "E2E", "score(5)"):
        local.add_column(col)
    for model, res in report["local"].items():
        for key, label in (("prefix_cache", "on"), ("no_prefix_cache", "off")):
            m = res[key]
            score = _fmt(m.get("score_5_candidates", {}), "ms")
            row = (_fmt(m["ttft"], "ms"), _fmt(m["tpot"], "ms"), _fmt(m["e2e"], "ms"), score)
            local.add_row(model, label, *row)
    console.print(local)
    console.print(f"SSE parse: {report['client']['sse_parse_us_per_chunk']} µs per chunk")
    if "smollm2_en_http_vs_in_process" in report["client"]:
        c = report["client"]["smollm2_en_http_vs_in_process"]
        console.print(
            f"llama_cpp.server over HTTP vs in process (SmolLM2, English, paired medians): "
            f"TTFT {c['ttft_overhead_p50_ms']:+.1f} ms, TPOT {c['tpot_overhead_p50_ms']:+.2f} ms"
        )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
        console.print(f"[dim]wrote {json_out}[/dim]")

"""CLI verbs: ``rtgate complete PREFIX`` and ``rtgate bench autocomplete``.

Mount ``app`` at the root and ``bench_app`` under ``rtgate bench``. The engine is built
inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["app", "bench_app"]

app = typer.Typer(add_completion=False, help="As-you-type suggestions for a credit-card service.")
bench_app = typer.Typer(add_completion=False)
console = Console()


async def _complete(prefix: str, budget_ms: float, mode: str, wait: bool) -> dict[str, Any]:
    from rtgate.apps.autocomplete.engine import AutocompleteEngine, EngineConfig

    engine = AutocompleteEngine.build(EngineConfig(mode="real" if mode == "real" else "emulated"))
    async with engine:
        res = await engine.complete(prefix, budget_ms)
        out = res.to_dict()
        if wait and res.job_id is not None:
            later = await engine.followup(res.job_id)
            out["followup"] = {
                "candidates": [c.to_dict() for c in later.candidates],
                "route": later.route,
                "elapsed_ms": round(later.elapsed_ms, 1),
            }
    return out


@app.command("complete")
def complete(
    prefix: str = typer.Argument(..., help="what the customer has typed so far"),
    json_out: bool = typer.Option(False, "--json", help="print the API's JSON answer"),
    budget_ms: float = typer.Option(150.0, "--budget-ms", min=5.0, max=10_000.0),
    mode: str = typer.Option("emulated", help="emulated (no model) or real (Gemma 3 270M)"),
    wait: bool = typer.Option(True, help="wait for the cloud's suggestions when it was asked"),
) -> None:
    """Suggestions for PREFIX, as `POST /v1/complete` returns them."""
    from rtgate.core.errors import InvalidRequest

    try:
        out = asyncio.run(_complete(prefix, budget_ms, mode, wait))
    except InvalidRequest as e:
        console.print(f"[red]invalid request:[/red] {e}")
        raise typer.Exit(2) from e
    if json_out:
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    console.print(f"[bold]{prefix}[/bold]  route={out['route']}  {out['elapsed_ms']:.2f} ms")
    for c in out["candidates"]:
        console.print(f"  {c['text']}  [dim]{c['intent']} · {c['source']}[/dim]", highlight=False)
    if "followup" in out:
        f = out["followup"]
        console.print(f"[bold]later[/bold] route={f['route']}  {f['elapsed_ms']:.0f} ms")
        for c in f["candidates"]:
            console.print(f"  {c['text']}  [dim]{c['intent']} · {c['source']}[/dim]")


@bench_app.command("autocomplete")
def bench_autocomplete(
    n: int = typer.Option(10_000, "--n", min=10, help="requests (keystrokes) to replay"),
    mode: str = typer.Option("emulated", help="emulated (latency profiles) or real (this CPU)"),
    no_templates: bool = typer.Option(False, "--no-templates", help="add the ablation"),
    json_file: Path | None = typer.Option(None, "--json", help="write the report here"),
    plot: Path | None = typer.Option(None, help="latency CDF PNG (default: beside --json)"),
    budget_ms: float = typer.Option(150.0, "--budget-ms", min=5.0),
    concurrency: int = typer.Option(64, min=1, help="typists replaying sessions at once"),
    accuracy: bool = typer.Option(True, help="measure top-3 accuracy on held-out prefixes"),
    judge: bool = typer.Option(True, help="--no-judge: the engine without its judge"),
    semantic: bool = typer.Option(True, help="--no-semantic: without the semantic check"),
) -> None:
    """Replay typing sessions: all-cloud baseline vs the gate (the article's table)."""
    from rtgate.apps.autocomplete.bench import run

    if mode not in ("emulated", "real"):
        raise typer.BadParameter("mode is emulated or real")
    if plot is None and json_file is not None:
        plot = json_file.with_suffix(".png")
    report = run(
        n,
        mode="real" if mode == "real" else "emulated",
        no_templates=no_templates,
        budget_ms=budget_ms,
        concurrency=concurrency,
        with_accuracy=accuracy,
        plot=plot,
        judge=judge,
        semantic=semantic,
    )
    _table(report)
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
        console.print(f"[dim]wrote {json_file}[/dim]")


@bench_app.command("abstention")
def bench_abstention(
    sets: str | None = typer.Option(
        None,
        "--sets",
        help="ask sets, comma-separated: tune, train2, train3, val, val2, val3, eval, eval2, "
        "eval3, eval4, eval5, eval6, eval7, eval8, eval9, eval10, or paths "
        "(default: tune,eval, or none with --asks)",
    ),
    asks: list[Path] = typer.Option(
        [], "--asks", help="a JSON Lines file of asks to measure too (repeatable)"
    ),
    json_file: Path | None = typer.Option(None, "--json", help="write the report here"),
    budget_ms: float = typer.Option(150.0, "--budget-ms", min=5.0),
    judge: bool = typer.Option(True, help="--no-judge: the engine without its judge"),
    semantic: bool = typer.Option(True, help="--no-semantic: without the semantic check"),
    plot: Path | None = typer.Option(None, help="reliability diagram PNG (default: beside --json)"),
    per_ask: bool = typer.Option(
        False, "--per-ask", help="each ask's outcome in the JSON (cause, first cloud prefix)"
    ),
    reads: str | None = typer.Option(
        None,
        "--reads",
        help="what the judge, the semantic check and the complex decline read of a prefix, "
        "comma-separated: text (all of it), view (its request view), view_whole "
        "(default: the engine's)",
    ),
    point: str = typer.Option(
        "files",
        "--point",
        help="the judge's thresholds and the semantic check's bars: files (the default, "
        "multi-part and out-of-domain asks first) or maxmin (session 15's point)",
    ),
) -> None:
    """Multi-part / out-of-domain asks sent to the big model, simple asks kept fast, top-3
    intent and calibration, per ask set (typed as the replay types them)."""
    from rtgate.apps.autocomplete.abstention import run_sets
    from rtgate.core.errors import ConfigError, InvalidRequest

    chosen = sets if sets is not None else ("" if asks else "tune,eval")
    names = [s.strip() for s in chosen.split(",") if s.strip()] + [str(p) for p in asks]
    try:
        read = tuple(r.strip() for r in reads.split(",")) if reads else None
        if read is not None and len(read) != 3:
            raise ConfigError("--reads takes three readings: judge, check, decline")
        report = run_sets(
            names, budget_ms=budget_ms, judge=judge, semantic=semantic, per_ask=per_ask,
            reads=read, point=point,
        )  # fmt: skip
    except (InvalidRequest, ConfigError) as e:
        console.print(f"[red]invalid request:[/red] {e}")
        raise typer.Exit(2) from e
    for name, r in report.items():
        a = r["all"]
        cal = r.get("calibration", {})
        console.print(
            f"[bold]{name}[/bold] ({r['n_asks']} asks): complex delegated "
            f"{a['complex_delegated']:.1%} (multi {a['multi']['delegated']:.1%}, ood "
            f"{a['ood']['delegated']:.1%}), simple kept fast {a['simple_fast']:.1%}, simple "
            f"top-3 {r['simple_top3']:.1%}, ECE {cal.get('ece', float('nan')):.3f}, p99 "
            f"{r['p99_ms']:.1f} ms, over budget {r['over_budget']}"
        )
        for lang in ("zh", "en"):
            b = r[lang]
            why = ", ".join(f"{k} {v}" for k, v in b["by_cause"]["simple"].items()) or "none"
            console.print(
                f"  {lang}: complex delegated {b['complex_delegated']:.1%}, simple kept fast "
                f"{b['simple_fast']:.1%} ({b['simple']['n']}); simple delegated by: {why}"
            )
    if plot is None and json_file is not None:
        plot = json_file.with_suffix(".png")
    bins = {n: r["calibration"]["reliability"] for n, r in report.items() if "calibration" in r}
    if plot is not None and bins:
        from rtgate.bench.plots import reliability_diagram

        reliability_diagram(bins, plot, title="Can the fast path answer this? (per prefix)")
        console.print(f"[dim]wrote {plot}[/dim]")
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
        console.print(f"[dim]wrote {json_file}[/dim]")


def _table(r: dict[str, Any]) -> None:
    table = Table(title=f"rtgate bench autocomplete ({r['meta']['mode']}, n={r['n']})")
    table.add_column("")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("over budget", justify="right")
    table.add_column("share", justify="left")
    b = r["baseline_all_cloud"]
    table.add_row("all cloud (emulated 70B)", f"{b['p50_ms']:.1f}", f"{b['p99_ms']:.1f}", "", "")
    for key in ("gate", "no_templates"):
        if key in r:
            g = r[key]
            share = ", ".join(f"{k} {v:.1%}" for k, v in g["share"].items() if v)
            table.add_row(key.replace("_", " "), f"{g['p50_ms']:.2f}", f"{g['p99_ms']:.1f}",
                          str(g["over_budget"]), share)  # fmt: skip
    console.print(table)
    acc = r.get("accuracy")
    if acc:
        langs = ", ".join(
            f"{lang} {b['top3']:.1%} of {b['n_prefixes']}" for lang, b in acc["by_lang"].items()
        )
        console.print(
            f"top-3 intent accuracy: {acc['top3']:.1%} of {acc['n_prefixes']} held-out prefixes"
            f" ({langs}; {acc['n_queries']} queries)"
            f" (typed replay: {acc['typed']['top3']:.1%} of {acc['typed']['n_prefixes']})"
        )
    console.print(f"goals met: {r['meta']['met']}")

"""The ``rtgate`` command line: serve, demo, bench and the scenario verbs.

Scenario modules keep heavy imports (models, torch, onnxruntime) inside their commands, so
``rtgate --help`` stays fast.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="rtgate",
    no_args_is_help=True,
    add_completion=False,
    help="A latency-budget gate that makes language models feel real-time.",
)
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: a table on screen, JSON out.")
app.add_typer(bench_app, name="bench")
console = Console()

# (module, attribute, where): typer apps contributed by the subsystems. `where` is "root" to
# add their commands at the top level, "bench" under `rtgate bench`, or a group name.
_PLUGINS: list[tuple[str, str, str]] = [
    ("rtgate.server.cli", "app", "root"),
    ("rtgate.bench.http", "app", "bench"),
    ("rtgate.bench.tiers_cli", "app", "bench"),
    ("rtgate.apps.npc.cli", "app", "root"),
    ("rtgate.apps.npc.cli", "bench_app", "bench"),
    ("rtgate.fakellm.cli", "app", "root"),
    ("rtgate.bench.faults", "app", "bench"),
    ("rtgate.security.cli", "app", "keys"),
    ("rtgate.delegate.worker_cli", "app", "root"),
    ("rtgate.bench.delegation", "bench_app", "bench"),
    ("rtgate.bench.fast_tiers", "app", "bench"),
    ("rtgate.apps.autocomplete.intents_cli", "app", "intents"),
    ("rtgate.apps.guard.cli", "app", "guard"),
    ("rtgate.apps.guard.bench", "bench_app", "bench"),
    ("rtgate.apps.autocomplete.cli", "app", "root"),
    ("rtgate.apps.autocomplete.cli", "bench_app", "bench"),
    ("rtgate.apps.voice.cli", "app", "voice"),
    ("rtgate.apps.voice.cli", "bench_app", "bench"),
]


def write_json(report: dict[str, object], path: Path | None) -> None:
    """Write a benchmark report, creating the folder, and say where."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(f"[dim]wrote {path}[/dim]")


def show_table(title: str, rows: list[tuple[str, str]]) -> None:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


@bench_app.command("gate")
def bench_gate(
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    n: int = typer.Option(20_000, help="timed calls per measurement"),
) -> None:
    """The gate's own cost on one core: tier decision and a template-hit request."""
    from rtgate.bench.gate import run

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
            f"{report['template_hit_p99_us']:.1f} µs (goal ≤ 200)",
        ),
        ("event loop", str(report["event_loop"])),
    ]
    show_table("rtgate bench gate", rows)
    write_json(report, json_out)


@app.command()
def demo(
    out: Path = typer.Option(Path("out/demo"), help="folder for report.html and plots"),
    only: list[str] | None = typer.Option(None, help="run only these scenarios"),
) -> None:
    """Run every scenario end to end on embedded defaults; print a summary, write a report."""
    from rtgate.demo import run_demo

    if not run_demo(out, only=only, console=console):
        raise typer.Exit(1)


def _mount() -> None:
    for module, attr, where in _PLUGINS:
        sub = getattr(importlib.import_module(module), attr)
        if where == "root":
            for cmd in sub.registered_commands:
                app.registered_commands.append(cmd)
            for grp in sub.registered_groups:
                app.registered_groups.append(grp)
        elif where == "bench":
            for cmd in sub.registered_commands:
                bench_app.registered_commands.append(cmd)
        else:
            app.add_typer(sub, name=where)


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()

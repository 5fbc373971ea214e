"""The ``rtgate`` command: every command group, mounted by plain imports.

This is the top floor: it is the one module that sees the server, the benchmarks and every
application, and adds their typer apps to one command line. Modules keep their heavy imports
(models, torch, onnxruntime) inside their commands, so ``rtgate --help`` stays fast.
``python -m rtgate`` runs it too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from rtgate.apps.autocomplete import cli as autocomplete_cli
from rtgate.apps.autocomplete import intents_cli
from rtgate.apps.guard import bench as guard_bench
from rtgate.apps.guard import cli as guard_cli
from rtgate.apps.npc import cli as npc_cli
from rtgate.apps.voice import cli as voice_cli
from rtgate.backends import native_log
from rtgate.bench import burst as bench_burst
from rtgate.bench import delegation as bench_delegation
from rtgate.bench import fast_tiers as bench_fast_tiers
from rtgate.bench import faults as bench_faults
from rtgate.bench import gate_cost as bench_gate_cost
from rtgate.bench import http as bench_http
from rtgate.bench import proxy as bench_proxy
from rtgate.bench import proxy_scale as bench_proxy_scale
from rtgate.bench import tier_latency_cli as bench_tier_latency
from rtgate.cli import fakellm as fakellm_cli
from rtgate.cli import keys as keys_cli
from rtgate.cli import serve as serve_cli
from rtgate.cli import worker as worker_cli
from rtgate.cli.output import console
from rtgate.core.errors import ConfigError, InvalidRequest, RtgateError
from rtgate.demo.runner import DemoSection, run_demo

__all__ = ["app", "main"]

app = typer.Typer(
    name="rtgate",
    no_args_is_help=True,
    add_completion=False,
    help="A latency-budget gate that makes language models feel real-time.",
)
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: a table on screen, JSON out.")
app.add_typer(bench_app, name="bench")

# commands added at the top level, under `rtgate bench`, and as named groups
_ROOT: tuple[typer.Typer, ...] = (
    serve_cli.app,
    npc_cli.app,
    fakellm_cli.app,
    worker_cli.app,
    autocomplete_cli.app,
)
_BENCH: tuple[typer.Typer, ...] = (
    bench_gate_cost.app,
    bench_http.app,
    bench_burst.app,
    bench_proxy.app,
    bench_proxy_scale.app,
    bench_tier_latency.app,
    npc_cli.bench_app,
    bench_faults.app,
    bench_delegation.bench_app,
    bench_fast_tiers.app,
    guard_bench.bench_app,
    autocomplete_cli.bench_app,
    voice_cli.bench_app,
)
_GROUPS: tuple[tuple[str, typer.Typer], ...] = (
    ("keys", keys_cli.app),
    ("intents", intents_cli.app),
    ("guard", guard_cli.app),
    ("voice", voice_cli.app),
)


def _gate_scenario(out: Path) -> DemoSection:
    from rtgate.demo.gate_scenario import gate_demo

    return gate_demo(out)


def _autocomplete_scenario(out: Path) -> DemoSection:
    from rtgate.apps.autocomplete.demo import demo as run

    return run(out)


def _guard_scenario(out: Path) -> DemoSection:
    from rtgate.apps.guard.demo import demo as run

    return run(out)


def _voice_scenario(out: Path) -> DemoSection:
    from rtgate.apps.voice.demo import demo as run

    return run(out)


def _npc_scenario(out: Path) -> DemoSection:
    from rtgate.apps.npc.demo import demo as run

    return run(out)


SCENARIOS = (
    ("gate", _gate_scenario),
    ("autocomplete", _autocomplete_scenario),
    ("guard", _guard_scenario),
    ("voice", _voice_scenario),
    ("npc", _npc_scenario),
)


@app.command()
def demo(
    out: Path = typer.Option(Path("out/demo"), help="folder for report.html and plots"),
    only: list[str] | None = typer.Option(None, help="run only these scenarios"),
    verbose: bool = typer.Option(
        False, "--verbose", help="show llama.cpp's own log lines (default: OUT/native.log)"
    ),
) -> None:
    """Run every scenario end to end on embedded defaults; print a summary, write a report."""
    out.mkdir(parents=True, exist_ok=True)
    native = "stderr" if verbose else str((out / "native.log").resolve())
    os.environ.setdefault(native_log.ENV, native)  # children (the guard's explainer) inherit it
    ok = run_demo(out, SCENARIOS, only=only, console=console)
    if not verbose:
        console.print(f"[dim]llama.cpp's own log lines: {native} (--verbose shows them)[/dim]")
    if not ok:
        raise typer.Exit(1)


def _mount() -> None:
    for sub in _ROOT:
        app.registered_commands.extend(sub.registered_commands)
        app.registered_groups.extend(sub.registered_groups)
    for sub in _BENCH:
        bench_app.registered_commands.extend(sub.registered_commands)
    for name, sub in _GROUPS:
        app.add_typer(sub, name=name)


_mount()


def main() -> None:
    """Run the command line. Bad input (``InvalidRequest``, ``ConfigError``) is one line on
    stderr and exit 2; any other rtgate error is one line and exit 1. Only a bug (an
    exception rtgate does not define) shows a traceback."""
    try:
        app()
    except (InvalidRequest, ConfigError) as e:
        print(f"rtgate: error: {e}", file=sys.stderr)
        sys.exit(2)
    except RtgateError as e:
        print(f"rtgate: {e.code}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

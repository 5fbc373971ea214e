"""`rtgate demo`: every scenario end to end on embedded defaults, one summary, one report.

Each scenario contributes a function ``demo(out_dir: Path) -> DemoSection``; this module
runs them in turn under a progress display, prints a summary table and writes
``report.html`` with each section's rows and latency plots (PNG, matplotlib).
"""

from __future__ import annotations

import html
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = ["DemoSection", "Scenario", "run_demo"]


@dataclass(slots=True)
class DemoSection:
    """What one scenario shows: headline rows, plots (paths in the report folder), notes."""

    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    notes: str = ""
    ok: bool = True
    seconds: float = 0.0


Scenario = tuple[str, Callable[[Path], DemoSection]]
"""A scenario's name and the function that runs it into a folder."""


def run_demo(
    out_dir: Path,
    scenarios: Sequence[Scenario],
    only: list[str] | None = None,
    console: Console | None = None,
) -> bool:
    """Run the scenarios; write ``out_dir/report.html``. True when every one succeeded."""
    console = console or Console()
    out_dir.mkdir(parents=True, exist_ok=True)
    sections: list[DemoSection] = []
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    )
    with progress:
        for name, run in scenarios:
            if only and name not in only:
                continue
            task = progress.add_task(f"{name}…", total=None)
            t0 = time.perf_counter()
            try:
                section = run(out_dir)
            except Exception as e:
                section = DemoSection(name, ok=False, notes=f"{type(e).__name__}: {e}")
                console.print(f"[red]{name} failed[/red]\n{traceback.format_exc()}")
            section.seconds = time.perf_counter() - t0
            sections.append(section)
            progress.update(
                task, description=f"{name} ({section.seconds:.1f} s)", completed=1, total=1
            )
    for s in sections:
        table = Table(title=f"{s.title} ({'ok' if s.ok else 'FAILED'}, {s.seconds:.1f} s)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for k, v in s.rows:
            table.add_row(k, v)
        console.print(table)
        if s.notes:
            console.print(f"[dim]{s.notes}[/dim]")
    report = out_dir / "report.html"
    report.write_text(_html(sections), encoding="utf-8")
    console.print(f"report: {report}")
    return all(s.ok for s in sections)


def _html(sections: list[DemoSection]) -> str:
    parts = [
        "<!doctype html><meta charset='utf-8'><title>rtgate demo</title>",
        "<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}"
        "table{border-collapse:collapse}td{border:1px solid #ccc;padding:4px 8px}"
        "img{max-width:100%}</style><h1>rtgate demo</h1>",
    ]
    for s in sections:
        status = "ok" if s.ok else "FAILED"
        parts.append(
            f"<h2>{html.escape(s.title)} <small>({status}, {s.seconds:.1f} s)</small></h2>"
        )
        parts.append("<table>")
        for k, v in s.rows:
            parts.append(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>")
        parts.append("</table>")
        if s.notes:
            parts.append(f"<p>{html.escape(s.notes)}</p>")
        for fig in s.figures:
            parts.append(
                f"<p><img src='{html.escape(fig.name)}' alt='{html.escape(fig.stem)}'></p>"
            )
    return "\n".join(parts)

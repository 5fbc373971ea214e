"""What every command prints: a table on screen, a JSON report on disk."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

__all__ = ["console", "show_table", "write_json"]

console = Console()


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

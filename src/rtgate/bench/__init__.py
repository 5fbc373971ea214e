"""Benchmarks: one run(...) -> dict per module and a typer command."""

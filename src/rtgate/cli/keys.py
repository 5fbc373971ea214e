"""``rtgate keys``: issue, list and revoke API keys in a key store file.

The pepper comes from ``$RTGATE_KEY_PEPPER`` (the same value the server uses). A new key is
printed once; the store keeps only its HMAC digest.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rtgate.core.errors import ConfigError
from rtgate.security.keys import KeyPolicy, KeyStore

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Manage API keys.")
console = Console()

STORE = typer.Option(Path("rtgate-keys.json"), "--store", help="the key store file")


def _open(store: Path, create: bool = False) -> KeyStore:
    try:
        if create and not store.exists():
            return KeyStore()
        return KeyStore.load(store)
    except ConfigError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        raise typer.Exit(2) from None


@app.command()
def create(
    name: str = typer.Option(..., help="who the key is for"),
    store: Path = STORE,
    rate: float = typer.Option(10.0, help="requests per second (token bucket refill)"),
    burst: int = typer.Option(20, help="requests allowed at once"),
    max_budget_ms: float | None = typer.Option(None, help="largest budget_ms allowed"),
    max_tokens: int | None = typer.Option(None, help="largest max_tokens allowed"),
) -> None:
    """Issue a key and print it (the only time it is shown)."""
    keys = _open(store, create=True)
    try:
        policy = KeyPolicy(rate, burst, max_budget_ms, max_tokens)
    except ConfigError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        raise typer.Exit(2) from None
    key, rec = keys.create(name, policy)
    keys.save(store)
    console.print(f"key id {rec.key_id} for {name!r} saved in {store}")
    typer.echo(key)


@app.command("list")
def list_keys(store: Path = STORE) -> None:
    """Key ids, names, limits and state (never the keys)."""
    table = Table("key id", "name", "rate/s", "burst", "max budget ms", "max tokens", "state")
    for r in _open(store).records():
        p = r.policy
        table.add_row(
            r.key_id,
            r.name,
            f"{p.rate_per_s:g}",
            str(p.burst),
            "-" if p.max_budget_ms is None else f"{p.max_budget_ms:g}",
            "-" if p.max_tokens is None else str(p.max_tokens),
            "revoked" if r.disabled else "active",
        )
    console.print(table)


@app.command()
def revoke(
    key_id: str = typer.Argument(..., help="the key id to disable"), store: Path = STORE
) -> None:
    """Disable a key (its record stays, marked revoked)."""
    keys = _open(store)
    if not keys.revoke(key_id):
        console.print(f"[bold red]error:[/] no key with id {key_id!r}", highlight=False)
        raise typer.Exit(1)
    keys.save(store)
    console.print(f"revoked {key_id}")

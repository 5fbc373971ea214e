"""``python -m rtgate.bench.faults_serve --config FILE``: ``rtgate serve`` with resilience.

The same server as ``rtgate serve`` (same assembly, app and uvicorn settings), with the
tiers wrapped before it starts: the local model behind a concurrency cap (shed past it),
the cloud tier behind a cap, a circuit breaker with a background health probe, and a
budget-aware retry. ``rtgate bench faults --resilient`` runs this instead of the plain
server, to compare; once the server config grows a resilience section it is not needed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from rtgate.resilience.breaker import BreakerConfig
from rtgate.resilience.wire import TierPolicy, apply_policies

app = typer.Typer(add_completion=False)


@app.command()
def serve(
    config: Path = typer.Option(..., "--config", help="the server's TOML file"),
    local_capacity: int = typer.Option(1, help="local model streams in flight (then shed)"),
    cloud_capacity: int = typer.Option(32, help="cloud streams in flight (then shed)"),
    cloud_retries: int = typer.Option(2, help="tries per cloud call (1: no retry)"),
    breaker: bool = typer.Option(True, help="circuit breaker on the cloud tier"),
) -> None:
    """Serve with resilience policies applied to the assembled gate."""
    import uvicorn

    from rtgate.assemble import assemble
    from rtgate.config import load_config
    from rtgate.server.app import create_app
    from rtgate.server.cli import uvicorn_config

    cfg = load_config(config)
    logging.basicConfig(level=cfg.server.log_level.upper())
    asm = assemble(cfg)
    names = set(asm.gate.by_name)
    shared = "llama" if asm.cloud_mode == "emulated" else None
    policies: dict[str, TierPolicy] = {}
    if "local" in names:
        policies["local"] = TierPolicy(capacity=local_capacity, group="llama")
    if "cloud" in names:
        policies["cloud"] = TierPolicy(
            capacity=local_capacity if shared else cloud_capacity,
            group=shared,
            breaker=BreakerConfig(min_calls=10, failure_rate=0.5, open_s=2.0, max_open_s=30.0)
            if breaker
            else None,
            probe=breaker and not shared,
            retries=cloud_retries,
        )
    apply_policies(asm.gate, policies)
    application = create_app(cfg, assembly=asm, freeze_gc=True)
    uvicorn.Server(uvicorn_config(cfg, application)).run()


if __name__ == "__main__":
    app()

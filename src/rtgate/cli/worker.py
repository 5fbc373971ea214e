"""``rtgate worker``: run delegated jobs apart from the gate, from a Redis or NATS queue.

The worker builds its tiers either from the rtgate config (``--config FILE``: the same
file the gate replicas use; only *delegable* tiers are kept) or from a factory
``--tiers module:function`` that returns tiers (it is passed the config path, or ``None``).
Broker settings come from the config's ``[delegation]`` table when the config has one,
overridden by the flags. SIGTERM or Ctrl-C stops taking jobs and gives running ones
``--grace-s`` to finish; what is still running then is left unacknowledged, and another
worker runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import logging
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer

from rtgate.core.errors import ConfigError
from rtgate.delegate.broker import BrokerQueue
from rtgate.delegate.factory import DelegationSettings, make_broker_queue
from rtgate.gate.job_runner import TierRunner
from rtgate.tiers.base import Tier

__all__ = ["app", "load_tiers", "run_worker"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Delegated-job workers.")
log = logging.getLogger("rtgate.worker")


@app.callback()
def _group() -> None:
    """Delegated-job workers."""


def load_tiers(spec: str | None, config: Path | None) -> list[Tier]:
    """Tiers from a ``module:function`` factory, else the delegable tiers of the config."""
    if spec:
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ConfigError(f"--tiers must be 'module:function', got {spec!r}")
        factory = getattr(importlib.import_module(module), attr)
        takes_arg = bool(inspect.signature(factory).parameters)
        made: Iterable[Tier] = factory(str(config) if config else None) if takes_arg else factory()
        return list(made)
    from rtgate.assembly.build import build_gate
    from rtgate.config.loader import load_config

    gate = build_gate(load_config(config))
    tiers = [t for t in gate.tiers if t.delegable]
    if not tiers:
        raise ConfigError("the config has no delegable tier for a worker to run")
    return tiers


def _settings(config: Path | None, overrides: dict[str, Any]) -> DelegationSettings:
    base: dict[str, Any] = {}
    if config is not None:
        from rtgate.config.loader import load_config

        section = getattr(load_config(config), "delegation", None)
        if section is not None:
            base = dataclasses.asdict(DelegationSettings.of(section))
    base.update({k: v for k, v in overrides.items() if v is not None})
    return DelegationSettings.of(base)


async def run_worker(
    settings: DelegationSettings,
    tiers: list[Tier],
    *,
    stop: asyncio.Event,
    grace_s: float = 10.0,
    share_latency: bool = True,
    warmup: bool = False,
) -> BrokerQueue:
    """Take jobs until ``stop`` is set; returns the (closed) queue with its ``stats``."""
    if settings.backend == "inprocess":
        raise ConfigError("a worker needs a broker: delegation.backend = 'redis' or 'nats'")
    runner = TierRunner(tiers)
    if warmup:
        await runner.warmup()
    queue = make_broker_queue(settings, consume=True)
    share = None
    sharing: asyncio.Task[None] | None = None
    try:
        if share_latency and settings.backend == "redis":
            from rtgate.delegate.warm import SharedLatency

            share = SharedLatency(
                settings.broker_url, prefix=settings.prefix, replica=queue.replica
            )
            await share.load(runner.models)
            sharing = asyncio.create_task(share.run(runner.models))
        await queue.start(runner)
        names = ", ".join(getattr(t, "label", t.name) for t in tiers)
        print(
            f"rtgate worker {queue.replica} ready: {settings.backend} {settings.broker_url} "
            f"prefix {settings.prefix!r}, {settings.concurrency} at a time, tiers: {names}",
            flush=True,
        )
        await stop.wait()
    finally:
        await queue.drain(grace_s)
        await queue.aclose()
        if sharing is not None:
            sharing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sharing
        if share is not None:
            await share.aclose()
        await runner.aclose()
    return queue


@app.command("worker")
def worker(
    broker: str | None = typer.Option(None, "--broker", help="redis | nats"),
    url: str | None = typer.Option(None, "--url", help="broker URL (default: local server)"),
    config: Path | None = typer.Option(None, "--config", help="the rtgate config file"),
    tiers: str | None = typer.Option(None, "--tiers", help="tier factory 'module:function'"),
    prefix: str | None = typer.Option(None, "--prefix", help="queue name prefix"),
    concurrency: int | None = typer.Option(None, "--concurrency", help="jobs at once"),
    redeliver_after_s: float | None = typer.Option(
        None, "--redeliver-after-s", help="a job silent this long is given to another worker"
    ),
    grace_s: float = typer.Option(10.0, "--grace-s", help="time running jobs get at stop"),
    share_latency: bool = typer.Option(True, help="share learned latency through Redis"),
    warmup: bool = typer.Option(False, help="load and probe the tiers before taking jobs"),
) -> None:
    """Run delegated jobs (the slow tier) from a Redis Streams or NATS JetStream queue."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = _settings(
            config,
            {
                "backend": broker,
                "url": url,
                "prefix": prefix,
                "concurrency": concurrency,
                "redeliver_after_s": redeliver_after_s,
            },
        )
        if settings.backend == "inprocess":
            settings = dataclasses.replace(settings, backend="redis")
        made = load_tiers(tiers, config)
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        q = await run_worker(
            settings, made, stop=stop, grace_s=grace_s, share_latency=share_latency, warmup=warmup
        )
        print(f"rtgate worker {q.replica} stopped: {q.stats}", file=sys.stderr, flush=True)

    try:
        asyncio.run(main())
    except (OSError, ConnectionError) as e:
        raise _unreachable(settings, e) from None
    except Exception as e:
        if type(e).__module__.split(".")[0] not in ("redis", "nats"):
            raise
        raise _unreachable(settings, e) from None


def _unreachable(settings: DelegationSettings, e: Exception) -> typer.Exit:
    typer.echo(f"error: {settings.backend} at {settings.broker_url}: {e}", err=True)
    return typer.Exit(1)


if __name__ == "__main__":
    app()

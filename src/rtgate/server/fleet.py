"""What a gate replica shares with the rest of its fleet: the learned latencies.

With ``[delegation] backend = "redis"`` and ``share_latency`` (the default), a replica
replays the fleet's latency summaries into its still-empty models when it starts, before
warm-up (:class:`~rtgate.delegate.warm.SharedLatency`), so its first choices match the
fleet's, and publishes its own every ``latency_every_s`` from one background task that
stops with the app, then saves once more. A Redis that is down costs a warning, not the
start-up: loading waits at most ``LOAD_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from rtgate.config.loader import Config
from rtgate.gate import Gate

if TYPE_CHECKING:  # redis is imported only when latency is shared
    from rtgate.delegate.warm import SharedLatency

__all__ = ["LOAD_TIMEOUT_S", "STOP_TIMEOUT_S", "shared_latency"]

log = logging.getLogger("rtgate.server")

LOAD_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 2.0


@asynccontextmanager
async def shared_latency(config: Config, gate: Gate) -> AsyncIterator[dict[str, Any]]:
    """Load, then keep publishing, while the context is open. Yields a status for
    ``/healthz``: ``{"enabled", "loaded": {tier: samples}, "error"?}``."""
    d = config.delegation
    if d.backend != "redis" or not d.share_latency:
        yield {"enabled": False}
        return
    from rtgate.delegate.warm import SharedLatency

    shared = SharedLatency(d.broker_url, prefix=d.prefix, replica=gate.replica)
    status: dict[str, Any] = {"enabled": True, "loaded": {}}
    try:
        try:
            async with asyncio.timeout(LOAD_TIMEOUT_S):
                status["loaded"] = await shared.load(gate.latency_models())
        except Exception as e:  # TimeoutError too: start cold rather than not at all
            status["error"] = f"{type(e).__name__}: {e}"
            log.warning("shared latency not loaded (%s); starting cold", status["error"])
        else:
            if status["loaded"]:
                log.info("shared latency loaded: %s samples", status["loaded"])
        task = asyncio.create_task(
            _publish(shared, gate, d.latency_every_s), name="rtgate-shared-latency"
        )
        try:
            yield status
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            try:  # the last save, here: a task cancelled before it ran has no finally
                async with asyncio.timeout(STOP_TIMEOUT_S):
                    await shared.save(gate.latency_models())
            except Exception as e:
                log.warning("shared latency: last save failed: %s", e)
    finally:
        await shared.aclose()


async def _publish(shared: SharedLatency, gate: Gate, every_s: float) -> None:
    """Save every ``every_s`` until cancelled; a failed save is retried at the next."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await shared.save(gate.latency_models())
        except Exception as e:
            log.warning("shared latency not saved: %s", e)

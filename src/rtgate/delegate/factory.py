"""Choosing the job queue by configuration: in-process (one machine), Redis or NATS.

::

    [delegation]
    backend = "redis"                 # "inprocess" (default) | "redis" | "nats"
    url = "redis://10.0.0.5:6379/0"   # default: the local server of that broker
    prefix = "rtgate"                 # keys / stream names; one prefix per queue
    queue_size = 1024                 # jobs waiting or running; beyond it: refused
    redeliver_after_s = 30            # a job silent this long belongs to a dead worker
    share_latency = true              # redis: replicas load and publish learned latencies

A gate replica and the workers of one deployment use the same ``backend``, ``url`` and
``prefix``. The gate side builds its queue with :func:`make_queue` and hands the queue's
store to the gate::

    store = JobStore()
    gate = Gate(tiers, queue=make_queue(settings, store), store=store)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from rtgate.core.errors import ConfigError
from rtgate.delegate.broker import BrokerQueue
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.gate.jobs import JobQueue, JobStore

__all__ = ["DEFAULT_URLS", "Backend", "DelegationSettings", "make_broker_queue", "make_queue"]

Backend = Literal["inprocess", "redis", "nats"]
DEFAULT_URLS = {"redis": "redis://127.0.0.1:6379/0", "nats": "nats://127.0.0.1:4222"}


@dataclass(slots=True)
class DelegationSettings:
    """Where delegated jobs go. ``workers`` applies to the in-process queue only,
    ``concurrency`` to a worker process (jobs it runs at once), ``nats_replicas`` to a
    JetStream cluster (copies of the stream and bucket). With Redis and ``share_latency``,
    a gate replica loads the fleet's learned latencies at start-up and publishes its own
    every ``latency_every_s`` (:class:`~rtgate.delegate.warm.SharedLatency`)."""

    backend: Backend = "inprocess"
    url: str | None = None
    prefix: str = "rtgate"
    queue_size: int = 1024
    workers: int = 2
    concurrency: int = 8
    result_ttl_s: float = 86_400.0
    redeliver_after_s: float = 30.0
    max_deliveries: int = 5
    poll_s: float = 1.0
    replica: str | None = None
    nats_replicas: int = 1
    share_latency: bool = True
    latency_every_s: float = 10.0

    def __post_init__(self) -> None:
        if self.backend not in ("inprocess", "redis", "nats"):
            raise ConfigError(
                f"delegation.backend must be inprocess, redis or nats; got {self.backend!r}"
            )
        for name in ("queue_size", "workers", "concurrency", "max_deliveries", "nats_replicas"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"delegation.{name} must be >= 1")
        for name in ("result_ttl_s", "redeliver_after_s", "poll_s", "latency_every_s"):
            if not float(getattr(self, name)) > 0:
                raise ConfigError(f"delegation.{name} must be > 0")

    @property
    def broker_url(self) -> str:
        return self.url or DEFAULT_URLS.get(self.backend, "")

    @classmethod
    def of(cls, source: DelegationSettings | Mapping[str, Any] | object) -> DelegationSettings:
        """Settings from a mapping (a TOML table) or an object with the same attributes."""
        if isinstance(source, DelegationSettings):
            return source
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(source, Mapping):
            unknown = sorted(set(source) - set(names))
            if unknown:
                raise ConfigError(f"[delegation]: unknown keys {unknown}; known: {names}")
            values = dict(source)
        else:
            values = {n: getattr(source, n) for n in names if hasattr(source, n)}
        return cls(**values)


def make_queue(
    settings: DelegationSettings | Mapping[str, Any] | object,
    store: JobStore | None = None,
    *,
    consume: bool = False,
) -> JobQueue:
    """The job queue ``settings`` describe. ``store`` must be the gate's own job store
    (results from a broker land there); ``consume=True`` makes a worker's queue."""
    s = DelegationSettings.of(settings)
    if s.backend == "inprocess":
        return InProcessQueue(s.queue_size, s.workers)
    return make_broker_queue(s, store, consume=consume)


def make_broker_queue(
    settings: DelegationSettings | Mapping[str, Any] | object,
    store: JobStore | None = None,
    *,
    consume: bool = False,
) -> BrokerQueue:
    """The Redis or NATS queue ``settings`` describe (a worker needs one: ``ConfigError``
    for ``backend = "inprocess"``). Arguments as for :func:`make_queue`."""
    s = DelegationSettings.of(settings)
    if s.backend == "inprocess":
        raise ConfigError("a broker queue needs delegation.backend = 'redis' or 'nats'")
    common: dict[str, Any] = {
        "maxsize": s.queue_size,
        "store": store,
        "consume": consume,
        "concurrency": s.concurrency,
        "replica": s.replica,
        "poll_s": s.poll_s,
        "max_deliveries": s.max_deliveries,
        "prefix": s.prefix,
    }
    if s.backend == "redis":
        from rtgate.delegate.redis_streams import RedisStreamsQueue

        return RedisStreamsQueue(
            s.broker_url,
            result_ttl_s=int(s.result_ttl_s),
            min_idle_ms=int(s.redeliver_after_s * 1000),
            **common,
        )
    from rtgate.delegate.jetstream import JetStreamQueue

    return cast(
        BrokerQueue,
        JetStreamQueue(
            s.broker_url,
            result_ttl_s=s.result_ttl_s,
            ack_wait_s=s.redeliver_after_s,
            num_replicas=s.nats_replicas,
            **common,
        ),
    )

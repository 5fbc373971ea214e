"""The driver of ``rtgate bench delegation``: the worker and gate-replica processes it
starts, talks to (one JSON line per event), kills and stops, and what it saw of each ask.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtgate.bench.replica import PROFILE_ENV
from rtgate.delegate.factory import DelegationSettings, make_queue

__all__ = ["Ask", "Driver", "Proc"]


@dataclass(slots=True)
class Proc:
    kind: str
    index: int
    proc: asyncio.subprocess.Process
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    ident: str = ""
    alive: bool = True
    stats: dict[str, Any] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


@dataclass(slots=True)
class Ask:
    sent: float
    replica: Proc
    job: str | None = None
    submitted: float | None = None
    refused: str | None = None
    delivered: list[tuple[str, str, float]] = field(default_factory=list)


class Driver:
    def __init__(self, settings: DelegationSettings, profile: str, concurrency: int) -> None:
        self.settings = settings
        self.profile = profile
        self.concurrency = concurrency
        self.asks: dict[int, Ask] = {}
        self.replicas: list[Proc] = []
        self.workers: list[Proc] = []
        self.answer_ms: list[float] = []
        self.retried = 0
        self.followed = 0
        self.progress = asyncio.Event()
        self.pending_on_killed: list[int] = []
        self.cpu: dict[str, float] = {}
        self._rr = 0

    async def spawn(self, kind: str, index: int) -> Proc:
        s = self.settings
        env = {**os.environ, PROFILE_ENV: self.profile}
        if kind == "worker":
            argv = ["-m", "rtgate.cli.worker", "worker", "--broker", s.backend]
            argv += ["--url", s.broker_url, "--prefix", s.prefix]
            argv += ["--tiers", "rtgate.bench.replica:bench_tiers", "--grace-s", "2"]
            argv += ["--concurrency", str(self.concurrency), "--no-share-latency"]
            argv += ["--redeliver-after-s", str(s.redeliver_after_s)]
        else:
            cfg: dict[str, Any] = {"backend": s.backend, "url": s.broker_url, "prefix": s.prefix}
            cfg |= {"queue_size": s.queue_size, "poll_s": s.poll_s}
            argv = ["-m", "rtgate.bench.replica", json.dumps(cfg)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            stdin=asyncio.subprocess.PIPE if kind == "replica" else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        p = Proc(kind, index, proc)
        p.reader = asyncio.create_task(self._read(p))
        (self.workers if kind == "worker" else self.replicas).append(p)
        return p

    async def _read(self, p: Proc) -> None:
        assert p.proc.stdout is not None
        while line := await p.proc.stdout.readline():
            text = line.decode(errors="replace").strip()
            if p.kind == "worker":
                if text.startswith("rtgate worker ") and " ready:" in text:
                    p.ident = text.split()[2]
                    p.ready.set()
                continue
            try:
                ev = json.loads(text)
            except ValueError:
                continue
            self._on_event(p, ev)
        p.alive = False
        self.progress.set()

    def _on_event(self, p: Proc, ev: dict[str, Any]) -> None:
        kind = ev.get("ev")
        if kind == "ready":
            p.ident = str(ev["replica"])
            p.ready.set()
            return
        if kind == "stats":
            p.stats = ev
            return
        ask = self.asks.get(int(ev.get("n", -1)))
        if ask is None:
            return
        now = time.perf_counter()
        if kind == "submitted":
            ask.job, ask.submitted = str(ev["job"]), now
            self.answer_ms.append(float(ev["answer_ms"]))
        elif kind == "refused":
            ask.refused = str(ev.get("error"))
        elif kind == "delivered":
            ask.delivered.append((str(ev["status"]), str(ev["text"]), now))
        self.progress.set()

    def live_replicas(self) -> list[Proc]:
        return [r for r in self.replicas if r.alive and r.proc.returncode is None]

    async def send(self, n: int, op: dict[str, Any], replica: Proc | None = None) -> Proc:
        live = self.live_replicas()
        if not live:
            raise RuntimeError("no gate replica is alive")
        if replica is None:
            self._rr += 1
            replica = live[self._rr % len(live)]
        assert replica.proc.stdin is not None
        replica.proc.stdin.write((json.dumps({"n": n, **op}) + "\n").encode())
        await replica.proc.stdin.drain()
        return replica

    async def ask(self, n: int) -> None:
        self.asks[n] = Ask(time.perf_counter(), self.live_replicas()[0])
        self.asks[n].replica = await self.send(n, {"op": "ask"})

    async def kill(self, p: Proc) -> None:
        if p.kind == "worker" and p.ident:
            self.pending_on_killed.append(await _in_flight(self.settings, p.ident))
        p.proc.send_signal(signal.SIGKILL)
        await p.proc.wait()
        if p.reader is not None:
            await p.reader
        p.alive = False
        if p.kind == "replica":
            await self._take_over(p)

    async def _take_over(self, dead: Proc) -> None:
        """The dead replica's callers reconnect elsewhere: follow their jobs by id, or
        ask again when they never got one."""
        for n, ask in list(self.asks.items()):
            if ask.replica is not dead or ask.delivered or ask.refused:
                continue
            if ask.job is not None:
                self.followed += 1
                ask.replica = await self.send(n, {"op": "follow", "job": ask.job})
            else:
                self.retried += 1
                ask.sent = time.perf_counter()
                ask.replica = await self.send(n, {"op": "ask"})

    def settled(self) -> bool:
        return all(a.refused is not None or a.delivered for a in self.asks.values())

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by the live replicas and workers (Linux /proc)."""
        out = {"replica": 0.0, "worker": 0.0, "driver": time.process_time()}
        tick = os.sysconf("SC_CLK_TCK")
        for p in [*self.replicas, *self.workers]:
            try:
                fields = Path(f"/proc/{p.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[p.kind] += (int(fields[11]) + int(fields[12])) / tick
        return out

    async def stop_all(self) -> None:
        self.cpu = self.cpu_s()
        for r in self.live_replicas():
            assert r.proc.stdin is not None
            r.proc.stdin.close()
        for w in self.workers:
            if w.proc.returncode is None:
                w.proc.send_signal(signal.SIGTERM)
        for p in [*self.replicas, *self.workers]:
            try:
                await asyncio.wait_for(p.proc.wait(), 10.0)
            except TimeoutError:
                p.proc.kill()
                await p.proc.wait()
            if p.reader is not None:
                await p.reader


async def _in_flight(settings: DelegationSettings, consumer: str) -> int:
    """Jobs handed out and not acknowledged: the worker's own on Redis, all workers' on
    NATS (JetStream does not say which pull request took a message)."""
    if settings.backend == "nats":
        from rtgate.delegate.jetstream import DURABLE, JetStreamQueue

        q = make_queue(settings)
        assert isinstance(q, JetStreamQueue)
        await q.connect()
        try:
            info = await q.js.consumer_info(q.stream, DURABLE)
            return int(info.num_ack_pending or 0)
        finally:
            await q.aclose()
    import redis.asyncio as aioredis

    r = aioredis.Redis.from_url(settings.broker_url, decode_responses=True)
    try:
        rows = await r.xpending_range(
            f"{settings.prefix}:jobs", "workers", "-", "+", 100_000, consumername=consumer
        )
        return len(rows)
    finally:
        await r.aclose()

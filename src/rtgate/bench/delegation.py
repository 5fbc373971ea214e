"""``rtgate bench delegation``: gate replicas and workers on a real broker, killed mid-run.

The driver starts ``workers`` worker processes (``rtgate worker``) and ``replicas`` gate
replicas (:mod:`rtgate.bench.replica`) on loopback against the local Redis (or NATS),
asks the replicas ``jobs`` questions at ``rate`` per second (round robin, as a load
balancer would), and with ``kill``: SIGKILLs worker 0 at 25 % of the asks, the last
replica at 50 % (its callers reconnect to another replica, which takes over their jobs by
id) and worker 1 at 60 %, starting a fresh worker in its place. Every job's result is
then read back from the broker and checked against its question.

Report: ``submitted`` jobs (the caller got a job id), ``completed`` (done, right text),
``lost`` (submitted, never finished), ``failed``, ``duplicated`` (delivered to the caller
more than once), ``killed``, plus throughput and latency. The workers' model is an
**emulation**: an echo tier behind an emulated latency profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from rtgate.bench.replica import PROFILE_ENV, PROFILES, expected_text
from rtgate.delegate.broker import BrokerQueue
from rtgate.delegate.factory import DelegationSettings, make_broker_queue, make_queue

__all__ = ["bench_app", "run"]

bench_app = typer.Typer(no_args_is_help=True)


@dataclass(slots=True)
class _Proc:
    kind: str
    index: int
    proc: asyncio.subprocess.Process
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    ident: str = ""
    alive: bool = True
    stats: dict[str, Any] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


@dataclass(slots=True)
class _Ask:
    sent: float
    replica: _Proc
    job: str | None = None
    submitted: float | None = None
    refused: str | None = None
    delivered: list[tuple[str, str, float]] = field(default_factory=list)


class _Driver:
    def __init__(self, settings: DelegationSettings, profile: str, concurrency: int) -> None:
        self.settings = settings
        self.profile = profile
        self.concurrency = concurrency
        self.asks: dict[int, _Ask] = {}
        self.replicas: list[_Proc] = []
        self.workers: list[_Proc] = []
        self.answer_ms: list[float] = []
        self.retried = 0
        self.followed = 0
        self.progress = asyncio.Event()
        self.pending_on_killed: list[int] = []
        self.cpu: dict[str, float] = {}
        self._rr = 0

    async def spawn(self, kind: str, index: int) -> _Proc:
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
        p = _Proc(kind, index, proc)
        p.reader = asyncio.create_task(self._read(p))
        (self.workers if kind == "worker" else self.replicas).append(p)
        return p

    async def _read(self, p: _Proc) -> None:
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

    def _on_event(self, p: _Proc, ev: dict[str, Any]) -> None:
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

    def live_replicas(self) -> list[_Proc]:
        return [r for r in self.replicas if r.alive and r.proc.returncode is None]

    async def send(self, n: int, op: dict[str, Any], replica: _Proc | None = None) -> _Proc:
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
        self.asks[n] = _Ask(time.perf_counter(), self.live_replicas()[0])
        self.asks[n].replica = await self.send(n, {"op": "ask"})

    async def kill(self, p: _Proc) -> None:
        if p.kind == "worker" and p.ident:
            self.pending_on_killed.append(await _in_flight(self.settings, p.ident))
        p.proc.send_signal(signal.SIGKILL)
        await p.proc.wait()
        if p.reader is not None:
            await p.reader
        p.alive = False
        if p.kind == "replica":
            await self._take_over(p)

    async def _take_over(self, dead: _Proc) -> None:
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


async def _cleanup(settings: DelegationSettings, queue: BrokerQueue) -> None:
    if settings.backend == "redis":
        from rtgate.delegate.redis_streams import RedisStreamsQueue

        assert isinstance(queue, RedisStreamsQueue)
        keys = [k async for k in queue.redis.scan_iter(f"{settings.prefix}:*", count=1000)]
        for i in range(0, len(keys), 500):
            await queue.redis.delete(*keys[i : i + 500])
    else:
        from rtgate.delegate.jetstream import JetStreamQueue

        assert isinstance(queue, JetStreamQueue)
        await queue.destroy()


async def _run(
    *,
    broker: str,
    url: str | None,
    jobs: int,
    replicas: int,
    workers: int,
    rate: float,
    kill: bool,
    profile: str,
    concurrency: int,
    redeliver_after_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    prefix = f"rtgate-bench-{os.urandom(3).hex()}"
    settings = DelegationSettings.of(
        {
            "backend": broker,
            "url": url,
            "prefix": prefix,
            "queue_size": max(1024, 2 * jobs),
            "redeliver_after_s": redeliver_after_s,
            "poll_s": 0.5,
        }
    )
    d = _Driver(settings, profile, concurrency)
    killed = {"workers": 0, "replicas": 0}
    started = time.perf_counter()
    try:
        await asyncio.gather(*(d.spawn("worker", i) for i in range(workers)))
        await asyncio.gather(*(d.spawn("replica", i) for i in range(replicas)))
        async with asyncio.timeout(60.0):
            await asyncio.gather(*(p.ready.wait() for p in [*d.workers, *d.replicas]))
        plan: dict[int, str] = {}
        if kill:
            plan = {jobs // 4: "worker0", jobs // 2: "replica", (jobs * 3) // 5: "worker1"}
        t0 = time.perf_counter()
        window = max(64, 64 * replicas)
        for n in range(jobs):
            if rate > 0:
                await asyncio.sleep(max(0.0, t0 + n / rate - time.perf_counter()))
            else:
                while sum(1 for a in d.asks.values() if a.job is None and not a.refused) >= window:
                    d.progress.clear()
                    await d.progress.wait()
            action = plan.get(n)
            if action == "worker0" and workers >= 1:
                await d.kill(d.workers[0])
                killed["workers"] += 1
            elif action == "worker1" and workers >= 2:
                await d.kill(d.workers[1])
                killed["workers"] += 1
                await d.spawn("worker", workers)
            elif action == "replica" and replicas >= 2:
                await d.kill(d.replicas[-1])
                killed["replicas"] += 1
            await d.ask(n)
        asked_s = time.perf_counter() - t0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(1.0, timeout_s - (time.perf_counter() - started))):
                while not d.settled():
                    d.progress.clear()
                    await d.progress.wait()
        wall_s = time.perf_counter() - t0
    finally:
        await d.stop_all()
    probe = make_broker_queue(settings)
    await probe.connect()
    try:
        subs = {n: a for n, a in d.asks.items() if a.job is not None}
        records = await probe.records([a.job for a in subs.values() if a.job])
        await _cleanup(settings, probe)
    finally:
        await probe.aclose()
    meta = {"broker": broker, "asks": jobs, "replicas": replicas, "workers": workers}
    return _report(d, subs, records, killed, meta, profile, asked_s, wall_s)


def _report(
    d: _Driver,
    subs: dict[int, _Ask],
    records: list[dict[str, Any] | None],
    killed: dict[str, int],
    run: dict[str, Any],
    profile: str,
    asked_s: float,
    wall_s: float,
) -> dict[str, Any]:
    completed = failed = wrong = reprocessed = 0
    for (n, _), rec in zip(subs.items(), records, strict=True):
        if rec is None or rec.get("status") not in ("done", "failed"):
            continue
        if rec["status"] == "failed":
            failed += 1
        elif rec.get("text") != expected_text(f"q{n}"):
            wrong += 1
        else:
            completed += 1
        reprocessed += int(rec.get("attempts") or 1) > 1
    deliveries = [len(a.delivered) for a in subs.values()]
    job_ms = [(a.delivered[0][2] - a.sent) * 1000.0 for a in subs.values() if a.delivered]
    mis = sum(1 for n, a in subs.items() if a.delivered and a.delivered[0][1] != f"answer to q{n}")
    p = PROFILES[profile]
    tpot = f", TPOT p50 {p.tpot.p50:g} ms" if p.tpot else ""
    jobs = int(run["asks"])
    return {
        "broker": run["broker"],
        "submitted": len(subs),
        "completed": completed,
        "lost": len(subs) - completed - failed - wrong,
        "duplicated": sum(1 for k in deliveries if k > 1),
        "killed": killed,
        "failed": failed,
        "wrong_answer": wrong + mis,
        "undelivered": sum(1 for k in deliveries if k == 0),
        "refused": sum(1 for a in d.asks.values() if a.job is None and a.refused is not None),
        "re_asked_after_replica_died": d.retried,
        "followed_on_another_replica": d.followed,
        "processed_more_than_once": reprocessed,
        "duplicates_suppressed": sum(int(r.stats.get("duplicates", 0)) for r in d.replicas),
        "in_flight_at_worker_kills": d.pending_on_killed,
        **run,
        "model": f"EMULATED: echo tier with the {p.name} profile "
        f"(TTFT p50 {p.ttft.p50:g} ms, p99 {p.ttft.p99:g} ms{tpot})",
        "redeliver_after_s": d.settings.redeliver_after_s,
        "asks_per_s": round(jobs / asked_s, 1) if asked_s else None,
        "jobs_per_s": round(completed / wall_s, 1) if wall_s else None,
        "wall_s": round(wall_s, 2),
        "answer_ms": _pcts(d.answer_ms),
        "job_ms": _pcts(job_ms),
        "cpu_ms_per_job": {k: round(v * 1000.0 / max(1, len(subs)), 3) for k, v in d.cpu.items()},
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
        "ok": completed == len(subs) and not any(k != 1 for k in deliveries),
    }


def _pcts(xs: list[float]) -> dict[str, float | None]:
    """p50, p99 (nearest rank) and max."""
    if not xs:
        return {"p50": None, "p99": None, "max": None}
    s = sorted(xs)

    def rank(q: float) -> float:
        return round(s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))], 2)

    return {"p50": rank(0.50), "p99": rank(0.99), "max": round(s[-1], 2)}


def run(
    *,
    broker: str = "redis",
    url: str | None = None,
    jobs: int = 400,
    replicas: int = 3,
    workers: int = 3,
    rate: float = 80.0,
    kill: bool = True,
    profile: str = "cloud-70b",
    concurrency: int = 48,
    redeliver_after_s: float = 2.0,
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Run the benchmark (bounded by ``timeout_s``) and return its report."""
    if broker not in ("redis", "nats") or profile not in PROFILES:
        raise ValueError(f"broker must be redis or nats, profile one of {sorted(PROFILES)}")
    if jobs < 1 or replicas < 1 or workers < 1:
        raise ValueError("jobs, replicas and workers must be >= 1")
    return asyncio.run(
        _run(
            broker=broker,
            url=url,
            jobs=jobs,
            replicas=replicas,
            workers=workers,
            rate=rate,
            kill=kill,
            profile=profile,
            concurrency=concurrency,
            redeliver_after_s=redeliver_after_s,
            timeout_s=timeout_s,
        )
    )


@bench_app.command("delegation")
def bench_delegation(
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    broker: str = typer.Option("redis", "--broker", help="redis | nats"),
    url: str | None = typer.Option(None, "--url", help="broker URL (default: local)"),
    jobs: int = typer.Option(400, help="questions asked (each delegates one job)"),
    replicas: int = typer.Option(3, help="gate replica processes"),
    workers: int = typer.Option(3, help="worker processes"),
    rate: float = typer.Option(80.0, help="asks per second; 0: as fast as replicas take them"),
    kill: bool = typer.Option(True, help="SIGKILL two workers and a replica mid-run"),
    profile: str = typer.Option("cloud-70b", help="emulated model: cloud-70b | fast-cloud"),
    concurrency: int = typer.Option(48, help="jobs each worker runs at once"),
    timeout_s: float = typer.Option(120.0, help="give up waiting after this long"),
) -> None:
    """Replicas and workers on Redis or NATS, killed mid-run: nothing lost, nothing twice."""
    from rtgate.cli.output import show_table, write_json

    report = run(
        broker=broker,
        url=url,
        jobs=jobs,
        replicas=replicas,
        workers=workers,
        rate=rate,
        kill=kill,
        profile=profile,
        concurrency=concurrency,
        timeout_s=timeout_s,
    )
    keys = ["submitted", "completed", "lost", "duplicated", "failed", "undelivered"]
    keys += ["processed_more_than_once", "duplicates_suppressed", "asks_per_s", "jobs_per_s"]
    rows = [(k, str(report[k])) for k in keys]
    rows += [("killed", json.dumps(report["killed"]))]
    for k in ("answer_ms", "job_ms"):
        rows.append((f"{k} p50 / p99", f"{report[k]['p50']} / {report[k]['p99']}"))
    rows += [("model", report["model"])]
    show_table(f"rtgate bench delegation ({broker})", rows)
    write_json(report, json_out)
    if not report["ok"]:
        raise typer.Exit(1)

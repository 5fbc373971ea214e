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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from rtgate.bench._delegation_driver import Ask, Driver
from rtgate.bench.replica import PROFILES, expected_text
from rtgate.delegate.broker import BrokerQueue
from rtgate.delegate.factory import DelegationSettings, make_broker_queue

__all__ = ["bench_app", "run"]

bench_app = typer.Typer(no_args_is_help=True)


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


def _bench_settings(
    broker: str, url: str | None, jobs: int, redeliver_after_s: float
) -> DelegationSettings:
    """Delegation on ``broker`` under a fresh key prefix, its queue big enough for ``jobs``."""
    prefix = f"rtgate-bench-{os.urandom(3).hex()}"
    return DelegationSettings.of(
        {
            "backend": broker,
            "url": url,
            "prefix": prefix,
            "queue_size": max(1024, 2 * jobs),
            "redeliver_after_s": redeliver_after_s,
            "poll_s": 0.5,
        }
    )


async def _start_fleet(d: Driver, workers: int, replicas: int) -> None:
    """Start the workers, then the replicas, and wait until every one says it is ready."""
    await asyncio.gather(*(d.spawn("worker", i) for i in range(workers)))
    await asyncio.gather(*(d.spawn("replica", i) for i in range(replicas)))
    async with asyncio.timeout(60.0):
        await asyncio.gather(*(p.ready.wait() for p in [*d.workers, *d.replicas]))


@dataclass(slots=True)
class _KillPlan:
    """What to SIGKILL at which ask: worker 0 at 25 %, the last replica at 50 %, worker 1 at
    60 % (a fresh worker takes its place); each only if there are enough of its kind."""

    at: dict[int, str]
    workers: int
    replicas: int
    killed: dict[str, int] = field(default_factory=lambda: {"workers": 0, "replicas": 0})

    @classmethod
    def of(cls, kill: bool, jobs: int, workers: int, replicas: int) -> _KillPlan:
        at = {jobs // 4: "worker0", jobs // 2: "replica", (jobs * 3) // 5: "worker1"}
        return cls(at if kill else {}, workers, replicas)

    async def before_ask(self, n: int, d: Driver) -> None:
        action = self.at.get(n)
        if action == "worker0" and self.workers >= 1:
            await d.kill(d.workers[0])
            self.killed["workers"] += 1
        elif action == "worker1" and self.workers >= 2:
            await d.kill(d.workers[1])
            self.killed["workers"] += 1
            await d.spawn("worker", self.workers)
        elif action == "replica" and self.replicas >= 2:
            await d.kill(d.replicas[-1])
            self.killed["replicas"] += 1


async def _ask_all(d: Driver, jobs: int, rate: float, kills: _KillPlan) -> float:
    """Ask ``jobs`` questions, at ``rate`` per second or (rate 0) as fast as a window of
    unanswered asks allows, killing on the way. Returns the start (``perf_counter``)."""
    t0 = time.perf_counter()
    window = max(64, 64 * kills.replicas)
    for n in range(jobs):
        if rate > 0:
            await asyncio.sleep(max(0.0, t0 + n / rate - time.perf_counter()))
        else:
            while sum(1 for a in d.asks.values() if a.job is None and not a.refused) >= window:
                d.progress.clear()
                await d.progress.wait()
        await kills.before_ask(n, d)
        await d.ask(n)
    return t0


async def _settle(d: Driver, timeout_s: float) -> None:
    """Wait until every ask is settled, or for ``timeout_s`` at most."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(1.0, timeout_s)):
            while not d.settled():
                d.progress.clear()
                await d.progress.wait()


async def _read_back(
    settings: DelegationSettings, d: Driver
) -> tuple[dict[int, Ask], list[dict[str, Any] | None]]:
    """The submitted asks and their job records from the broker; then the bench's keys go."""
    probe = make_broker_queue(settings)
    await probe.connect()
    try:
        subs = {n: a for n, a in d.asks.items() if a.job is not None}
        records = await probe.records([a.job for a in subs.values() if a.job])
        await _cleanup(settings, probe)
    finally:
        await probe.aclose()
    return subs, records


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
    settings = _bench_settings(broker, url, jobs, redeliver_after_s)
    d = Driver(settings, profile, concurrency)
    kills = _KillPlan.of(kill, jobs, workers, replicas)
    started = time.perf_counter()
    try:
        await _start_fleet(d, workers, replicas)
        t0 = await _ask_all(d, jobs, rate, kills)
        asked_s = time.perf_counter() - t0
        await _settle(d, timeout_s - (time.perf_counter() - started))
        wall_s = time.perf_counter() - t0
    finally:
        await d.stop_all()
    subs, records = await _read_back(settings, d)
    meta = {"broker": broker, "asks": jobs, "replicas": replicas, "workers": workers}
    return _report(d, subs, records, kills.killed, meta, profile, asked_s, wall_s)


def _report(
    d: Driver,
    subs: dict[int, Ask],
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

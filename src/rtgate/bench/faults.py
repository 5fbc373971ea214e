"""``rtgate bench faults``: do budgets hold when the cloud misbehaves and the load is double?

The bench starts two subprocesses it owns: ``rtgate fake-llm`` as the cloud tier and the
plain ``rtgate serve --config FILE``, whose config points its cloud tier at the fake and
spells out the ``[resilience]`` section it runs with (the server's defaults: the local
model behind one slot, the cloud tier behind a cap, a circuit breaker with a health probe
and a budget-aware retry). Then:

1. **Calibration.** With the fake answering every request with HTTP 500, sequential
   requests that no template answers are served by the local model; the local model's
   capacity is ``1000 / median service time`` requests per second. Unless given, the
   budget is twice that service time (at least 200 ms), so the local model fits when it
   is free and the gate has a real choice to make under load.
2. **Load.** The fake switches to a mix of faults (hangs, slow first tokens, trickles,
   429/500, dropped connections, malformed and truncated streams). ``requests`` requests
   arrive as a seeded Poisson process at ``load`` times that capacity, each with
   ``budget_ms``. A request is *over budget* when its full answer reaches the client more
   than ``slack_ms`` (10 ms) after its budget; a *server error* is any 5xx.

Report: ``{"requests", "over_budget", "server_errors", "max_overrun_ms", ...}``. The goal
is zero over budget and zero server errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import typer

__all__ = ["DEFAULT_MIX", "app", "run"]

DEFAULT_MIX = (
    "ok=0.3,hang=0.15,slow=0.1,trickle=0.1,stall=0.05,429=0.1,500=0.1,reset=0.05,malformed=0.05"
)
# Inputs no template answers (they reach the models), and a few that a template may answer.
MODEL_INPUTS = (
    "Tell me a short story about a lighthouse keeper.",
    "Why is the sky blue at noon but red at sunset?",
    "Write one sentence about autumn in the mountains.",
    "What would you pack for a week of hiking?",
)
MIXED_INPUTS = (*MODEL_INPUTS, "我想查一下信用卡账单", "How do I raise my credit limit?")
SERVE = f"{shlex.quote(sys.executable)} -m rtgate.cli.serve serve"
FAKE = f"{shlex.quote(sys.executable)} -m rtgate.cli.fakellm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(slots=True)
class _Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-n:]


@contextlib.contextmanager
def _spawn(name: str, argv: Sequence[str], workdir: Path) -> Iterator[_Proc]:
    """Start a subprocess we own; terminate it (then kill it) on the way out."""
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT)
    try:
        yield _Proc(name, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(p: _Proc, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if p.proc.poll() is not None:
            raise RuntimeError(f"{p.name} exited with {p.proc.returncode}:\n{p.tail()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{p.name} not ready after {timeout_s:.0f} s:\n{p.tail()}")
        time.sleep(0.2)


def _config(port: int, fake_port: int, local_max_tokens: int) -> str:
    return (
        "[server]\n"
        f'host = "127.0.0.1"\nport = {port}\nlog_level = "warning"\n\n'
        f"[local]\nmax_tokens = {local_max_tokens}\n\n"
        "[cloud]\n"
        f'base_url = "http://127.0.0.1:{fake_port}/v1"\nmodel = "fake"\n'
        "ttft_p99_ms = 200.0\ntimeout_s = 30.0\n\n"
        "[resilience]\n"
        "enabled = true\nlocal_capacity = 1\ncloud_capacity = 32\n"
        "cloud_breaker = true\ncloud_probe = true\ncloud_retries = 2\n"
    )


@dataclass(frozen=True, slots=True)
class _Outcome:
    status: int  # 0: the request failed at the client (no HTTP status)
    elapsed_ms: float
    route: str


async def _one(client: httpx.AsyncClient, text: str, budget_ms: float) -> _Outcome:
    body = {"input": text, "budget_ms": budget_ms, "stream": False}
    t0 = time.perf_counter()
    try:
        resp = await client.post("/v1/gate", json=body)
        await resp.aread()
    except httpx.HTTPError:
        return _Outcome(0, (time.perf_counter() - t0) * 1000.0, "client_error")
    elapsed = (time.perf_counter() - t0) * 1000.0
    route = "?"
    if resp.status_code == 200:
        with contextlib.suppress(ValueError, AttributeError):
            route = str(resp.json().get("route", "?"))
    return _Outcome(resp.status_code, elapsed, route)


async def _calibrate(client: httpx.AsyncClient, n: int) -> float:
    """Median ms of sequential requests answered by the local model."""
    times: list[float] = []
    for i in range(n * 3):
        out = await _one(client, MODEL_INPUTS[i % len(MODEL_INPUTS)], 10_000.0)
        if out.route == "local":
            times.append(out.elapsed_ms)
        if len(times) >= n:
            break
    if len(times) < max(3, n // 2):
        raise RuntimeError(f"calibration: only {len(times)} of {n} requests reached 'local'")
    return statistics.median(times)


async def _load(
    client: httpx.AsyncClient, requests: int, rate: float, budget_ms: float, seed: int
) -> list[_Outcome]:
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    t = loop.time()
    tasks: list[asyncio.Task[_Outcome]] = []
    for _ in range(requests):
        t += rng.expovariate(rate)
        delay = t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        text = rng.choice(MIXED_INPUTS)
        tasks.append(asyncio.create_task(_one(client, text, budget_ms)))
    return list(await asyncio.gather(*tasks))


def _report(outcomes: list[_Outcome], budget_ms: float, slack_ms: float) -> dict[str, Any]:
    over = [o.elapsed_ms - budget_ms for o in outcomes if o.elapsed_ms > budget_ms + slack_ms]
    times = sorted(o.elapsed_ms for o in outcomes)

    def pct(q: float) -> float:
        return round(times[min(len(times) - 1, int(q * len(times)))], 2) if times else 0.0

    return {
        "requests": len(outcomes),
        "over_budget": len(over),
        "server_errors": sum(1 for o in outcomes if o.status >= 500),
        "max_overrun_ms": round(max((o.elapsed_ms - budget_ms for o in outcomes), default=0.0), 2),
        "client_errors": sum(1 for o in outcomes if o.status == 0),
        "other_status": dict(Counter(o.status for o in outcomes if o.status not in (0, 200))),
        "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": round(times[-1], 2)}
        if times
        else {},
        "routes": dict(Counter(o.route for o in outcomes)),
        "over_budget_routes": dict(
            Counter(o.route for o in outcomes if o.elapsed_ms > budget_ms + slack_ms)
        ),
    }


def run(
    *,
    requests: int = 1000,
    budget_ms: float | None = None,
    load: float = 2.0,
    mix: str = DEFAULT_MIX,
    seed: int = 0,
    calibrate: int = 12,
    local_max_tokens: int = 8,
    slack_ms: float = 10.0,
    serve_cmd: str = SERVE,
    fake_cmd: str = FAKE,
    ready_timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Run the bench (see the module doc) and return its report."""
    if requests < 1 or (budget_ms is not None and budget_ms <= 0) or load <= 0:
        raise ValueError("need requests >= 1, budget_ms > 0 and load > 0")
    with tempfile.TemporaryDirectory(prefix="rtgate-bench-faults-") as tmp:
        work = Path(tmp)
        fake_port, port = _free_port(), _free_port()
        cfg = work / "rtgate.toml"
        cfg.write_text(_config(port, fake_port, local_max_tokens))
        fake_argv = [*shlex.split(fake_cmd), "--port", str(fake_port), "--mode", "500"]
        fake_argv += ["--seed", str(seed), "--log-level", "warning"]
        serve_argv = [*shlex.split(serve_cmd), "--config", str(cfg)]
        env_note = {k: v for k, v in os.environ.items() if k.startswith("RTGATE_")}
        with (
            _spawn("fake-llm", fake_argv, work) as fake,
            _spawn("serve", serve_argv, work) as server,
        ):
            _wait_ready(fake, f"http://127.0.0.1:{fake_port}/healthz", 30)
            _wait_ready(server, f"http://127.0.0.1:{port}/healthz", ready_timeout_s)
            report = asyncio.run(
                _drive(port, fake_port, requests, budget_ms, load, mix, seed, calibrate, slack_ms)
            )
            if server.proc.poll() is not None:
                report["server_exit"] = server.proc.returncode
    report["env"] = sorted(env_note)
    return report


async def _drive(
    port: int,
    fake_port: int,
    requests: int,
    budget_ms: float | None,
    load: float,
    mix: str,
    seed: int,
    calibrate: int,
    slack_ms: float,
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    timeout = httpx.Timeout(60.0)  # far above any budget: a late answer is measured, not lost
    async with (
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=timeout
        ) as client,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{fake_port}") as fake,
    ):
        service_ms = await _calibrate(client, calibrate)
        capacity = 1000.0 / service_ms
        if budget_ms is None:
            budget_ms = max(200.0, round(2.0 * service_ms, -1))
        (await fake.post("/fake/mode", json={"mode": mix})).raise_for_status()
        t0 = time.perf_counter()
        outcomes = await _load(client, requests, load * capacity, budget_ms, seed)
        wall = time.perf_counter() - t0
        fake_stats = (await fake.get("/fake/stats")).json()
    report = _report(outcomes, budget_ms, slack_ms)
    report.update(
        {
            "budget_ms": budget_ms,
            "slack_ms": slack_ms,
            "local_service_ms": round(service_ms, 2),
            "capacity_rps": round(capacity, 2),
            "offered_rps": round(load * capacity, 2),
            "achieved_rps": round(len(outcomes) / wall, 2),
            "mix": mix,
            "fake_llm": fake_stats,
        }
    )
    return report


app = typer.Typer(add_completion=False)


@app.command("faults")
def faults(
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    requests: int = typer.Option(1000, help="requests in the load phase"),
    budget_ms: float | None = typer.Option(
        None, help="budget of every request (default: twice the local service time)"
    ),
    load: float = typer.Option(2.0, help="arrival rate as a multiple of the local capacity"),
    mix: str = typer.Option(DEFAULT_MIX, help="the fake cloud's fault mix"),
    seed: int = typer.Option(0, help="seed of arrivals, inputs and faults"),
    serve_cmd: str = typer.Option(SERVE, help="how to start the server (gets --config FILE)"),
) -> None:
    """Budgets under faults and overload: the fake cloud misbehaves at twice the capacity."""
    from rtgate.cli.output import show_table, write_json

    report = run(
        requests=requests, budget_ms=budget_ms, load=load, mix=mix, seed=seed, serve_cmd=serve_cmd
    )
    lat = report.get("latency_ms", {})
    show_table(
        "rtgate bench faults",
        [
            ("requests", str(report["requests"])),
            ("over budget (> budget + 10 ms)", f"{report['over_budget']} (goal 0)"),
            ("server errors (5xx)", f"{report['server_errors']} (goal 0)"),
            ("max overrun", f"{report['max_overrun_ms']:.1f} ms"),
            ("latency p50 / p99", f"{lat.get('p50', 0):.1f} / {lat.get('p99', 0):.1f} ms"),
            ("local capacity / offered", f"{report['capacity_rps']} / {report['offered_rps']} rps"),
            ("routes", ", ".join(f"{k} {v}" for k, v in sorted(report["routes"].items()))),
        ],
    )
    write_json(report, json_out)
    if report["over_budget"] or report["server_errors"]:
        raise typer.Exit(1)

"""``rtgate bench http``: template-hit requests over loopback HTTP at a fixed arrival rate.

The server runs as its own process (``python -m rtgate.cli.serve serve``), the load
generator in this one; with ``--pin`` each gets a core of its own. Arrivals are open-loop
(:mod:`rtgate.bench._loadgen`): request *i* is due at ``start + i / rate`` whether or not
earlier ones have been answered, and its latency is measured from that due time, so a
stalled server or a late generator is charged in full (no coordinated omission); the
generator's own lateness is reported as ``send_lag_ms``.

By default the server is started with a config of the template tier alone (the measured
path: HTTP parsing, validation, budget, gate, template tier, trace, metrics, JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from rtgate.bench._loadgen import gate_payloads, open_loop

__all__ = ["GOALS", "app", "run", "stop_process"]

GOALS = {"p50_ms": 1.0, "p99_ms": 5.0}
BENCH_CONFIG = """\
[server]
log_level = "warning"
[gate]
delegate = false
[local]
enabled = false
[cloud]
enabled = false
"""

app = typer.Typer(help="HTTP benchmarks.", no_args_is_help=True, add_completion=False)


@app.callback()
def _main() -> None:
    """HTTP benchmarks."""


def template_inputs(path: str | None = None) -> list[str]:
    """Inputs that hit the template table: every prefix pattern, and keyword patterns."""
    from rtgate.tiers.templates import TemplateTable

    src = path or str(files("rtgate.domains").joinpath("cards/templates.json"))
    table = TemplateTable.from_file(src)
    out = [p for t in table.templates for p in t.patterns]
    return [s for s in out if table.match(s) is not None]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s; reaped either way."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _place(cpu: int | None, nice: int) -> None:
    """Pin this process to ``cpu`` and/or change its niceness by ``nice``."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if nice:
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + nice)


def _start_server(
    config: str, port: int, cpu: int | None, nice: int, log: Path
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "rtgate.cli.serve", "serve", "--config", config]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: _place(cpu, nice)
        )


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not ready after {timeout_s:.0f} s:\n{log.read_text()[-2000:]}")


@contextmanager
def _served(
    config: str | None, port: int, cpu: int | None, nice: int, ready_timeout_s: float
) -> Iterator[subprocess.Popen[bytes]]:
    """``rtgate serve`` on ``port`` in a subprocess, ready; terminated on exit. Without a
    ``config``, the template tier alone (:data:`BENCH_CONFIG`)."""
    with tempfile.TemporaryDirectory(prefix="rtgate-bench-") as tmp:
        cfg_path = config
        if cfg_path is None:
            cfg_path = str(Path(tmp) / "bench.toml")
            Path(cfg_path).write_text(BENCH_CONFIG)
        log = Path(tmp) / "server.log"
        proc = _start_server(cfg_path, port, cpu, nice, log)
        try:
            _wait_ready(f"http://127.0.0.1:{port}", proc, log, ready_timeout_s)
            yield proc
        finally:
            stop_process(proc)


@contextmanager
def _placed(cpu: int | None, nice: int) -> Iterator[None]:
    """This process on ``cpu`` at ``nice`` more for the block; affinity and niceness back
    after it."""
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        _place(cpu, nice)
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
        if nice:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)


@dataclass(slots=True)
class _Load:
    """The open-loop run's report, and the CPU each side spent per request."""

    result: dict[str, Any]
    server_us: float
    gen_us: float


def _load(
    proc: subprocess.Popen[bytes],
    port: int,
    payloads: list[bytes],
    rate: float,
    seconds: float,
    *,
    warmup_s: float,
    connections: int,
) -> _Load:
    """Load the server open-loop; CPU per request measured on both sides."""
    cpu0, gen0 = _cpu_s(proc.pid), time.process_time()
    result = _run_loop(
        open_loop("127.0.0.1", port, payloads, rate, seconds, warmup_s, connections, 10.0)
    )
    n_all = round(rate * (warmup_s + seconds))
    server_us = (_cpu_s(proc.pid) - cpu0) / n_all * 1e6
    gen_us = (time.process_time() - gen0) / n_all * 1e6
    return _Load(result, server_us, gen_us)


def run(
    rate: float = 1000.0,
    seconds: float = 30.0,
    *,
    warmup_s: float = 2.0,
    connections: int = 32,
    budget_ms: float = 50.0,
    config: str | None = None,
    pin: bool = False,
    nice: int = 0,
    ready_timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Start ``rtgate serve`` in a subprocess, load it open-loop, return the JSON report.

    ``pin`` gives the server and the generator a core each; ``nice`` (e.g. -10, needs the
    privilege) raises both above other work on a shared machine. Both are reported.
    """
    if rate <= 0 or seconds <= 0 or connections < 1:
        raise ValueError("rate and seconds must be > 0, connections >= 1")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu, client_cpu = (cpus[0], cpus[-1]) if pin and len(cpus) >= 2 else (None, None)
    port = _free_port()
    inputs = template_inputs()
    load_before = list(os.getloadavg())
    with (
        _served(config, port, server_cpu, nice, ready_timeout_s) as proc,
        _placed(client_cpu, nice),
    ):
        payloads = gate_payloads("127.0.0.1", port, inputs, budget_ms)
        load = _load(
            proc, port, payloads, rate, seconds, warmup_s=warmup_s, connections=connections
        )
    return _report(
        load,
        rate=rate,
        seconds=seconds,
        warmup_s=warmup_s,
        budget_ms=budget_ms,
        server_cpu=server_cpu,
        client_cpu=client_cpu,
        config=config,
        connections=connections,
        n_inputs=len(inputs),
        nice=nice,
        load_before=load_before,
    )


def _report(
    load: _Load,
    *,
    rate: float,
    seconds: float,
    warmup_s: float,
    budget_ms: float,
    server_cpu: int | None,
    client_cpu: int | None,
    config: str | None,
    connections: int,
    n_inputs: int,
    nice: int,
    load_before: list[float],
) -> dict[str, Any]:
    """The JSON report: the run's settings, latencies, the load's counts, CPU, goals."""
    lat, result = load.result["latency_ms"], load.result
    return {
        "bench": "http",
        "endpoint": "POST /v1/gate (template hits)",
        "rate_rps": rate,
        "seconds": seconds,
        "warmup_s": warmup_s,
        "budget_ms": budget_ms,
        "p50_ms": lat["p50"],
        "p90_ms": lat["p90"],
        "p99_ms": lat["p99"],
        "max_ms": lat["max"],
        **result,
        "measured_from": "scheduled send time (open loop; coordinated omission corrected)",
        "server": {
            "process": "separate (rtgate serve)",
            "cpu": server_cpu,
            "config": config or "template tier only",
            "cpu_us_per_request": round(load.server_us, 1),
        },
        "generator": {
            "cpu": client_cpu,
            "connections": connections,
            "inputs": n_inputs,
            "cpu_us_per_request": round(load.gen_us, 1),
        },
        "nice": nice,
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "goals": GOALS,
        "met": {
            "p50_ms": lat["p50"] <= GOALS["p50_ms"],
            "p99_ms": lat["p99"] <= GOALS["p99_ms"],
            "no_errors": result["error_count"] == 0,
        },
    }


def _run_loop(coro: Any) -> dict[str, Any]:
    try:
        import uvloop

        return dict(uvloop.run(coro))
    except ImportError:
        return dict(asyncio.run(coro))


def _table(r: dict[str, Any]) -> Table:
    t = Table(title=f"rtgate bench http: {r['rate_rps']:g} req/s for {r['seconds']:g} s")
    t.add_column("metric")
    for q in ("p50", "p90", "p99", "max"):
        t.add_column(q, justify="right")
    for key in ("latency_ms", "service_time_ms", "send_lag_ms"):
        t.add_row(key, *(f"{r[key][q]:.3f}" for q in ("p50", "p90", "p99", "max")))
    t.caption = (
        f"server CPU {r['server']['cpu_us_per_request']:.0f} us/request; "
        f"achieved {r['achieved_rps']:.0f} req/s, {r['completed']}/{r['requests']} answered, "
        f"errors {r['error_count']}; goals p50 <= {GOALS['p50_ms']:g} ms, "
        f"p99 <= {GOALS['p99_ms']:g} ms: {'met' if all(r['met'].values()) else 'NOT met'}"
    )
    return t


@app.command("http")
def http_cmd(
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    rate: Annotated[float, typer.Option(help="Arrivals per second.")] = 1000.0,
    seconds: Annotated[float, typer.Option(help="Measured duration.")] = 30.0,
    warmup: Annotated[float, typer.Option(help="Unmeasured lead-in, seconds.")] = 2.0,
    connections: Annotated[int, typer.Option(help="Keep-alive connections.")] = 32,
    budget_ms: Annotated[float, typer.Option(help="Budget of each request.")] = 50.0,
    config: Annotated[
        Path | None, typer.Option(help="Server config (default: template tier only).")
    ] = None,
    pin: Annotated[
        bool, typer.Option(help="Pin server and generator to a core each (quiet machines).")
    ] = False,
    nice: Annotated[
        int, typer.Option(help="Niceness change for server and generator (e.g. -10).")
    ] = 0,
) -> None:
    """Template-hit requests over loopback HTTP at a fixed rate; p50/p90/p99/max."""
    report = run(
        rate,
        seconds,
        warmup_s=warmup,
        connections=connections,
        budget_ms=budget_ms,
        config=str(config) if config else None,
        pin=pin,
        nice=nice,
    )
    Console().print(_table(report))
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    app(sys.argv[1:])

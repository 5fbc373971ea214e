"""``rtgate bench proxy``: what rtgate adds in front of a remote model, next to the bare
upstream and (when installed) LiteLLM's proxy, in one run.

Three servers, each its own process: a bare OpenAI-compatible upstream that answers at once
(:mod:`rtgate.bench._bare_upstream`), ``rtgate serve`` as a pure proxy to it (no template,
classifier, cache or local model; the client names the upstream's model, so the request
takes the passthrough path), and LiteLLM's proxy (``pip install 'rtgate[bench-litellm]'``,
or ``RTGATE_BENCH_LITELLM`` naming ``bin/litellm`` of a virtualenv of its own; reported as
not installed otherwise). Each target is driven open-loop at each rate
(:mod:`rtgate.bench._loadgen`: latency from the due time, no coordinated omission), then
run closed-loop (each connection asks again as soon as it is answered: its throughput). With two or
more cores the target runs on one core, the upstream and the generator on the other.

Per target and rate: ``p50_ms``/``p90_ms``/``p99_ms``, ``achieved_rps``, ``errors``,
``cpu_ms_per_request`` (the target process only). Then the latency each gateway adds over
the upstream, and the highest rate each target sustains with p99 <= 50 ms and no errors.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from rtgate.backends.http1 import Http1Pool
from rtgate.bench._bare_upstream import MODEL, STREAM_CHUNKS
from rtgate.bench._loadgen import open_loop
from rtgate.bench.burst_client import read_answer
from rtgate.bench.http import _cpu_s, _free_port, stop_process
from rtgate.cli.output import show_table, write_json
from rtgate.core.errors import BackendUnavailable

__all__ = ["RATES", "app", "run"]

RATES = (50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0)
STREAM_CONCURRENCY = 8
_JSON = (("Content-Type", "application/json"), ("Accept", "text/event-stream"))
SUSTAINED_P99_MS = 50.0
EXPECT = b'"chat.completion"'

app = typer.Typer()


def _pin(cpu: int | None) -> Any:
    return (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None


def _rtgate_config(upstream_port: int, workers: int = 1) -> str:
    shared = (  # several workers share jobs through the local Redis (rtgate serve's rule)
        f'[delegation]\nbackend = "redis"\nurl = "redis://127.0.0.1:6379/0"\n'
        f'prefix = "rtgate-bench-proxy-{os.getpid()}"\n'
        if workers > 1
        else ""
    )
    return (
        shared
        + f"""\
[server]
log_level = "warning"
discover_routers = false
default_budget_ms = 10000
max_inflight = 4096
[gate]
warmup = false
[templates]
enabled = false
[local]
enabled = false
[cloud]
base_url = "http://127.0.0.1:{upstream_port}/v1"
model = "{MODEL}"
[resilience]
cloud_capacity = 4096
"""
    )


@contextmanager
def _process(
    cmd: list[str], cpu: int | None, log: Path, ready: str, env: dict[str, str] | None = None
) -> Iterator[int]:
    """``cmd`` running on ``cpu`` (with ``env`` added to ours) until ``ready`` (a URL)
    answers; its pid."""
    full = {**os.environ, **env} if env else None
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_pin(cpu), env=full
        )
    try:
        deadline = time.monotonic() + 120.0
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited:\n{log.read_text()[-2000:]}")
            try:
                httpx.get(ready, timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not ready: {ready}\n{log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield proc.pid
    finally:
        stop_process(proc)


def _payload(port: int) -> list[bytes]:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return [head.encode() + body.encode()]


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (``rtgate serve --workers N``)."""
    total = _cpu_s(pid)
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return total + sum(_cpu_s(int(k)) for k in kids)


def _all_workers_up(url: str, workers: int, timeout_s: float = 120.0) -> None:
    """Wait until ``workers`` distinct processes have answered ``url`` (``/healthz``)."""
    pids: set[int] = set()
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1.0) as client:
        while len(pids) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(pids)} of {workers} rtgate workers answered")
            try:
                # a new connection each time, so the kernel may hand it to another worker
                pids.add(int(client.get(url, headers={"Connection": "close"}).json()["pid"]))
            except (httpx.HTTPError, KeyError, ValueError):
                time.sleep(0.1)


def _drive(pid: int, port: int, rate: float, seconds: float, connections: int) -> dict[str, Any]:
    """One open-loop run against the target on ``port``; its figures."""
    warmup_s = min(1.0, seconds / 4)
    cpu0 = _tree_cpu_s(pid)
    run = open_loop(
        "127.0.0.1", port, _payload(port), rate, seconds, warmup_s, connections, 10.0, EXPECT
    )
    r = asyncio.run(run)
    sent = max(1, round(rate * (warmup_s + seconds)))
    lat = r["latency_ms"]
    return {
        "p50_ms": round(lat["p50"], 3),
        "p90_ms": round(lat["p90"], 3),
        "p99_ms": round(lat["p99"], 3),
        "achieved_rps": round(r["achieved_rps"], 1),
        "errors": r["error_count"],
        "error_kinds": r["errors"],  # e.g. http_503, a closed connection, unanswered
        "cpu_ms_per_request": round((_tree_cpu_s(pid) - cpu0) / sent * 1000.0, 3),
    }


async def _closed_loop(port: int, seconds: float, connections: int) -> float:
    """Answers per second with ``connections`` clients each asking again as soon as it is
    answered (non-200 answers are not counted)."""
    payload = _payload(port)[0]
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
    end = time.perf_counter() + seconds
    done = 0

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal done
        while time.perf_counter() < end:
            writer.write(payload)
            status, _ = await read_answer(reader)
            done += status == 200

    try:
        await asyncio.gather(*(client(r, w) for r, w in conns))
    finally:
        for _, writer in conns:
            writer.close()
    return done / seconds


def _stream_payload() -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()


async def _streamed(port: int, requests: int, concurrency: int) -> dict[str, Any]:
    """``requests`` streamed chat completions, ``concurrency`` at a time: the time to the
    first content chunk and between content chunks, at the client."""
    pool = Http1Pool(f"http://127.0.0.1:{port}/v1", size=concurrency)
    payload = _stream_payload()
    ttft: list[float] = []
    gaps: list[float] = []
    errors = 0
    left = requests

    async def one() -> None:
        nonlocal errors
        t0 = time.perf_counter()
        resp = await pool.request("POST", "/chat/completions", payload, _JSON)
        try:
            if resp.status != 200:
                errors += 1
                return
            seen: list[float] = []
            buf = b""
            async for piece in resp:
                now = time.perf_counter()
                buf += piece
                *events, buf = buf.split(b"\n\n")
                seen += [now for e in events if b'"content"' in e]
            if len(seen) != STREAM_CHUNKS:
                errors += 1
                return
            ttft.append((seen[0] - t0) * 1000.0)
            gaps.extend((b - a) * 1000.0 for a, b in itertools.pairwise(seen))
        finally:
            resp.close()

    async def worker() -> None:
        nonlocal left, errors
        while left > 0:
            left -= 1
            try:
                await one()
            except (BackendUnavailable, TimeoutError):
                errors += 1

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await pool.aclose()
    return {
        "requests": requests,
        "errors": errors,
        "ttft_p50_ms": _pct(ttft, 50),
        "ttft_p99_ms": _pct(ttft, 99),
        "itl_p50_ms": _pct(gaps, 50),
        "itl_p99_ms": _pct(gaps, 99),
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q / 100.0))], 3)


def litellm_command() -> str | None:
    """LiteLLM's proxy command: ``$RTGATE_BENCH_LITELLM`` (its own virtualenv's
    ``bin/litellm``: LiteLLM pins versions rtgate's may not share), else ``litellm`` on
    the path when the ``bench-litellm`` extra is installed here; ``None`` when neither."""
    own = os.environ.get("RTGATE_BENCH_LITELLM")
    if own:
        return own if os.access(own, os.X_OK) else None
    found = shutil.which("litellm")
    return found if found and importlib.util.find_spec("litellm") is not None else None


def _targets(
    stack: ExitStack, tmp: Path, cpus: tuple[int | None, int | None], workers: int = 1
) -> dict[str, Any]:
    """Start the upstream, rtgate (``workers`` processes: unpinned when more than one) and
    (if installed) LiteLLM; ``{name: (pid, port)}``."""
    gen_cpu, target_cpu = cpus
    up_port = _free_port()
    up_cmd = [sys.executable, "-m", "rtgate.bench._bare_upstream", str(up_port)]
    up_url = f"http://127.0.0.1:{up_port}/v1/models"
    up_pid = stack.enter_context(_process(up_cmd, gen_cpu, tmp / "upstream.log", up_url))
    out: dict[str, Any] = {"upstream": (up_pid, up_port)}
    cfg = tmp / "rtgate.toml"
    cfg.write_text(_rtgate_config(up_port, workers), encoding="utf-8")
    port = _free_port()
    cmd = [sys.executable, "-m", "rtgate.cli.serve", "serve", "--config", str(cfg)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    ready = f"http://127.0.0.1:{port}/healthz"
    rt_cpu = target_cpu if workers == 1 else None
    out["rtgate"] = (
        stack.enter_context(_process(cmd, rt_cpu, tmp / "rtgate.log", ready)),
        port,
    )
    _all_workers_up(ready, workers)
    litellm = litellm_command()
    if litellm is None:
        out["litellm"] = None
        return out
    port = _free_port()
    cmd = [litellm, "--model", f"openai/{MODEL}", "--api_base", f"http://127.0.0.1:{up_port}/v1"]
    cmd += ["--port", str(port), "--num_workers", "1"]
    ready = f"http://127.0.0.1:{port}/health/liveliness"
    # no keys on either gateway (a loopback benchmark): LiteLLM since 1.108 refuses to
    # start without a master key unless told this is meant, and its OpenAI provider wants
    # a key to send (the bare upstream ignores it)
    open_door = {
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        "OPENAI_API_KEY": "sk-unused",
    }
    out["litellm"] = (
        stack.enter_context(_process(cmd, target_cpu, tmp / "litellm.log", ready, open_door)),
        port,
    )
    return out


def _summary(report: dict[str, Any], rates: Sequence[float]) -> None:
    """Added latency over the upstream, and each target's highest sustained rate."""
    targets, upstream = report["targets"], report["targets"]["upstream"]
    report["added_ms"], report["sustained_rps"] = {}, {}
    for name, by_rate in targets.items():
        if not isinstance(by_rate, dict):
            continue
        ok = [r for r in rates if _sustained(by_rate[str(r)], r)]
        report["sustained_rps"][name] = max(ok, default=0.0)
        if name != "upstream":
            report["added_ms"][name] = {
                str(r): {
                    "p50": round(by_rate[str(r)]["p50_ms"] - upstream[str(r)]["p50_ms"], 3),
                    "p99": round(by_rate[str(r)]["p99_ms"] - upstream[str(r)]["p99_ms"], 3),
                }
                for r in rates
            }


def _stream_added(report: dict[str, Any]) -> None:
    """What each gateway adds to the upstream's time to first chunk and between chunks."""
    streamed = report["streamed"]
    base = streamed.get("upstream")
    report["stream_added_ms"] = {}
    if not base:
        return
    for name, m in streamed.items():
        if name == "upstream":
            continue
        report["stream_added_ms"][name] = {
            k: round(m[k] - base[k], 3) if m[k] is not None and base[k] is not None else None
            for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")
        }


def _sustained(m: dict[str, Any], rate: float) -> bool:
    fast = float(m["p99_ms"]) <= SUSTAINED_P99_MS and int(m["errors"]) == 0
    return fast and float(m["achieved_rps"]) >= 0.95 * rate


def run(
    rates: Sequence[float] = RATES,
    seconds: float = 10.0,
    connections: int = 64,
    stream_requests: int = 200,
    workers: int = 1,
) -> dict[str, Any]:
    """Start the servers, drive each at each rate and at capacity; the report."""
    two = (os.cpu_count() or 1) >= 2
    cpus: tuple[int | None, int | None] = (0, 1) if two else (None, None)
    report: dict[str, Any] = {"rates": list(rates), "seconds": seconds, "pinned": two}
    report |= {"connections": connections, "targets": {}, "max_throughput": {}, "streamed": {}}
    report["rtgate_workers"] = workers
    with tempfile.TemporaryDirectory(prefix="rtgate-bench-proxy-") as tmp, ExitStack() as stack:
        if two:  # the generator shares the upstream's core; this process's affinity after
            before = os.sched_getaffinity(0)
            stack.callback(os.sched_setaffinity, 0, before)
            os.sched_setaffinity(0, {0})
        for name, started in _targets(stack, Path(tmp), cpus, workers).items():
            if started is None:
                report["targets"][name] = (
                    "not installed (the bench-litellm extra, or RTGATE_BENCH_LITELLM)"
                )
                continue
            pid, port = started
            by_rate = {str(r): _drive(pid, port, r, seconds, connections) for r in rates}
            report["targets"][name] = by_rate
            cap = asyncio.run(_closed_loop(port, min(seconds, 5.0), connections))
            report["max_throughput"][name] = round(cap, 1)
            if stream_requests:
                streamed = _streamed(port, stream_requests, STREAM_CONCURRENCY)
                report["streamed"][name] = asyncio.run(streamed)
    _summary(report, rates)
    _stream_added(report)
    return report


@app.command("proxy")
def proxy(
    rate: Annotated[list[float] | None, typer.Option(help="arrival rates (repeat)")] = None,
    seconds: Annotated[float, typer.Option(min=1, help="measured seconds per rate")] = 10.0,
    connections: Annotated[int, typer.Option(min=1, help="keep-alive connections")] = 64,
    streams: Annotated[
        int, typer.Option(min=0, help="streamed requests per target (0: none)")
    ] = 200,
    workers: Annotated[
        int, typer.Option(min=1, help="rtgate serve --workers (> 1: jobs on the local Redis)")
    ] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """rtgate as a proxy next to the bare upstream and LiteLLM: latency added, capacity."""
    report = run(rate or RATES, seconds, connections, streams, workers)
    rows = []
    for name, by_rate in report["targets"].items():
        if not isinstance(by_rate, dict):
            rows.append((name, str(by_rate)))
            continue
        for r, m in by_rate.items():
            rows.append((f"{name} @ {float(r):g}/s", f"p50 {m['p50_ms']} / p99 {m['p99_ms']} ms, "
                         f"{m['achieved_rps']}/s, {m['errors']} errors, {m['cpu_ms_per_request']} "
                         "ms CPU"))  # fmt: skip
        rows.append((f"{name} sustained / max", f"{report['sustained_rps'][name]:g} / "
                     f"{report['max_throughput'][name]:g} req/s"))  # fmt: skip
    for name, m in report["streamed"].items():
        rows.append((f"{name} streamed", f"TTFT p50 {m['ttft_p50_ms']} / p99 "
                     f"{m['ttft_p99_ms']} ms, "
                     f"between chunks p50 {m['itl_p50_ms']} / p99 {m['itl_p99_ms']} ms, "
                     f"{m['errors']} errors"))  # fmt: skip
    show_table("rtgate bench proxy", rows)
    write_json(report, json_out)

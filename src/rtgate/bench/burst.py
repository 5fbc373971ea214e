"""``rtgate bench burst``: waves of simultaneous requests; does every budget hold?

A real ``rtgate serve`` (its own process, by default the template tier alone and a
question no template answers, so every answer is the gate's own path to the placeholder)
gets ``waves`` waves of ``concurrency`` simultaneous ``POST /v1/gate`` with ``budget_ms``,
from a load generator in another process (:mod:`rtgate.bench.burst_client`); with two or
more cores the server and the generator are pinned to different ones.

Reported: ``sent``, ``answered`` (a 200 that is not a shed placeholder), ``shed`` (answered
at once because it could not be served in time: a shed placeholder or a 503 overloaded),
``over_budget_client`` and ``over_budget_server`` (later than the budget + 10 ms, at the
client and in the server's own trace), the client latency's ``p50_ms``/``p99_ms``/``max_ms``,
``server_errors`` (5xx other than overloaded, and broken connections), and the server's
resident memory before and after (``rss_mb_before``/``rss_mb_after``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer

from rtgate.bench.http import _free_port, _start_server, _wait_ready, stop_process
from rtgate.cli.output import show_table, write_json

__all__ = ["app", "run", "summarize"]

LATE_MS = 10.0  # over budget: later than the budget plus this
QUESTION = "Explain the physics of a black hole evaporating, in three paragraphs."
BURST_CONFIG = """\
[server]
log_level = "warning"
[gate]
warmup = false
[local]
enabled = false
[cloud]
enabled = false
"""

app = typer.Typer()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def summarize(rows: list[dict[str, Any]], budget_ms: float) -> dict[str, Any]:
    """The report's counts and percentiles from the generator's lines."""
    late = budget_ms + LATE_MS
    shed = [r for r in rows if _shed(r)]
    errors = [r for r in rows if (r["status"] >= 500 and not _shed(r)) or r["status"] == 0]
    client = np.array([r["client_ms"] for r in rows if "client_ms" in r] or [np.nan])
    server = [float(r["server_ms"]) for r in rows if r.get("server_ms") is not None]
    return {
        "sent": len(rows),
        "answered": sum(1 for r in rows if r["status"] == 200 and not _shed(r)),
        "shed": len(shed),
        "over_budget_client": int(np.sum(client > late)),
        "over_budget_server": sum(1 for s in server if s > late),
        "p50_ms": round(float(np.nanpercentile(client, 50)), 2),
        "p99_ms": round(float(np.nanpercentile(client, 99)), 2),
        "max_ms": round(float(np.nanmax(client)), 2),
        "server_errors": len(errors),
    }


def _shed(row: dict[str, Any]) -> bool:
    degraded = row.get("degraded") or ""
    return degraded.startswith("shed:") or row.get("code") == "overloaded"


def _generate(port: int, spec: dict[str, Any], cpu: int | None) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "rtgate.bench.burst_client", "127.0.0.1", str(port)]
    done = subprocess.run(
        [*cmd, json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def run(
    concurrency: int = 500,
    waves: int = 8,
    budget_ms: float = 300.0,
    *,
    interval_s: float = 2.5,
    config: str | None = None,
    question: str = QUESTION,
) -> dict[str, Any]:
    """Start the server, send the waves, report (see the module docstring)."""
    two_cores = (os.cpu_count() or 1) >= 2
    server_cpu, client_cpu = (0, 1) if two_cores else (None, None)
    spec: dict[str, Any] = {"concurrency": concurrency, "waves": waves, "budget_ms": budget_ms}
    spec |= {"interval_s": interval_s, "input": question}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config or str(Path(tmp, "burst.toml"))
        if config is None:
            Path(cfg).write_text(BURST_CONFIG, encoding="utf-8")
        port, log = _free_port(), Path(tmp, "server.log")
        proc = _start_server(cfg, port, server_cpu, 0, log)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, proc, log, 120.0)
            httpx.post(f"{url}/v1/gate", json={"input": question, "budget_ms": budget_ms})
            before = _rss_mb(proc.pid)
            rows = _generate(port, spec, client_cpu)
            after = _rss_mb(proc.pid)
        finally:
            stop_process(proc)
    report = {**spec, **summarize(rows, budget_ms)}
    report |= {"rss_mb_before": round(before, 1), "rss_mb_after": round(after, 1)}
    report["pinned"] = two_cores
    return report


@app.command("burst")
def burst(
    concurrency: Annotated[int, typer.Option(min=1, help="simultaneous requests a wave")] = 500,
    waves: Annotated[int, typer.Option(min=1, help="waves")] = 8,
    budget_ms: Annotated[float, typer.Option(min=1, help="budget of each request")] = 300.0,
    interval_s: Annotated[float, typer.Option(min=0, help="seconds between waves")] = 2.5,
    config: Annotated[Path | None, typer.Option(help="server config (default: lean)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Waves of simultaneous requests against a real server: is any answer late?"""
    report = run(concurrency, waves, budget_ms, interval_s=interval_s, config=_opt(config))
    rows = [(k, str(report[k])) for k in ("sent", "answered", "shed", "server_errors")]
    rows += [
        ("over budget (client / server)", f"{report['over_budget_client']} / "
         f"{report['over_budget_server']}"),
        ("client p50 / p99 / max", f"{report['p50_ms']} / {report['p99_ms']} / "
         f"{report['max_ms']} ms"),
        ("server RSS before / after", f"{report['rss_mb_before']} / {report['rss_mb_after']} MB"),
    ]  # fmt: skip
    show_table(f"rtgate bench burst ({concurrency} x {waves}, {budget_ms:g} ms)", rows)
    write_json(report, json_out)


def _opt(path: Path | None) -> str | None:
    return None if path is None else str(path)

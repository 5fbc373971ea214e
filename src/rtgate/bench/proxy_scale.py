"""``rtgate bench proxy-scale``: rtgate as a pure proxy with more workers, and past its
capacity.

``rtgate bench proxy`` drives rtgate from a Python generator against a Python upstream,
which take a core between them: on two cores nothing is left for a second worker. Here
both are native programs that cost a small share of a core:

- the upstream is nginx answering one fixed chat completion (``return 200``);
- the generator is wrk (closed loop: each connection asks again once answered).

**Scaling**: for each worker count, rtgate's closed-loop throughput, wrk's latency
percentiles, non-200 answers, and the cores each process used (rtgate's workers, nginx,
wrk), so the cores left for rtgate are measured, not assumed.

**Overload** (needs a writable cgroup CPU controller, as root): one worker capped by the
kernel at ``--overload-cpu`` of a core (CFS bandwidth control, as a container's CPU limit),
its capacity measured with wrk, then the open-loop generator of ``rtgate bench proxy``
(:mod:`rtgate.bench._loadgen`, latency from each request's due time) at multiples of that
capacity over many connections, so the queue builds in rtgate and not in the generator.
Per rate: answers by status, the latency of each, and answers later than the budget.
Past capacity rtgate should refuse at once (``503 overloaded``) what it cannot start in
time, and every ``200`` should still come within the budget.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from rtgate.bench._bare_upstream import MODEL, chat_answer
from rtgate.bench._loadgen import open_loop
from rtgate.bench.http import _cpu_s, _free_port
from rtgate.bench.proxy import EXPECT, _all_workers_up, _payload, _process, _rtgate_config
from rtgate.cli.output import show_table, write_json

__all__ = ["CgroupCpuCap", "app", "parse_wrk", "run"]

app = typer.Typer()

ANSWER = json.dumps(chat_answer(MODEL, 0), separators=(",", ":"))
MODELS = json.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]},
    separators=(",", ":"),
)
BUDGET_MS = 1000.0  # the overload run's budget per request (X-Budget-Ms)
MULTIPLES = (0.5, 1.0, 2.0, 3.0)

_BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
_WRK_LUA = f"""\
wrk.method = "POST"
wrk.body = '{_BODY}'
wrk.headers["Content-Type"] = "application/json"
"""


def missing_tools() -> list[str]:
    """The native programs this benchmark needs and this machine lacks (Debian: ``wrk``,
    ``nginx-light``)."""
    return [t for t in ("wrk", "nginx") if shutil.which(t) is None]


# -- nginx as the upstream ---------------------------------------------------------------


def _nginx_conf(root: Path, port: int) -> str:
    return f"""\
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {root}/body;
  keepalive_requests 10000000;
  server {{
    listen 127.0.0.1:{port};
    location /v1/models {{ default_type application/json; return 200 '{MODELS}'; }}
    location /v1/chat/completions {{ default_type application/json; return 200 '{ANSWER}'; }}
  }}
}}
"""


@contextmanager
def _nginx(tmp: Path) -> Iterator[tuple[int, int]]:
    """nginx answering a chat completion at once; (pid of its worker, port)."""
    root = tmp / "nginx"
    root.mkdir()
    port = _free_port()
    (root / "nginx.conf").write_text(_nginx_conf(root, port), encoding="utf-8")
    cmd = ["nginx", "-c", str(root / "nginx.conf"), "-p", str(root)]
    with _process(cmd, None, root / "out.log", f"http://127.0.0.1:{port}/v1/models") as pid:
        kids = _children(pid)
        yield (kids[0] if kids else pid), port


def _children(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# -- wrk as the closed-loop generator ----------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if m is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(m[1]) * _UNITS[m[2]]


def parse_wrk(out: str) -> dict[str, Any]:
    """wrk's ``--latency`` report as numbers: requests/s, latency percentiles (ms), answers
    that were not 2xx/3xx, and socket errors."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if rps is None or total is None:
        raise ValueError(f"not a wrk report:\n{out[-1000:]}")
    pct = {f"p{m[1]}_ms": _ms(m[2]) for m in re.finditer(r"^\s+(\d+)%\s+(\S+)$", out, re.M)}
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    requests, bad_n = int(total[1]), int(bad[1]) if bad else 0
    return {
        "requests": requests,
        "rps": float(rps[1]),
        # wrk's requests/s counts every answer; this counts the 2xx ones only (the share
        # first: exactly 1.0 when every answer was 2xx, so never over ``rps``)
        "ok_rps": float(rps[1]) * ((requests - bad_n) / max(1, requests)),
        **pct,
        "non_2xx": bad_n,
        "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0,
    }


def _measure(
    port: int,
    seconds: float,
    connections: int,
    script: Path,
    parts: dict[str, list[int]],
) -> dict[str, Any]:
    """One wrk run on ``port``; its report and the cores each of ``parts`` used (CPU
    seconds over the run's wall seconds), wrk's own included."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "-s", str(script)]
    proc = subprocess.Popen([*cmd, url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pids = {**parts, "wrk": [proc.pid]}
    cpu0 = {k: sum(_cpu_s(p) for p in v) for k, v in pids.items()}
    t0 = time.monotonic()
    time.sleep(max(0.0, seconds - 0.2))  # wrk exits at its own end: read its CPU before
    cpu1 = {k: sum(_cpu_s(p) for p in v) for k, v in pids.items()}
    wall = time.monotonic() - t0
    out, _ = proc.communicate(timeout=seconds + 30)
    report = parse_wrk(out.decode("utf-8", "replace"))
    report["cores"] = {k: round((cpu1[k] - cpu0[k]) / wall, 3) for k in pids}
    return report


# -- a CPU cap through the kernel (cgroup v2 or v1) --------------------------------------


class CgroupCpuCap:
    """A cgroup whose processes together get at most ``cores`` of a CPU (CFS bandwidth
    control, over ``period_us``): a container's CPU limit. ``None`` from :meth:`make` when
    no cgroup CPU controller is writable here (not root, or none mounted)."""

    def __init__(self, path: Path, v2: bool) -> None:
        self.path, self.v2 = path, v2

    @classmethod
    def make(cls, name: str, cores: float, period_us: int = 10_000) -> CgroupCpuCap | None:
        quota = max(1000, round(cores * period_us))
        for base, v2 in ((Path("/sys/fs/cgroup"), True), (Path("/sys/fs/cgroup/cpu"), False)):
            if v2 and not (base / "cgroup.controllers").exists():
                continue
            if not v2 and not (base / "cpu.cfs_quota_us").exists():
                continue
            path = base / name
            try:
                path.mkdir(exist_ok=True)
                if v2:
                    (path / "cpu.max").write_text(f"{quota} {period_us}")
                else:
                    (path / "cpu.cfs_period_us").write_text(str(period_us))
                    (path / "cpu.cfs_quota_us").write_text(str(quota))
            except OSError:
                continue
            return cls(path, v2)
        return None

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def throttled_s(self) -> float:
        """Seconds the group's processes were held back by the cap so far."""
        try:
            text = (self.path / "cpu.stat").read_text()
        except OSError:
            return float("nan")
        key = "throttled_usec" if self.v2 else "throttled_time"
        scale = 1e-6 if self.v2 else 1e-9
        m = re.search(rf"^{key} (\d+)", text, re.M)
        return int(m[1]) * scale if m else float("nan")

    def remove(self) -> None:
        parent = self.path.parent / "cgroup.procs"
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                parent.write_text(pid)
            self.path.rmdir()
        except OSError:
            pass


# -- the runs ----------------------------------------------------------------------------


@contextmanager
def _rtgate(
    tmp: Path, upstream_port: int, workers: int, cap: CgroupCpuCap | None = None
) -> Iterator[tuple[list[int], int]]:
    """``rtgate serve --workers N`` as a pure proxy to the upstream; (its pids, port). With
    ``cap``, the serving process is put in that cgroup before it takes traffic."""
    cfg = tmp / f"rtgate-{workers}.toml"
    cfg.write_text(_rtgate_config(upstream_port, workers), encoding="utf-8")
    port = _free_port()
    cmd = [sys.executable, "-m", "rtgate.cli.serve", "serve", "--config", str(cfg)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    ready = f"http://127.0.0.1:{port}/healthz"
    with _process(cmd, None, tmp / f"rtgate-{workers}.log", ready) as pid:
        _all_workers_up(ready, workers)
        pids = [pid, *_children(pid)]
        if cap is not None:
            for p in pids:
                cap.add(p)
        yield pids, port


def scaling(
    tmp: Path,
    upstream: tuple[int, int],
    workers: Sequence[int],
    seconds: float,
    connections: int,
    script: Path,
) -> dict[str, Any]:
    """Closed-loop throughput through rtgate with each worker count, and the upstream's
    alone; the cores each process used."""
    nginx_pid, up_port = upstream
    out: dict[str, Any] = {
        "upstream_alone": _measure(
            up_port, min(seconds, 3.0), connections, script, {"nginx": [nginx_pid]}
        )
    }
    for n in workers:
        with _rtgate(tmp, up_port, n) as (pids, port):
            parts = {"rtgate": pids, "nginx": [nginx_pid]}
            _measure(port, 2.0, connections, script, parts)  # warm: pools, caches
            out[str(n)] = _measure(port, seconds, connections, script, parts)
    first = out[str(workers[0])]
    for n in workers:
        m = out[str(n)]
        m["vs_first"] = round(m["ok_rps"] / max(1e-9, first["ok_rps"]), 3)
        left = (os.cpu_count() or 1) - m["cores"]["nginx"] - m["cores"]["wrk"]
        m["cores_left_for_rtgate"] = round(left, 3)
    return out


def _payload_with_budget(port: int, budget_ms: float) -> list[bytes]:
    raw = _payload(port)[0]
    head, body = raw.split(b"\r\n\r\n", 1)
    return [head + f"\r\nX-Budget-Ms: {budget_ms:g}".encode() + b"\r\n\r\n" + body]


def overload(
    tmp: Path,
    upstream: tuple[int, int],
    cores: float,
    multiples: Sequence[float],
    seconds: float,
    connections: int,
    script: Path,
    budget_ms: float = BUDGET_MS,
) -> dict[str, Any]:
    """One worker capped at ``cores``: its capacity (wrk, 64 connections), then the
    open-loop generator at ``multiples`` of it over ``connections`` connections."""
    cap = CgroupCpuCap.make(f"rtgate-bench-{os.getpid()}", cores)
    if cap is None:
        return {"skipped": "no writable cgroup CPU controller here (run as root)"}
    nginx_pid, up_port = upstream
    out: dict[str, Any] = {"cpu_cap_cores": cores, "budget_ms": budget_ms, "rates": {}}
    try:
        with _rtgate(tmp, up_port, 1, cap) as (pids, port):
            parts = {"rtgate": pids, "nginx": [nginx_pid]}
            _measure(port, 2.0, 64, script, parts)  # warm
            capacity = _measure(port, min(seconds, 5.0), 64, script, parts)
            out["capacity"] = capacity
            payload = _payload_with_budget(port, budget_ms)
            for k in multiples:
                rate = max(1.0, round(capacity["ok_rps"] * k))
                throttled0 = cap.throttled_s()
                run = open_loop(
                    "127.0.0.1",
                    port,
                    payload,
                    rate,
                    seconds,
                    min(1.0, seconds / 4),
                    connections,
                    budget_ms / 1000.0 + 10.0,
                    EXPECT,
                )
                r = asyncio.run(run)
                out["rates"][f"{k:g}x"] = _overload_row(r, rate, budget_ms)
                out["rates"][f"{k:g}x"]["throttled_s"] = round(cap.throttled_s() - throttled0, 3)
    finally:
        cap.remove()
    return out


def _overload_row(r: dict[str, Any], rate: float, budget_ms: float) -> dict[str, Any]:
    by = r["latency_by_status_ms"]
    ok = by.get("200")
    return {
        "rate": rate,
        "requests": r["requests"],
        "answered_by_status": r["answered_by_status"],
        "other_errors": {k: n for k, n in r["errors"].items() if not k.startswith("http_")},
        "ok_share": round(r["answered_by_status"].get("200", 0) / max(1, r["requests"]), 4),
        "latency_by_status_ms": {
            k: {q: round(v[q], 3) for q in ("p50", "p99", "max")} for k, v in by.items()
        },
        "ok_p99_within_budget": ok is not None and ok["p99"] <= budget_ms,
        # the generator's own lag sending (its latencies count from each request's due time)
        "send_lag_p99_ms": round(r["send_lag_ms"]["p99"], 3),
        "ok_max_ms": None if ok is None else round(ok["max"], 3),
    }


def run(
    workers: Sequence[int] = (1, 2),
    seconds: float = 10.0,
    connections: int = 64,
    overload_cores: float | None = 0.25,
    multiples: Sequence[float] = MULTIPLES,
    overload_connections: int = 1024,
) -> dict[str, Any]:
    """Start nginx, run the scaling runs, then (unless ``overload_cores`` is None) the
    overload runs; the report."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(
            f"rtgate bench proxy-scale needs {' and '.join(missing)} "
            "(Debian: apt-get install wrk nginx-light)"
        )
    report: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "seconds": seconds,
        "connections": connections,
    }
    with tempfile.TemporaryDirectory(prefix="rtgate-bench-scale-") as name:
        tmp = Path(name)
        script = tmp / "post.lua"
        script.write_text(_WRK_LUA, encoding="utf-8")
        with _nginx(tmp) as upstream:
            report["scaling"] = scaling(tmp, upstream, workers, seconds, connections, script)
            if overload_cores is not None:
                report["overload"] = overload(
                    tmp, upstream, overload_cores, multiples, seconds, overload_connections, script
                )
    return report


@app.command("proxy-scale")
def proxy_scale(
    workers: Annotated[list[int] | None, typer.Option(help="worker counts (repeat)")] = None,
    seconds: Annotated[float, typer.Option(min=1, help="measured seconds per run")] = 10.0,
    connections: Annotated[int, typer.Option(min=1, help="wrk's connections")] = 64,
    overload_cpu: Annotated[
        float, typer.Option(min=0, help="the overload run's CPU cap in cores (0: no run)")
    ] = 0.25,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """rtgate as a proxy with N workers (wrk and nginx: native, cheap), and past capacity."""
    report = run(workers or [1, 2], seconds, connections, overload_cpu or None)
    rows = []
    for name, m in report["scaling"].items():
        rows.append(
            (
                f"{name} workers" if name.isdigit() else name,
                f"{m['ok_rps']:.0f} req/s, p50 {m['p50_ms']:.2f} / p99 {m['p99_ms']:.2f} ms, "
                f"non-2xx {m['non_2xx']}, cores {m['cores']}",
            )
        )
    over = report.get("overload", {})
    if "skipped" in over:
        rows.append(("overload", over["skipped"]))
    elif over:
        rows.append(
            (
                "overload capacity",
                f"{over['capacity']['rps']:.0f} req/s at {over['cpu_cap_cores']} core",
            )
        )
        for k, m in over["rates"].items():
            rows.append(
                (
                    f"overload {k} ({m['rate']:g}/s)",
                    f"by status {m['answered_by_status']}, other {m['other_errors']}, "
                    f"latency {m['latency_by_status_ms']}",
                )
            )
    show_table("rtgate bench proxy-scale", rows)
    write_json(report, json_out)

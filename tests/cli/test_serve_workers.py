"""rtgate serve --workers N: several processes on one socket, refused without a shared
job store, all stopped by one SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

CONFIG = """\
[server]
log_level = "warning"
discover_routers = false
[gate]
warmup = false
[local]
enabled = false
[cloud]
enabled = false
[delegation]
backend = "{backend}"
prefix = "rtgate-workers-test"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(tmp: Path, backend: str, port: int) -> subprocess.Popen[bytes]:
    cfg = tmp / "rtgate.toml"
    cfg.write_text(CONFIG.format(backend=backend), encoding="utf-8")
    cmd = [sys.executable, "-m", "rtgate", "serve", "--config", str(cfg), "--port", str(port)]
    return subprocess.Popen(
        [*cmd, "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def test_without_a_shared_job_store_several_workers_are_refused(tmp_path: Path) -> None:
    proc = _serve(tmp_path, "inprocess", _free_port())
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and b"redis" in out


@pytest.mark.slow
def test_two_workers_answer_and_one_sigterm_stops_them(tmp_path: Path) -> None:
    port = _free_port()
    proc = _serve(tmp_path, "redis", port)
    pids: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while len(pids) < 2 and time.monotonic() < deadline:
            try:  # a new connection each time: the kernel spreads them over the workers
                pids.add(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()["pid"])
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)  # the workers are still starting (a real server, not a test clock)
        workers = _children(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert len(pids) == 2 and pids <= set(workers)
    # the workers are joined before the parent exits; multiprocessing's resource tracker, a
    # child too, ends by itself when the parent's pipe closes: give it a moment (seen
    # outliving the parent by a few milliseconds on a loaded machine)
    assert all(_gone(w) for w in pids)
    deadline = time.monotonic() + 10
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)  # a real process's exit: no event to wait on across processes
    assert all(_gone(w) for w in workers)
    assert os.getpid() not in pids


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists() or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_each_worker_gets_its_own_socket_on_one_port() -> None:
    from rtgate.cli.serve import reuseport_sockets

    socks = reuseport_sockets("127.0.0.1", 0, 3)
    try:
        ports = {s.getsockname()[1] for s in socks}
        assert len(socks) == 3 and len(ports) == 1 and len({s.fileno() for s in socks}) == 3
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in socks)
        (port,) = ports
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the kernel hands it to one of them
    finally:
        for s in socks:
            s.close()

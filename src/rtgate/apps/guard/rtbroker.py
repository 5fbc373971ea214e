"""A private Mosquitto at a real-time priority, for measuring the stop path as deployed.

The stop's way to the plant crosses the broker. With the stop path and the subscriber at
``SCHED_FIFO`` but the broker at normal priority, a busy machine makes the broker wait for a
CPU: on the shared 2-core machine that is the whole window end -> subscriber tail (p99.9 of
tens of milliseconds). A plant runs the broker like the stop path (``chrt -f 50 mosquitto``
or systemd ``CPUSchedulingPolicy=fifo``); ``realtime_broker`` does the same for a benchmark.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rtgate.core.errors import ConfigError

__all__ = ["realtime_broker"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def realtime_broker(priority: int, start_s: float = 5.0) -> Iterator[str]:
    """Run ``mosquitto`` on a free local port at ``SCHED_FIFO`` ``priority``; yield its URL.

    Raises :class:`ConfigError` when mosquitto is missing or real-time scheduling is not
    allowed. The broker is stopped on exit.
    """
    exe = shutil.which("mosquitto")
    if exe is None:
        raise ConfigError("mosquitto is not installed")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="rtgate-broker-") as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        proc = subprocess.Popen(
            [exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            try:
                os.sched_setscheduler(proc.pid, os.SCHED_FIFO, os.sched_param(priority))
            except (OSError, AttributeError) as e:
                raise ConfigError(f"cannot run the broker at SCHED_FIFO {priority}: {e}") from e
            end = time.monotonic() + start_s
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > end:
                        raise ConfigError("the private mosquitto did not start") from None
                    time.sleep(0.01)
            yield f"mqtt://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

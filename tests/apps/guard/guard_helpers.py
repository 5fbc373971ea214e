"""Helpers for the guard tests: a recording MQTT subscriber, a private broker, a recording
sink and the real detector with its scores pinned."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.events import StopMessage
from rtgate.apps.guard.features import RATE

SHARED_BROKER = ("127.0.0.1", 1883)


@dataclass
class Subscriber:
    """A real MQTT subscriber that records (receipt time, payload) per message."""

    got: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    event: threading.Event = field(default_factory=threading.Event)
    client: Any = None

    def wait(self, n: int = 1, timeout: float = 5.0) -> bool:
        end = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < end:
            self.event.wait(0.05)
            self.event.clear()
        return len(self.got) >= n


def subscribe(host: str, port: int, topic: str, client_id: str | None = None) -> Subscriber:
    sub = Subscriber()
    ready = threading.Event()
    c = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id or f"test-sub-{uuid.uuid4().hex[:8]}",
        clean_session=client_id is None,
    )

    def on_message(cl: Any, u: Any, m: Any) -> None:
        if not m.payload:  # a retained message being cleared
            return
        sub.got.append((time.time(), json.loads(m.payload)))
        sub.event.set()

    c.on_connect = lambda cl, u, f, rc, p: cl.subscribe(topic, qos=1)
    c.on_subscribe = lambda *a: ready.set()
    c.on_message = on_message
    c.connect(host, port, keepalive=10)
    c.loop_start()
    assert ready.wait(5.0), "could not subscribe"
    sub.client = c
    return sub


def clear_retained(topic: str) -> None:
    """Leave no retained message behind on the shared broker."""
    import paho.mqtt.publish as single

    host, port = SHARED_BROKER
    single.single(topic, b"", qos=1, retain=True, hostname=host, port=port)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateBroker:
    """Our own ``mosquitto -p PORT``, which a test may stop and start again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mosquitto", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("private mosquitto did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(5)
            self.proc = None


class PinnedScore(Detector):
    """The real detector (its features, state and shapes), but every window scores ``score``:
    1.0 makes each tick decide stops, 0.0 leaves only the rules' own clauses to stop."""

    def __init__(self, n: int, score: float) -> None:
        super().__init__(n_streams=n)
        self.score = score
        self.calls = 0

    def step(self, features: npt.ArrayLike, rows: npt.ArrayLike | None = None) -> Any:
        self.calls += 1
        out = np.full_like(super().step(features, rows), self.score)
        p = min(max(self.score, 2.0**-24), 1.0 - 2.0**-24)
        sel = slice(None) if rows is None else np.asarray(rows, np.int64)
        self.last_logit[sel] = np.log(p / (1.0 - p))
        return out


class RecordingSink:
    """A stop sink that keeps every message it is given, in order."""

    def __init__(self) -> None:
        self.got: list[StopMessage] = []

    def publish(self, topic: str, msg: StopMessage) -> int:
        self.got.append(msg)
        return len(self.got)


def station_sound(
    seconds: float,
    seed: int,
    defect_hz: float | None = None,
    db: float = -8.0,
    shaft_hz: float | None = None,
) -> npt.NDArray[np.float32]:
    """A station's sound for the envelope clauses' tests: broadband noise over 2-8 kHz,
    amplitude-modulated at its own 53 Hz (a blade pass: a comb it always has); with
    ``shaft_hz``, its shaft's first six harmonics (what the speed is read from); with
    ``defect_hz``, impacts at that rate ringing 6.2 kHz, ``db`` (RMS) under the noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / RATE)
    spec[(f < 2000) | (f > 7900)] = 0
    x = np.fft.irfft(spec, n)
    t = np.arange(n) / RATE
    x *= 1.0 + 0.3 * np.sin(2 * np.pi * 53.0 * t)
    x /= x.std()
    if shaft_hz is not None:
        for k in range(1, 7):
            x += 0.4 * 0.7**k * np.sin(2 * np.pi * k * shaft_hz * t + rng.uniform(0, 6.3))
    if defect_hz is not None:
        d = np.zeros(n)
        d[(np.arange(0, seconds, 1 / defect_hz) * RATE).astype(np.int64)] = 1.0
        h = np.exp(-2 * np.pi * 0.03 * 6200 * t[:200]) * np.sin(2 * np.pi * 6200 * t[:200])
        d = np.convolve(d, h)[:n]
        x += d / d.std() * 10 ** (db / 20)
    out: npt.NDArray[np.float32] = (0.05 * x).astype(np.float32)
    return out

"""The stop path end to end with a real Mosquitto: no stop on normal sound, a stop on a fault
that reaches the subscriber before the work order, the inline ablation, the fail-safe."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.events import StopMessage
from rtgate.apps.guard.explain_worker import ExplainWorker, StopContext
from rtgate.apps.guard.features import HOP
from rtgate.apps.guard.mqtt import AuditLog, Broker, StopPublisher, command_failsafe
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.apps.guard.simulate import Clip
from rtgate.apps.guard.store import WorkOrder, WorkOrderStore
from rtgate.core.errors import InvalidRequest
from tests.apps.guard.guard_helpers import (
    SHARED_BROKER,
    PrivateBroker,
    Subscriber,
    clear_retained,
    subscribe,
)

pytestmark = pytest.mark.slow


def _record(orders: list[WorkOrder], done: threading.Event, order: WorkOrder) -> None:
    orders.append(order)
    done.set()


class GatedExplainer:
    """An explainer that finishes only when the test opens the gate; counts completions."""

    name = "gated"

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.started = threading.Event()
        self.completed = 0

    async def explain(self, context: StopContext) -> str:
        self.started.set()
        if self.gate is not None:
            while not self.gate.is_set():
                await asyncio.to_thread(self.gate.wait, 0.05)
        self.completed += 1
        return f"{context.station}工位疑似轴承外圈损伤"


def _replay(guard: Guard, clip: Clip) -> tuple[list[Any], float]:
    """Feed a clip as fast as possible, stamped as if it had just been recorded."""
    stops = []
    n = len(clip.audio) // HOP
    t0 = time.time() - n * HOP / 16000
    for i in range(n):
        w = clip.audio[i * HOP : (i + 1) * HOP][None]
        stops += guard.process(w, t0 + (i + 1) * HOP / 16000)
    return stops, t0


def _publisher(host: str, port: int, **kw: Any) -> StopPublisher:
    return StopPublisher(Broker(host, port), f"test-pub-{uuid.uuid4().hex[:8]}", **kw)


@pytest.fixture(scope="module")
def detector_pool() -> list[Detector]:
    return [Detector() for _ in range(4)]


def _guard(det: Detector, topic_root: str, sink: Any, **kw: Any) -> Guard:
    det.reset()
    rules = Rules(Rule(topic=f"{topic_root}/{{station}}/stop", cooldown_s=60))
    return Guard(["C"], rules, sink, detector=det, **kw)


def test_normal_sound_makes_no_stop(
    normal_clip: Clip, detector_pool: list[Detector], topic_root: str
) -> None:
    published: list[StopMessage] = []

    class Sink:
        def publish(self, topic: str, msg: StopMessage) -> int:
            published.append(msg)
            return 1

    guard = _guard(detector_pool[0], topic_root, Sink())
    assert normal_clip.impacts_s, "the normal clip should contain benign knocks"
    assert _replay(guard, normal_clip)[0] == []
    assert published == []
    assert float(guard.last_scores[0]) < 0.92


def test_fault_stop_reaches_mqtt_before_the_work_order(
    fault_clip: Clip,
    detector_pool: list[Detector],
    topic_root: str,
    shared_sub: Subscriber,
    tmp_db: Path,
) -> None:
    gate = threading.Event()
    explainer = GatedExplainer(gate)
    orders: list[WorkOrder] = []
    done = threading.Event()
    worker = ExplainWorker(
        WorkOrderStore(tmp_db),
        explainer,
        budget_s=30.0,
        on_order=lambda o: _record(orders, done, o),
    ).start()
    pub = _publisher(*SHARED_BROKER)
    assert pub.start()
    guard = _guard(detector_pool[1], topic_root, pub, on_stop=worker.offer)
    try:
        stops, t0 = _replay(guard, fault_clip)
        assert len(stops) == 1
        assert stops[0].message.window_end_ts >= t0 + fault_clip.onset_s  # type: ignore[operator]
        assert shared_sub.wait(1)
        received_at, msg = shared_sub.got[0]
        # the stop is at the subscriber while the explainer is still working: nothing waited
        assert explainer.completed == 0 and orders == []
        assert explainer.started.wait(5.0)
        gate.set()
        assert done.wait(10.0)
    finally:
        worker.stop()
        pub.close()
    assert set(msg) == {"station", "score", "ts", "window_end_ts", "rule"}
    assert msg["station"] == "C" and msg["score"] >= 0.92
    assert msg["window_end_ts"] <= msg["ts"] <= received_at
    assert msg["rule"] in (
        "default: score>=0.92 in 2 of 3 windows",
        "default: score>=0.995 in 1 window",
    )
    order = orders[0]
    assert order.created_ts > received_at
    assert order.stop_ts == msg["ts"] and order.explainer == "gated"
    assert WorkOrderStore(tmp_db).list()[0].explanation == "C工位疑似轴承外圈损伤"


def test_inline_ablation_puts_the_explainer_before_the_stop(
    fault_clip: Clip,
    detector_pool: list[Detector],
    topic_root: str,
    shared_sub: Subscriber,
    tmp_db: Path,
) -> None:
    explainer = GatedExplainer()  # no gate: completes as soon as it runs
    worker = ExplainWorker(WorkOrderStore(tmp_db), explainer, budget_s=30.0).start()
    pub = _publisher(*SHARED_BROKER)
    assert pub.start()
    completed_at_publish: list[int] = []

    class CountingSink:
        def publish(self, topic: str, msg: StopMessage) -> int:
            completed_at_publish.append(explainer.completed)
            return pub.publish(topic, msg)

    guard = _guard(detector_pool[2], topic_root, CountingSink(), before_publish=worker.inline)
    try:
        stops, _ = _replay(guard, fault_clip)
        assert shared_sub.wait(1)
    finally:
        worker.stop()
        pub.close()
    assert len(stops) == 1
    # inline: the explanation was finished (and stored) before the stop left; the normal
    # path (test above) publishes with zero explanations done
    assert completed_at_publish == [1]
    order = WorkOrderStore(tmp_db).list()[0]
    received_at, msg = shared_sub.got[0]
    assert order.created_ts <= msg["ts"] <= received_at
    assert stops[0].decided_ts <= order.created_ts


def test_broker_down_runs_the_failsafe_and_delivers_later(
    fault_clip: Clip,
    detector_pool: list[Detector],
    topic_root: str,
    private_broker: PrivateBroker,
    tmp_path: Path,
) -> None:
    actions: list[tuple[str, str]] = []
    second = threading.Event()

    def failsafe(m: StopMessage, why: str) -> None:
        actions.append((m.station, why))
        if len(actions) == 2:
            second.set()

    audit = AuditLog(tmp_path / "audit.jsonl")
    pub = _publisher(
        "127.0.0.1",
        private_broker.port,
        failsafe=failsafe,
        audit=audit,
        ack_timeout_s=0.3,
    )
    assert not pub.start(wait_s=0.2)  # nobody listens on that port yet
    guard = _guard(detector_pool[3], topic_root, pub)
    stops, _ = _replay(guard, fault_clip)
    assert len(stops) == 1
    # the fail-safe ran on the stop path itself, before process() returned
    assert actions == [("C", "broker unreachable: stop queued for delivery")]
    assert pub.pending == 1
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert any('"event": "failsafe"' in line for line in lines)

    private_broker.start()
    sub = subscribe("127.0.0.1", private_broker.port, f"{topic_root}/#")
    try:
        assert sub.wait(1, timeout=10.0), "queued stop not delivered after the broker came back"
        assert sub.got[0][1]["station"] == "C"
        assert pub.wait_delivered(5.0)

        # a broker that hangs (stopped process): no PUBACK in time -> fail-safe, then delivery
        assert private_broker.proc is not None
        private_broker.proc.send_signal(signal.SIGSTOP)
        now = time.time()
        pub.publish(f"{topic_root}/C/stop", StopMessage("C", 0.99, now, now, "test"))
        assert second.wait(10.0), "no fail-safe for a broker that does not answer"
        assert actions[1] == ("C", "no PUBACK within 0.3 s")
        private_broker.proc.send_signal(signal.SIGCONT)
        assert sub.wait(2, timeout=10.0)
        assert pub.wait_delivered(5.0)
    finally:
        sub.client.disconnect()
        sub.client.loop_stop()
        pub.close()
    events = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sum('"event": "stop_delivered"' in e for e in events) == 2


def test_status_is_online_while_connected_and_offline_after_close(
    topic_root: str, shared_sub: Subscriber
) -> None:
    status = f"{topic_root}/status"
    pub = _publisher(*SHARED_BROKER, status_topic=status)
    try:
        assert pub.start()
        assert shared_sub.wait(1)
        online = shared_sub.got[0][1]
        assert online["state"] == "online" and online["client_id"] == pub.client_id
        pub.close()
        assert shared_sub.wait(2)
        offline = shared_sub.got[1][1]
        assert offline["state"] == "offline" and offline["reason"] == "closed"
        assert pub.delivered == 0 and pub.pending == 0  # status messages are not stops
    finally:
        clear_retained(status)


_GUARD_THAT_HANGS = """
import sys
from rtgate.apps.guard.mqtt import Broker, StopPublisher
pub = StopPublisher(Broker("127.0.0.1", 1883), sys.argv[2], status_topic=sys.argv[1])
print("connected" if pub.start(5.0) else "no broker", flush=True)
sys.stdin.read()
"""


def test_the_broker_marks_a_killed_guard_offline(topic_root: str, shared_sub: Subscriber) -> None:
    import subprocess

    status = f"{topic_root}/status"
    client_id = f"test-dying-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-c", _GUARD_THAT_HANGS, status, client_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
        assert shared_sub.wait(1)
        assert shared_sub.got[0][1]["state"] == "online"
        proc.send_signal(signal.SIGKILL)  # no DISCONNECT: the broker publishes the will
        proc.wait(10)
        assert shared_sub.wait(2, timeout=10.0)
        will = shared_sub.got[1][1]
        assert will == {"state": "offline", "client_id": client_id, "reason": "connection lost"}
    finally:
        proc.kill()
        clear_retained(status)


def test_a_status_topic_must_be_a_topic_name() -> None:
    for bad in ("", "a/#", "a/+/b"):
        with pytest.raises(InvalidRequest, match="status topic"):
            StopPublisher(Broker(), "x", status_topic=bad)


def test_command_failsafe_runs_a_command_with_the_stop(tmp_path: Path) -> None:
    out = tmp_path / "stop.json"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ['RTGATE_STOP'])"
    action = command_failsafe(f"{sys.executable} -c {code!r}".replace("'", '"', 0))
    action(StopMessage("C", 0.97, 1.0, 0.5, "r"), "test")
    for _ in range(500):
        if out.exists() and out.read_text():
            break
        time.sleep(0.01)
    assert '"station": "C"' in out.read_text()
    with pytest.raises(InvalidRequest):
        command_failsafe("   ")


def test_broker_urls() -> None:
    assert Broker.parse("mqtt://10.0.0.5:1884") == Broker("10.0.0.5", 1884)
    assert Broker.parse("localhost") == Broker("localhost", 1883)
    for bad in ("http://x:1", "mqtt://:1883", "mqtt://h:notaport"):
        with pytest.raises(InvalidRequest):
            Broker.parse(bad)


def test_batch_of_streams_equals_separate_streams(fault_clip: Clip, normal_clip: Clip) -> None:
    clips = [fault_clip.audio, normal_clip.audio]
    batch = Detector(n_streams=2)
    single = [Detector(), Detector()]
    from rtgate.apps.guard.features import WindowFeatures

    wf = WindowFeatures()
    for i in range(100):
        w = np.stack([c[i * HOP : (i + 1) * HOP] for c in clips])
        f = wf(w)
        b = batch.step(f)
        s = [single[j].step(f[j : j + 1])[0] for j in range(2)]
        np.testing.assert_allclose(b, s, rtol=1e-4, atol=1e-5)

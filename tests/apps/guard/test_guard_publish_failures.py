"""Whatever goes wrong with a publish, the fail-safe runs and the audit says so; ``lost``
counts the stops that reached neither the broker nor a fail-safe."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.enums import MQTTErrorCode

from rtgate.apps.guard.events import StopMessage
from rtgate.apps.guard.mqtt import AuditLog, Broker, StopPublisher
from tests.apps.guard.guard_helpers import SHARED_BROKER, PrivateBroker

pytestmark = pytest.mark.slow  # a real broker


class Recorder:
    """A fail-safe that records its calls and can be told to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail
        self.called = threading.Event()

    def __call__(self, msg: StopMessage, reason: str) -> None:
        self.calls.append((msg.station, reason))
        self.called.set()
        if self.fail:
            raise RuntimeError("relay stuck")


def _stop() -> StopMessage:
    now = time.time()
    return StopMessage("C", 0.99, now, now, "test")


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def connected(tmp_path: Path) -> Iterator[tuple[StopPublisher, Recorder, Path]]:
    """A publisher connected to the shared broker, with a recording fail-safe and audit."""
    audit = tmp_path / "audit.jsonl"
    safe = Recorder()
    pub = StopPublisher(
        Broker(*SHARED_BROKER),
        f"test-pub-{uuid.uuid4().hex[:8]}",
        failsafe=safe,
        audit=AuditLog(audit),
    )
    assert pub.start()
    yield pub, safe, audit
    pub.close()


@pytest.mark.parametrize(
    "error", [ValueError("Publish topic cannot contain wildcards."), OSError(32, "Broken pipe")]
)
def test_a_publish_that_raises_runs_the_failsafe_and_is_audited(
    connected: tuple[StopPublisher, Recorder, Path],
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
) -> None:
    pub, safe, audit = connected

    def explode(*a: Any, **k: Any) -> Any:
        raise error

    monkeypatch.setattr(pub._client, "publish", explode)  # the seam: paho's publish
    assert pub.publish("rtgate-test/x/C/stop", _stop()) == 0  # no exception
    assert safe.calls == [("C", f"publish failed: {type(error).__name__}: {error}")]
    lines = _audit(audit)
    assert [e["event"] for e in lines if e["event"] != "broker_connected"] == [
        "stop_not_sent",
        "failsafe",
    ]
    assert lines[-1]["action"] == "ran" and lines[-1]["station"] == "C"
    assert pub.lost == 0  # covered by the fail-safe


def test_a_refused_publish_runs_the_failsafe(
    connected: tuple[StopPublisher, Recorder, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pub, safe, _ = connected

    class Refused:
        rc = MQTTErrorCode.MQTT_ERR_PAYLOAD_SIZE
        mid = 7

    monkeypatch.setattr(pub._client, "publish", lambda *a, **k: Refused())
    assert pub.publish("rtgate-test/x/C/stop", _stop()) == 0
    assert len(safe.calls) == 1 and safe.calls[0][1].startswith("publish refused:")


def test_a_wildcard_topic_never_reaches_paho(
    connected: tuple[StopPublisher, Recorder, Path],
) -> None:
    pub, safe, audit = connected
    assert pub.publish("line/+/stop", _stop()) == 0
    assert safe.calls == [
        (
            "C",
            "publish failed: InvalidRequest: stop topic 'line/+/stop' cannot be published "
            "to: wildcards (+, #) are for subscribing, not publishing",
        )
    ]
    assert any(e["event"] == "stop_not_sent" and e["topic"] == "line/+/stop" for e in _audit(audit))


def test_without_a_failsafe_an_unsent_stop_is_audited_and_lost(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "a.jsonl")
    pub = StopPublisher(Broker(*SHARED_BROKER), f"test-pub-{uuid.uuid4().hex[:8]}", audit=audit)
    assert pub.publish("line/#", _stop()) == 0
    assert pub.lost == 1
    assert audit.lines[-1]["event"] == "failsafe" and audit.lines[-1]["action"] == "none"


def test_a_failsafe_that_fails_leaves_the_stop_lost() -> None:
    safe = Recorder(fail=True)
    pub = StopPublisher(Broker(*SHARED_BROKER), "x", failsafe=safe, audit=AuditLog(None))
    pub.publish("line/+", _stop())
    assert safe.calls and pub.lost == 1
    assert pub.audit.lines[-1]["action"] == "failed"


def test_a_stop_queued_for_an_absent_broker_is_lost_until_acknowledged(
    private_broker: PrivateBroker,
) -> None:
    pub = StopPublisher(Broker("127.0.0.1", private_broker.port), f"t-{uuid.uuid4().hex[:8]}")
    try:
        assert not pub.start(wait_s=2.0)  # refused at once: nobody listens yet
        assert pub.publish("rtgate-test/q/C/stop", _stop()) > 0
        assert pub.lost == 1 and pub.audit.lines[-1]["action"] == "none"
        private_broker.start()
        assert pub.wait_delivered(10.0), "queued stop not delivered after the broker came"
        assert pub.lost == 0
    finally:
        pub.close()


def test_close_runs_the_failsafe_for_a_stop_still_without_its_puback(
    private_broker: PrivateBroker,
) -> None:
    import signal

    private_broker.start()
    safe = Recorder()
    pub = StopPublisher(
        Broker("127.0.0.1", private_broker.port),
        f"t-{uuid.uuid4().hex[:8]}",
        failsafe=safe,
        ack_timeout_s=60.0,
    )
    assert pub.start()
    assert private_broker.proc is not None
    private_broker.proc.send_signal(signal.SIGSTOP)  # a broker that does not answer
    try:
        assert pub.publish("rtgate-test/c/C/stop", _stop()) > 0
        assert safe.calls == []  # the PUBACK is not due for a minute
        pub.close(wait_s=0.1)
        assert safe.calls == [("C", "closing with no PUBACK")]
        assert pub.lost == 0
    finally:
        private_broker.proc.send_signal(signal.SIGCONT)


def test_an_audit_file_that_cannot_be_written_does_not_stop_the_failsafe(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "a.jsonl")
    (tmp_path / "a.jsonl").mkdir()  # opening it for append fails
    safe = Recorder()
    pub = StopPublisher(Broker(*SHARED_BROKER), "x", failsafe=safe, audit=audit)
    pub.publish("line/#", _stop())
    assert safe.calls and audit.write_errors == 2  # stop_not_sent and failsafe
    assert audit.lines[-1]["event"] == "failsafe"

"""Publishing stops over MQTT (paho-mqtt 2, QoS 1), with a local fail-safe.

The publisher keeps a persistent session (``clean_session=False``, a fixed client id) and
lets paho queue QoS 1 messages while the broker is away; they are sent when it comes back
(paho reconnects in its own thread). Whenever a stop cannot be handed to a connected broker
at once, or its PUBACK does not come within ``ack_timeout_s``, the fail-safe runs right away
on the caller's thread: a callback (e.g. drive a relay, or run a command) and an audit line.
``publish`` never raises: a topic a client may not publish to, an exception from paho (a
socket error, anything) or a refusal is audited and runs the fail-safe like a broker that
is away. ``lost`` counts the stops that neither reached the broker nor had a fail-safe run.

A stop message is JSON: ``{"station", "score", "ts", "window_end_ts", "rule"}``, times in
UNIX epoch seconds; ``window_end_ts`` is when the last sample of the deciding window arrived.

A guard that has died cannot send a stop, so the line must be able to tell. With a
``status_topic`` the publisher keeps a retained status there (QoS 1): ``{"state": "online",
"client_id", "ts", "stations"}`` on every connection, ``{"state": "offline", ...,
"reason": "closed"}`` on ``close``, and the broker publishes ``{"state": "offline", ...,
"reason": "connection lost"}`` itself (the MQTT last will) when the guard's connection ends
any other way: a crash, a kill, a cable (after 1.5 keep-alives, 7.5 s). A PLC that
subscribes to it treats anything but ``online`` as "not guarded".
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from rtgate.apps.guard.events import StopMessage
from rtgate.apps.guard.topics import check_topic
from rtgate.core.errors import InvalidRequest

__all__ = [
    "AuditLog",
    "Broker",
    "FailSafe",
    "StopMessage",
    "StopPublisher",
    "command_failsafe",
]

log = logging.getLogger("rtgate.guard")


@dataclass(frozen=True, slots=True)
class Broker:
    """Where stops go: ``mqtt://HOST:PORT``."""

    host: str = "127.0.0.1"
    port: int = 1883

    @classmethod
    def parse(cls, url: str) -> Broker:
        u = urlsplit(url if "://" in url else f"mqtt://{url}")
        if u.scheme not in ("mqtt", "tcp") or not u.hostname:
            raise InvalidRequest(f"broker must look like mqtt://HOST:PORT, got {url!r}")
        try:
            port = u.port or 1883
        except ValueError as e:
            raise InvalidRequest(f"bad broker port in {url!r}") from e
        return cls(u.hostname, port)


FailSafe = Callable[[StopMessage, str], None]
"""The local action when a stop may not reach the broker: ``(message, reason)``."""


class AuditLog:
    """Append-only JSON lines (thread-safe): stops, fail-safe actions, deliveries."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self.lines: list[dict[str, Any]] = []  # the last few, for tests and reports
        self.write_errors = 0  # lines kept in memory only (the file could not be written)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **fields: Any) -> None:
        """Append one line. Never raises: a full disk must not take the stop path down (the
        error is logged and counted in ``write_errors``)."""
        entry = {"event": event, "at": time.time(), **fields}
        with self._lock:
            self.lines = [*self.lines[-255:], entry]
            if self.path is None:
                return
            try:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
            except OSError as e:
                self.write_errors += 1
                log.error("audit log %s not written: %s", self.path, e)


def command_failsafe(command: str) -> FailSafe:
    """A fail-safe that starts ``command`` (not waited for) with the stop in ``RTGATE_STOP``."""
    argv = shlex.split(command)
    if not argv:
        raise InvalidRequest("fail-safe command is empty")

    def run(msg: StopMessage, reason: str) -> None:
        env = {"RTGATE_STOP": msg.to_json().decode(), "RTGATE_STOP_REASON": reason}
        subprocess.Popen(argv, env={**_environ(), **env}, stdin=subprocess.DEVNULL)

    return run


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


class StopPublisher:
    """QoS 1 stop publisher with a persistent session and a fail-safe.

    Thread-safe; ``publish`` never blocks on the network.
    """

    def __init__(
        self,
        broker: Broker,
        client_id: str,
        *,
        failsafe: FailSafe | None = None,
        audit: AuditLog | None = None,
        ack_timeout_s: float = 0.5,
        max_queued: int = 10_000,
        status_topic: str | None = None,
        stations: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if status_topic is not None:
            check_topic(status_topic, "status topic")
        self.broker = broker
        self.client_id = client_id
        self.status_topic = status_topic
        self.stations = list(stations)
        self.audit = audit or AuditLog(None)
        self.ack_timeout_s = ack_timeout_s
        self.clock = clock
        self._failsafe = failsafe
        self._connected = threading.Event()
        self._attempted = threading.Event()  # the first connection attempt has ended
        self._lock = threading.Lock()
        self._acked = threading.Condition(self._lock)  # notified on every stop's PUBACK
        self._seq = 0  # stops by number: in flight, never sent, covered by a fail-safe
        self._unacked: dict[int, tuple[int, StopMessage]] = {}  # by paho message id
        self._dropped: dict[int, StopMessage] = {}  # never handed to the client
        self._covered: set[int] = set()
        self._early: set[int] = set()  # PUBACKs that beat publish() to recording the message
        self._status_mids: set[int] = set()  # status messages in flight (not stops)
        # PUBACK deadlines, oldest first (all share ack_timeout_s, so they come in order),
        # watched by one thread: no thread is started per stop on the stop path. Entries
        # leave after ack_timeout_s; the client's queue (max_queued) bounds the publishes.
        self._due: deque[tuple[float, int, int, StopMessage]] = deque()  # at, mid, seq, msg
        self._due_cv = threading.Condition()
        self._watcher: threading.Thread | None = None
        self._closing = False
        self.delivered = self.failsafe_runs = 0
        c = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=False,
            protocol=paho.MQTTv311,
        )
        c.max_queued_messages_set(max_queued)
        c.max_inflight_messages_set(1000)
        c.reconnect_delay_set(min_delay=1, max_delay=2)
        c.on_connect = self._on_connect
        c.on_connect_fail = self._on_connect_fail
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        if status_topic is not None:
            will = self._status("offline", reason="connection lost")
            c.will_set(status_topic, will, qos=1, retain=True)
        self._client = c

    def _status(self, state: str, **extra: Any) -> bytes:
        body = {"state": state, "client_id": self.client_id, **extra}
        if self.stations:
            body["stations"] = self.stations
        return json.dumps(body).encode()

    # -- paho callbacks (its network thread) ---------------------------------------------
    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if not rc.is_failure:
            if self.status_topic is not None:
                online = self._status("online", ts=self.clock())
                self._claim_status(client.publish(self.status_topic, online, qos=1, retain=True))
            self._connected.set()
            self.audit.write("broker_connected", broker=f"{self.broker.host}:{self.broker.port}")
        else:
            self.audit.write("broker_refused", reason=str(rc))
        self._attempted.set()

    def _on_connect_fail(self, client: Any, userdata: Any) -> None:
        self._attempted.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if self._connected.is_set():
            self.audit.write("broker_lost", reason=str(rc))
        self._connected.clear()

    def _claim_status(self, info: Any) -> None:
        """Mark a status message's PUBACK as not a stop's."""
        with self._lock:
            if info.mid in self._early:  # it came first and was counted as a stop's
                self._early.discard(info.mid)
                self.delivered -= 1
            else:
                self._status_mids.add(info.mid)

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with self._lock:
            if mid in self._status_mids:
                self._status_mids.discard(mid)
                return
            stop = self._unacked.pop(mid, None)
            if stop is None:
                if len(self._early) < 4096:
                    self._early.add(mid)
            else:
                self._covered.discard(stop[0])  # delivered: it no longer needs covering
            self.delivered += 1
            self._acked.notify_all()
        if stop is not None:
            msg = stop[1]
            self.audit.write("stop_delivered", mid=mid, station=msg.station, ts=msg.ts)

    # -- public API ------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def pending(self) -> int:
        """Stops handed to the client and not yet acknowledged by the broker."""
        with self._lock:
            return len(self._unacked)

    @property
    def lost(self) -> int:
        """Stops that have no PUBACK (yet) and no fail-safe action that ran for them: never
        handed to the client, or queued or in flight, with no fail-safe configured or one
        that failed. After :meth:`close` this is what a run could not deliver."""
        with self._lock:
            open_ = {seq for seq, _ in self._unacked.values()} | set(self._dropped)
            return len(open_ - self._covered)

    def start(self, wait_s: float = 2.0) -> bool:
        """Connect in the background and wait up to ``wait_s`` for the first attempt to end
        (connected, refused or failed). True when connected; either way paho keeps trying
        in the background."""
        self._client.connect_async(self.broker.host, self.broker.port, keepalive=5)
        self._client.loop_start()
        self._watcher = threading.Thread(target=self._watch_acks, name="guard-puback", daemon=True)
        self._watcher.start()
        self._attempted.wait(wait_s)
        return self._connected.is_set()

    def publish(self, topic: str, msg: StopMessage) -> int:
        """Send ``msg`` with QoS 1; returns its message id, 0 when it could not be handed to
        the client. Never raises: any failure runs the fail-safe and is audited."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        connected = self._connected.is_set()
        try:
            check_topic(topic, "stop topic")
            # never hold our lock across paho's: its thread holds its own while calling on_publish
            info = self._client.publish(topic, msg.to_json(), qos=1)
            rc, mid = info.rc, int(info.mid)
        except Exception as e:  # paho's ValueError, a socket error, anything: not a crash
            self._not_sent(seq, topic, msg, f"publish failed: {type(e).__name__}: {e}")
            return 0
        if rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            self._not_sent(seq, topic, msg, "client queue full: stop dropped")
            return 0
        if rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            self._not_sent(seq, topic, msg, f"publish refused: {paho.error_string(rc)}")
            return 0
        with self._lock:
            if mid in self._early:  # already acknowledged
                self._early.discard(mid)
            else:
                self._unacked[mid] = (seq, msg)
        self.audit.write("stop_published", mid=mid, topic=topic, **asdict(msg))
        if not connected or rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
            self._run_failsafe(seq, msg, "broker unreachable: stop queued for delivery")
        else:
            with self._due_cv:
                self._due.append((time.monotonic() + self.ack_timeout_s, mid, seq, msg))
                if len(self._due) == 1:  # the watcher was waiting for work, not a deadline
                    self._due_cv.notify()
        return mid

    def _not_sent(self, seq: int, topic: str, msg: StopMessage, reason: str) -> None:
        """A stop the client did not take: remembered, audited, and the fail-safe runs."""
        with self._lock:
            self._dropped[seq] = msg
        self.audit.write("stop_not_sent", topic=topic, reason=reason, **asdict(msg))
        self._run_failsafe(seq, msg, reason)

    def _watch_acks(self) -> None:
        """Run the fail-safe for each stop whose PUBACK is not in by its deadline."""
        while True:
            with self._due_cv:
                while not self._due and not self._closing:
                    self._due_cv.wait()
                if self._closing:
                    return
                at, mid, seq, msg = self._due[0]
                if (wait := at - time.monotonic()) > 0:
                    self._due_cv.wait(wait)
                    continue
                self._due.popleft()
            with self._lock:
                late = mid in self._unacked
            if late:
                self._run_failsafe(seq, msg, f"no PUBACK within {self.ack_timeout_s:g} s")

    def _run_failsafe(self, seq: int, msg: StopMessage, reason: str) -> None:
        """The action first (it is the stop), then the audit line saying how it went."""
        action = "none"
        if self._failsafe is not None:
            try:
                self._failsafe(msg, reason)
                action = "ran"
            except Exception:  # the fail-safe must not take the stop path down
                log.exception("fail-safe action failed")
                action = "failed"
        with self._lock:
            self.failsafe_runs += 1
            if action == "ran":
                self._covered.add(seq)
        self.audit.write("failsafe", reason=reason, action=action, **asdict(msg))
        log.warning("guard fail-safe for %s (action: %s): %s", msg.station, action, reason)

    def wait_delivered(self, timeout_s: float) -> bool:
        """Wait until every stop has been acknowledged (or ``timeout_s`` passed)."""
        with self._acked:
            return self._acked.wait_for(lambda: not self._unacked, timeout_s)

    def close(self, wait_s: float = 1.0, reason: str = "closed") -> None:
        """Disconnect and stop paho's thread and the PUBACK watcher; with a status topic,
        first mark the guard offline with ``reason`` (waiting up to ``wait_s`` for the
        broker's PUBACK). A stop still waiting for its PUBACK gets the fail-safe now."""
        if self.status_topic is not None and self._connected.is_set():
            bye = self._status("offline", ts=self.clock(), reason=reason)
            try:
                info = self._client.publish(self.status_topic, bye, qos=1, retain=True)
                self._claim_status(info)
                info.wait_for_publish(wait_s)
            except (RuntimeError, ValueError, OSError):  # the connection went: the will tells
                pass
        with self._due_cv:
            self._closing = True
            self._due_cv.notify()
        if self._watcher is not None:
            self._watcher.join(1.0)
        with self._due_cv:
            due, self._due = list(self._due), deque()
        for _, mid, seq, msg in due:
            with self._lock:
                late = mid in self._unacked
            if late:
                self._run_failsafe(seq, msg, "closing with no PUBACK")
        self._client.disconnect()
        self._client.loop_stop()

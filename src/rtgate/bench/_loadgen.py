"""An open-loop HTTP/1.1 load generator with microsecond-cheap bookkeeping.

Request *i* is due at ``start + i / rate``, sent on an idle keep-alive connection (or, when
all are busy, as soon as one frees up), and its latency is measured from its due time:
no coordinated omission. The client is a small asyncio protocol (``Content-Length``
responses only), so its own cost stays in the tens of microseconds. A pacing thread keeps
the arrival times to within tens of microseconds without spinning (the event loop's own
timers have millisecond resolution), so the generator leaves the CPU to the server.
"""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from hdrh.histogram import HdrHistogram

__all__ = ["TEMPLATE_ROUTE", "gate_payloads", "open_loop", "summary"]


TEMPLATE_ROUTE = b'"route":"template"'
"""What a gate answer from the template tier contains (``bench http``'s check)."""


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # microseconds, up to 60 s


def summary(h: HdrHistogram) -> dict[str, float]:
    if h.get_total_count() == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0, "mean": 0.0}
    return {
        "p50": h.get_value_at_percentile(50) / 1000.0,
        "p90": h.get_value_at_percentile(90) / 1000.0,
        "p99": h.get_value_at_percentile(99) / 1000.0,
        "p999": h.get_value_at_percentile(99.9) / 1000.0,
        "max": h.get_max_value() / 1000.0,
        "mean": h.get_mean_value() / 1000.0,
    }


class _Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, gen: _Generator) -> None:
        self.gen = gen
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.due = 0.0
        self.sent = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, payload: bytes, due: float) -> None:
        assert self.transport is not None
        self.due = due
        self.sent = time.perf_counter()
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).lower()
        at = head.find(b"content-length:")
        if at < 0:
            self.gen.failed(self, "protocol")
            return
        eol = head.find(b"\r\n", at)
        length = int(head[at + 15 : eol if eol >= 0 else len(head)])
        total = end + 4 + length
        if len(self.buf) < total:
            return
        status = int(head[9:12])
        body = bytes(self.buf[end + 4 : total])
        del self.buf[:total]
        self.gen.answered(self, status, body, time.perf_counter())

    def connection_lost(self, exc: Exception | None) -> None:
        self.gen.lost(self)


class _Generator:
    """Hands due requests to idle connections; records latencies from the due time."""

    def __init__(self, measure_from: float, expect: bytes | None = TEMPLATE_ROUTE) -> None:
        self.measure_from = measure_from
        self.expect = expect
        self.idle: list[_Conn] = []
        self.busy: set[_Conn] = set()
        self.backlog: collections.deque[tuple[float, bytes]] = collections.deque()
        self.latency = _hist()
        self.service = _hist()
        self.lag = _hist()
        self.by_status: dict[int, HdrHistogram] = {}  # latency per HTTP status
        self.errors: collections.Counter[str] = collections.Counter()
        self.samples: list[str] = []  # the first few bad answers, for the report
        self.sent = self.completed = 0
        self.outstanding = 0
        self.drained = asyncio.Event()
        self.last_done = 0.0

    def submit_many(self, batch: list[tuple[float, bytes]]) -> None:
        for due, payload in batch:
            self.submit(due, payload)

    def submit(self, due: float, payload: bytes) -> None:
        self.outstanding += 1
        self.drained.clear()
        if self.idle:
            self._send(self.idle.pop(), payload, due)
        else:
            self.backlog.append((due, payload))

    def _send(self, conn: _Conn, payload: bytes, due: float) -> None:
        self.busy.add(conn)
        conn.send(payload, due)
        if due >= self.measure_from:
            self.sent += 1
            self.lag.record_value(max(1, round((conn.sent - due) * 1e6)))

    def answered(self, conn: _Conn, status: int, body: bytes, now: float) -> None:
        if conn.due >= self.measure_from:
            self.completed += 1
            self.last_done = now
            if status != 200:
                self.errors[f"http_{status}"] += 1
                self._sample(body)
            elif self.expect is not None and self.expect not in body:
                self.errors["wrong_route"] += 1
                self._sample(body)
            took_us = max(1, round((now - conn.due) * 1e6))
            self.latency.record_value(took_us)
            by = self.by_status.get(status)
            if by is None:
                by = self.by_status[status] = _hist()
            by.record_value(took_us)
            self.service.record_value(max(1, round((now - conn.sent) * 1e6)))
        self._release(conn)

    def _sample(self, body: bytes) -> None:
        if len(self.samples) < 3:
            self.samples.append(body[:500].decode("utf-8", "replace"))

    def failed(self, conn: _Conn, why: str) -> None:
        if conn.due >= self.measure_from:
            self.errors[why] += 1
        self.busy.discard(conn)
        self._finish_one()
        if conn.transport is not None:
            conn.transport.close()

    def lost(self, conn: _Conn) -> None:
        if conn in self.busy:
            self.failed(conn, "connection_lost")
        if conn in self.idle:
            self.idle.remove(conn)

    def _release(self, conn: _Conn) -> None:
        self.busy.discard(conn)
        self._finish_one()
        if self.backlog:
            due, payload = self.backlog.popleft()
            self._send(conn, payload, due)
        else:
            self.idle.append(conn)

    def _finish_one(self) -> None:
        self.outstanding -= 1
        if self.outstanding == 0:
            self.drained.set()


def _pace(
    loop: asyncio.AbstractEventLoop,
    submit: Callable[[list[tuple[float, bytes]]], None],
    start: float,
    interval: float,
    total: int,
    payloads: list[bytes],
    stop: threading.Event,
) -> None:
    """In a thread: sleep until each due time (``time.sleep`` is a high-resolution sleep,
    unlike the event loop's millisecond timers), then hand what is due to the loop."""
    i, n = 0, len(payloads)
    while i < total and not stop.is_set():
        now = time.perf_counter()
        due = start + i * interval
        if now < due:
            time.sleep(due - now)
            continue
        batch = []
        while i < total and start + i * interval <= now:
            batch.append((start + i * interval, payloads[i % n]))
            i += 1
        loop.call_soon_threadsafe(submit, batch)


def gate_payloads(host: str, port: int, inputs: list[str], budget_ms: float) -> list[bytes]:
    """Raw ``POST /v1/gate`` requests, one per input (delegation off)."""
    out = []
    for text in inputs:
        body = json.dumps({"input": text, "budget_ms": budget_ms, "delegate": False}).encode()
        head = (
            f"POST /v1/gate HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        out.append(head.encode() + body)
    return out


async def open_loop(
    host: str,
    port: int,
    payloads: list[bytes],
    rate: float,
    seconds: float,
    warmup_s: float,
    connections: int,
    drain_s: float,
    expect: bytes | None = TEMPLATE_ROUTE,
) -> dict[str, Any]:
    """Send ``payloads`` round-robin at ``rate``/s for ``warmup_s + seconds``; measure
    the last ``seconds``. A 200 whose body lacks ``expect`` counts as ``wrong_route``.
    Returns counts, errors and latency summaries (ms)."""
    loop = asyncio.get_running_loop()
    interval = 1.0 / rate
    total = round(rate * (warmup_s + seconds))
    start = time.perf_counter() + 0.2
    gen = _Generator(measure_from=start + warmup_s, expect=expect)
    for _ in range(connections):
        _, conn = await loop.create_connection(lambda: _Conn(gen), host, port)
        gen.idle.append(conn)
    start = time.perf_counter() + 0.05
    gen.measure_from = start + warmup_s
    stop = threading.Event()
    pacer = loop.run_in_executor(
        None, _pace, loop, gen.submit_many, start, interval, total, payloads, stop
    )
    try:
        await pacer
    finally:
        stop.set()
    end_sched = start + (total - 1) * interval
    try:
        await asyncio.wait_for(gen.drained.wait(), drain_s)
    except TimeoutError:
        pass
    measured = gen.sent
    unanswered = (
        measured
        - gen.completed
        - sum(n for k, n in gen.errors.items() if not k.startswith("http_") and k != "wrong_route")
    )
    if unanswered > 0:
        gen.errors["unanswered"] += unanswered
    for conn in [*gen.idle, *gen.busy]:
        if conn.transport is not None:
            conn.transport.close()
    window = max(1e-9, end_sched - gen.measure_from + interval)
    return {
        "requests": measured,
        "completed": gen.completed,
        "errors": dict(gen.errors),
        "error_count": sum(gen.errors.values()),
        "error_samples": gen.samples,
        "achieved_rps": gen.completed / window,
        "latency_ms": summary(gen.latency),
        "latency_by_status_ms": {str(k): summary(h) for k, h in sorted(gen.by_status.items())},
        "answered_by_status": {
            str(k): h.get_total_count() for k, h in sorted(gen.by_status.items())
        },
        "service_time_ms": summary(gen.service),
        "send_lag_ms": summary(gen.lag),
    }

"""Overload: a request is answered within its budget counted from its arrival, or at once
(placeholder, or 503 with Retry-After); never late because it waited in a queue."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from rtgate.config.loader import Config
from rtgate.core.budget import Budget
from rtgate.core.request import Piece, Request
from rtgate.server import create_app
from rtgate.server.arrival import ARRIVAL, LoopWatch, StampedHttpTools
from rtgate.server.door import FrontDoor
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate, server_only_config


class HeldTier(Tier):
    """Answers once the test releases it; counts the requests it saw."""

    name, quality = "local", 50

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.calls += 1
        self.entered.set()
        await self.release.wait()
        yield "held answer"


def _late_by(app: Any, seconds: float) -> Any:
    """The app as if each request had arrived ``seconds`` before its handler ran."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {})[ARRIVAL] = asyncio.get_running_loop().time() - seconds
        await app(scope, receive, send)

    return wrapped


@contextlib.asynccontextmanager
async def _served(app: Any) -> AsyncIterator[int]:
    """``app`` on a real uvicorn server with rtgate's stamping protocol; its port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = uvicorn.Server(
        uvicorn.Config(app, http=StampedHttpTools, lifespan="off", log_level="warning")
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rtgate")


async def test_a_request_whose_budget_was_spent_waiting_gets_the_placeholder_at_once() -> None:
    tier = FakeTier("local", 50, ["fresh"])
    app = create_app(server_only_config(), gate=fake_gate([tier], local=5.0), warmup=False)
    async with app.router.lifespan_context(app), await _client(_late_by(app, 0.5)) as client:
        r = await client.post("/v1/gate", json={"input": "hi", "budget_ms": 300})
    assert r.status_code == 200
    body = r.json()
    assert body["route"] == "silent" and body["placeholder"] is True
    assert body["answer"] == Config().gate.placeholder
    assert body["trace"]["degraded"].startswith("shed: it waited")
    assert body["trace"]["elapsed_ms"] >= 500
    assert tier.calls == 0


async def test_with_overload_error_it_is_a_503_with_retry_after() -> None:
    config = server_only_config()
    config.server.overload = "error"
    tier = FakeTier("local", 50, ["fresh"])
    app = create_app(config, gate=fake_gate([tier], local=5.0), warmup=False)
    async with app.router.lifespan_context(app), await _client(_late_by(app, 0.5)) as client:
        r = await client.post("/v1/chat/completions", json=_chat())
        s = await client.post("/v1/gate", json={"input": "hi", "stream": True, "budget_ms": 300})
    for resp in (r, s):
        assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
        assert resp.json()["error"]["code"] == "overloaded"
    assert tier.calls == 0


def _chat() -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "budget_ms": 300}


async def test_past_max_inflight_the_door_refuses_at_once_and_the_others_are_served() -> None:
    config: Config = server_only_config()
    config.server.max_inflight = 1
    tier = HeldTier()
    app = create_app(config, gate=fake_gate([tier], local=5.0), warmup=False)
    async with app.router.lifespan_context(app), await _client(app) as client:
        body = {"input": "hi", "budget_ms": 60_000}
        first = asyncio.create_task(client.post("/v1/gate", json=body))
        await tier.entered.wait()
        second = await client.post("/v1/gate", json=body)
        health = await client.get("/healthz")  # not an answer route: always let in
        tier.release.set()
        done = await first
    assert second.status_code == 503 and second.headers["retry-after"] == "1"
    assert second.json()["error"]["code"] == "overloaded"
    assert health.status_code == 200
    assert done.json()["answer"] == "held answer" and tier.calls == 1


@pytest.mark.slow
async def test_the_protocol_stamps_the_arrival_before_the_app_runs() -> None:

    seen: list[tuple[float, float]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        seen.append((scope["state"][ARRIVAL], asyncio.get_running_loop().time()))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with _served(app) as port, httpx.AsyncClient() as client:
        r = await client.get(f"http://127.0.0.1:{port}/")
    assert r.status_code == 204
    ((stamped, handled),) = seen
    assert stamped <= handled


async def test_the_watch_stamps_from_the_last_tick_only_when_the_loop_is_behind() -> None:
    watch = LoopWatch(interval_s=60.0)  # ticks once at start, then not during the test
    now = asyncio.get_running_loop().time()
    assert watch.arrival(now) == now and watch.behind_ms(now) == 0.0  # not started
    watch.start(asyncio.get_running_loop())
    try:
        tick = watch.last_tick
        soon = tick + 1.5 * watch.interval / 100  # within two intervals: keeping up
        assert watch.arrival(soon) == soon and watch.behind_ms(soon) == 0.0
        late = tick + 2.5 * watch.interval
        assert watch.arrival(late) == tick
        assert watch.behind_ms(late) == pytest.approx(2500 * watch.interval)
    finally:
        watch.stop()
    assert not watch.running and watch.arrival(now) == now


class _Behind:
    """A watch that says the loop is this far behind."""

    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.refused: dict[str, int] = {}

    def count(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1

    def arrival(self, now: float) -> float:
        return now - self.ms / 1000.0

    def behind_ms(self, now: float) -> float:
        return self.ms


async def test_the_door_refuses_answer_requests_while_the_loop_is_behind() -> None:
    calls: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    watch = _Behind(80.0)
    door = FrontDoor(app, limit=10, max_lag_ms=50.0, watch=watch)  # type: ignore[arg-type]
    async with await _client(door) as client:
        refused = await client.post("/v1/gate", json={"input": "hi"})
        health = await client.get("/healthz")
        watch.ms = 20.0
        served = await client.post("/v1/gate", json={"input": "hi"})
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "overloaded"
    assert health.status_code == 200 and served.status_code == 200
    assert calls == ["/healthz", "/v1/gate"] and watch.refused == {"door_behind": 1}


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return status, await reader.readexactly(length)


@pytest.mark.slow
async def test_the_protocol_refuses_while_behind_and_the_connection_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    from rtgate.server import arrival

    seen: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(body)
        answer = b"served:" + body
        length = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": answer})

    loop = asyncio.get_running_loop()
    watch = LoopWatch(interval_s=60.0)  # no tick during the test: the test moves last_tick
    watch.start(loop)
    watch.shed_above_ms = 50.0
    monkeypatch.setattr(arrival, "WATCH", watch)
    try:
        async with _served(app) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)

            def post(body: bytes, path: str = "/v1/chat/completions") -> bytes:
                head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n"
                return head.encode() + body

            watch.last_tick = loop.time() - 3 * watch.interval  # the loop has not been free
            refused = await _exchange(reader, writer, post(b'{"refused": true}'))
            get = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
            health = await _exchange(reader, writer, get)  # not an answer request: served
            watch.last_tick = loop.time() + 3600  # keeping up again
            served = await _exchange(reader, writer, post(b'{"n": 2}'))
            writer.close()
    finally:
        watch.stop()
    assert refused[0] == 503 and b'"overloaded"' in refused[1]
    assert health == (200, b"served:")
    # the refused request's body was dropped, and the same connection parsed the next one
    assert served == (200, b'served:{"n": 2}')
    assert seen == [b"", b'{"n": 2}'] and watch.refused == {"protocol_behind": 1}


async def test_the_door_cuts_its_limit_when_the_loop_lags_and_grows_it_back() -> None:
    release = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    statuses: list[int] = []

    async def call(door: FrontDoor) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        scope = {"type": "http", "method": "POST", "path": "/v1/gate", "state": {}}
        await door(scope, receive, send)

    watch = _Behind(0.0)
    door = FrontDoor(app, limit=100, max_lag_ms=50.0, watch=watch)  # type: ignore[arg-type]
    held = [asyncio.create_task(call(door)) for _ in range(20)]
    await asyncio.sleep(0)  # let each task reach the app (no clock involved)
    assert door.active == 20 and statuses == []
    watch.ms = 30.0  # over half the allowed lag: the limit drops under what is in progress
    await call(door)
    assert door.limit == 16 and statuses == [503] and watch.refused == {"door_full": 1}
    watch.ms = 0.0  # keeping up again, but 20 are still in progress: a full door grows by one
    extra = asyncio.create_task(call(door))
    await asyncio.sleep(0)
    assert door.limit == 17 and door.active == 21 and statuses == [503]
    release.set()
    await asyncio.gather(*held, extra)
    assert statuses == [503] + [200] * 21 and door.active == 0

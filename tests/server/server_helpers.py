"""Helpers for the server tests: gates of fake tiers, an app with its lifespan running,
a raw ASGI caller that can disconnect on cue, and an SSE parser."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from rtgate.config.loader import Config
from rtgate.core.budget import Budget
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import Gate, GateConfig
from rtgate.server import create_app
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier


def priors(**p99_ms: float) -> dict[str, Prior]:
    return {name: Prior(ms, ms) for name, ms in p99_ms.items()}


class SignalTier(FakeTier):
    """A ``FakeTier`` that says when a stream starts and when it is closed (both as asyncio
    events for in-loop tests and as threading events for tests that run the app in a
    thread). ``hang_on`` makes it hang only for that input."""

    def __init__(self, *args: Any, hang_on: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hang_on = hang_on
        self.started = asyncio.Event()
        self.closed = asyncio.Event()
        self.started_t = threading.Event()
        self.closed_t = threading.Event()

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.started.set()
        self.started_t.set()
        try:
            if self.hang_on is not None and request.input == self.hang_on:
                self.calls += 1
                try:
                    await asyncio.Event().wait()
                finally:
                    self.cancelled += 1
            async for piece in super().stream(request, budget):
                yield piece
        finally:
            self.closed.set()
            self.closed_t.set()


def chain(
    cloud: Tier | None = None, local: Tier | None = None, template: Tier | None = None
) -> list[Tier]:
    return [
        cloud or FakeTier("cloud", 80, ["deep", " answer"], ttft_ms=600, delegable=True),
        local or FakeTier("local", 50, ["quick", " one"], ttft_ms=40, tpot_ms=5),
        template or FakeTier("template", 10, ["canned"]),
    ]


def fake_gate(tiers: Sequence[Tier] | None = None, **p99: float) -> Gate:
    p99 = p99 or {"cloud": 1800.0, "local": 110.0, "template": 2.0}
    return Gate(tiers or chain(), priors=priors(**p99), config=GateConfig(placeholder="one moment"))


def server_only_config() -> Config:
    """Defaults, without the installed apps' routers (they have their own suites)."""
    config = Config()
    config.server.discover_routers = False
    return config


@asynccontextmanager
async def running(
    gate: Gate | None = None,
    config: Config | None = None,
    *,
    raise_app_exceptions: bool = True,
    **kwargs: Any,
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app over ``gate`` with its lifespan running, and an httpx client bound to it."""
    if config is None:
        config = server_only_config()
    app = create_app(config, gate=gate or fake_gate(), warmup=False, **kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        async with httpx.AsyncClient(transport=transport, base_url="http://rtgate") as client:
            yield app, client


class AsgiCall:
    """Calls an ASGI app directly; ``disconnect()`` makes the client go away."""

    def __init__(self, app: Any, path: str, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"rtgate"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        self.app = app
        self.raw = raw
        self.body_sent = False
        self.gone = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self.task: asyncio.Task[None] | None = None

    async def receive(self) -> dict[str, Any]:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": self.raw, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self.app(self.scope, self.receive, self.send))
        return self.task

    def disconnect(self) -> None:
        self.gone.set()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def parse_sse(text: str) -> list[tuple[str | None, str]]:
    """``(event, data)`` per event; comment lines are returned as ``(":", comment)``."""
    out: list[tuple[str | None, str]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                out.append((":", line[1:].strip()))
            elif line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        if data:
            out.append((event, "\n".join(data)))
    return out

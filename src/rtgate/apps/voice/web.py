"""The ``/voice`` page: the browser's microphone over a WebSocket, the agent's voice back.

:func:`create_app` returns a Starlette app to mount (``app.mount("/voice", create_app())``):

- ``GET /`` the page (``data/web/index.html``) and ``GET /voice.js`` its script;
- ``WS /ws``: the browser sends 16 kHz mono 16-bit PCM as binary messages; the server sends
  agent audio the same way (paced in real time, 100 ms ahead) and JSON text messages:
  ``{"type": "partial"|"final"|"turn"|"ack"|"answer"|"followup"|"clear"|"speech"|"hold"|
  "resume", ...}`` with timings in ms. ``clear`` (a barge-in) tells the page to drop queued
  audio; ``hold`` (the caller's line rose while the agent talks: turns.py) to mute it until
  ``resume`` or ``clear``.

Models load on the first connection and are shared by later ones; call :func:`aclose` (or
``app.state.voice.aclose()``) on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import APIRouter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from rtgate.apps.voice.frames import (
    AgentAudioFrame,
    AgentTextFrame,
    Frame,
    HoldFrame,
    InterruptionFrame,
    Pcm,
    ResumeFrame,
    SpeechStartFrame,
    TranscriptFrame,
    TurnEndFrame,
)
from rtgate.apps.voice.packaged import data_path
from rtgate.apps.voice.session import VoiceCall, VoiceConfig, VoiceModels
from rtgate.server.error_responses import error_body

__all__ = ["VoiceService", "create_app", "make_router", "router"]

MAX_OUT = 256  # messages waiting for the browser; past that the oldest audio is dropped


class VoiceService:
    """Loads :class:`VoiceModels` once, on first use, and serves calls with them."""

    def __init__(self, cfg: VoiceConfig | None = None) -> None:
        self.cfg = cfg or VoiceConfig()
        self._models: VoiceModels | None = None
        self._lock = asyncio.Lock()

    async def models(self) -> VoiceModels:
        async with self._lock:
            if self._models is None:
                models = VoiceModels(self.cfg)
                await models.__aenter__()
                self._models = models
        return self._models

    async def aclose(self) -> None:
        if self._models is not None:
            await self._models.__aexit__(None, None, None)
            self._models = None


class _SocketOut:
    """AudioOut and event sink for one browser: a bounded outbox drained by one task.

    Policy when the outbox is full: drop the oldest *audio* message (a late chunk is
    worthless), never a text event."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.box: asyncio.Queue[bytes | str] = asyncio.Queue()
        self.started = asyncio.get_running_loop().time()

    def _put(self, msg: bytes | str) -> None:
        if self.box.qsize() >= MAX_OUT:
            kept = [m for m in _drain(self.box)]
            audio = next((i for i, m in enumerate(kept) if isinstance(m, bytes)), None)
            if audio is not None:
                kept.pop(audio)
            for m in kept:
                self.box.put_nowait(m)
        self.box.put_nowait(msg)

    def write(self, pcm: Pcm, frame: AgentAudioFrame) -> None:
        self._put((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())

    def clear(self) -> None:
        self._put(json.dumps({"type": "clear"}))

    def event(self, kind: str, **data: Any) -> None:
        t = round((asyncio.get_running_loop().time() - self.started) * 1000.0, 1)
        self._put(json.dumps({"type": kind, "t_ms": t, **data}, ensure_ascii=False))

    async def pump(self) -> None:
        """Send queued messages until the browser goes away."""
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            while True:
                msg = await self.box.get()
                if isinstance(msg, bytes):
                    await self.ws.send_bytes(msg)
                else:
                    await self.ws.send_text(msg)


def _drain(q: asyncio.Queue[bytes | str]) -> list[bytes | str]:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def _listener(out: _SocketOut, call: list[VoiceCall]) -> Any:
    ends: dict[int, float] = {}

    def on(stage: str, f: Frame) -> None:
        now = asyncio.get_running_loop().time()
        if isinstance(f, TranscriptFrame) and stage == "asr":
            out.event("final" if f.final else "partial", turn=f.turn, text=f.text,
                      decode_ms=round(f.decode_ms, 1))  # fmt: skip
        elif isinstance(f, TurnEndFrame) and stage == "turns" and f.turn not in ends:
            ends[f.turn] = now
            lag = (now - call[0].heard_at(f.t)) * 1000.0 if call else 0.0
            out.event("turn", turn=f.turn, text=f.text, rule=f.rule, end_ms=round(lag, 1))
        elif isinstance(f, AgentTextFrame) and stage == "agent" and f.text:
            since = (now - ends[f.turn]) * 1000.0 if f.turn in ends else None
            out.event(f.kind, turn=f.turn, text=f.text, after_turn_ms=since and round(since, 1))
        elif isinstance(f, SpeechStartFrame) and stage == "vad":
            out.event("speech", t=round(f.t, 3))
        elif isinstance(f, InterruptionFrame) and stage == "turns":
            out.event("bargein", t=round(f.t, 3))
        elif isinstance(f, HoldFrame | ResumeFrame) and stage == "turns":
            out.event("hold" if isinstance(f, HoldFrame) else "resume", t=round(f.t, 3))

    return on


async def _reject(ws: WebSocket, pump: asyncio.Task[None], message: str) -> None:
    """An unusable frame: stop the sender, say why, close with 1007 (inconsistent data)."""
    pump.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pump
    body = {"type": "error", **error_body(400, "invalid_audio_frame", message)}
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await ws.send_text(json.dumps(body))
        await ws.close(1007)


async def _socket(ws: WebSocket) -> None:
    service: VoiceService = ws.app.state.voice
    await ws.accept()
    lang = ws.query_params.get("lang") or None
    models = await service.models()
    out = _SocketOut(ws)
    holder: list[VoiceCall] = []
    call = VoiceCall(
        models,
        out,
        lang=lang if lang in ("zh", "en") else None,
        lead_s=0.1,
        listener=_listener(out, holder),
    )
    holder.append(call)
    out.event("ready", asr=models.cfg.asr_model, llm=models.cfg.llm)
    pump = asyncio.create_task(out.pump())
    try:
        async with call:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                data = msg.get("bytes")
                if data and len(data) % 2:
                    await _reject(ws, pump, "audio frames are 16-bit PCM: an even byte count")
                    break
                if data:
                    pcm = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
                    await call.feed(pcm, pace=False)
    except WebSocketDisconnect:
        pass
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump


async def _page(request: Request) -> Response:
    return FileResponse(data_path("web", "index.html"), media_type="text/html")


async def _script(request: Request) -> Response:
    return FileResponse(data_path("web", "voice.js"), media_type="text/javascript")


def create_app(cfg: VoiceConfig | None = None, service: VoiceService | None = None) -> Starlette:
    """The mountable ``/voice`` app (see the module docstring)."""
    app = Starlette(
        routes=[
            Route("/", _page),
            Route("/voice.js", _script),
            WebSocketRoute("/ws", _socket),
        ]
    )
    app.state.voice = service or VoiceService(cfg)
    return app


def make_router(cfg: VoiceConfig | None = None) -> APIRouter:
    """The same page and socket as an ``APIRouter`` at ``/voice/`` for ``rtgate serve``.

    The router's lifespan owns the :class:`VoiceService` (models load on the first call)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        service = VoiceService(cfg)
        app.state.voice = service
        try:
            yield
        finally:
            await service.aclose()

    r = APIRouter(lifespan=lifespan, tags=["voice"])

    async def to_page() -> Response:
        return RedirectResponse("/voice/")

    r.add_api_route("/voice", to_page, methods=["GET"], include_in_schema=False)
    r.add_route("/voice/", _page, methods=["GET"], include_in_schema=False)
    r.add_route("/voice/voice.js", _script, methods=["GET"], include_in_schema=False)
    r.add_websocket_route("/voice/ws", _socket)
    return r


router = make_router()

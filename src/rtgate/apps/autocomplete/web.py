"""HTTP and WebSocket API of the autocomplete, and its page.

``router`` (a FastAPI ``APIRouter`` with its own lifespan, which builds and closes the
engine) serves:

- ``POST /v1/complete`` ``{"prefix", "budget_ms": 150, "pause": false}`` → ``{"candidates",
  "route", "elapsed_ms", "partial", "job_id"?, "trace"}`` (``partial``: fast suggestions
  shown while the cloud works on a multi-part ask; ``pause``: the user stopped typing or
  submitted, the prefix is the whole ask: a long ask the fast tiers cannot read goes to the
  cloud only then); bad input is a 400 JSON error.
- ``GET /v1/complete/jobs/{job_id}``: the cloud's suggestions once they are ready.
- ``WS /v1/complete/ws``: ``{"seq", "prefix", "budget_ms"?, "pause"?}`` in (the page sends
  the box's text with ``"pause": true`` when typing stops; ignored when that text already
  has a cloud job); replies carry ``seq``
  (``{"type": "suggestions", ...}``). A newer prefix cancels the older cloud job; a late
  cloud answer (``{"type": "followup", ...}``) is pushed only if its prefix is still the
  latest one received. A prefix answered fast that the semantic check reads as
  multi-part or out-of-domain (in the background) gets the same followup later, and a
  ``{"type": "late", "seq", "job_id"}`` when its cloud job starts.
- ``GET /``: the page (``static/index.html``, its script and style, no CDN).

Mount with ``create_app(config, extra_routers=[router])`` or
``[server] routers = ["rtgate.apps.autocomplete.web:router"]``. The engine's mode comes
from ``$RTGATE_AUTOCOMPLETE_MODE`` (``emulated`` by default, or ``real``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, JSONResponse, Response

from rtgate.apps.autocomplete.engine import (
    MAX_PREFIX_CHARS,
    AutocompleteEngine,
    EngineConfig,
    check_budget,
    check_prefix,
)
from rtgate.core.errors import InvalidRequest
from rtgate.server.error_responses import error_body

__all__ = ["STATIC", "make_router", "router"]

STATIC = Path(__file__).parent / "static"
# the longest prefix the engine takes, JSON-escaped (``\\uXXXX``: 6 bytes a character), and
# the rest of the message
MAX_MESSAGE_BYTES = 6 * MAX_PREFIX_CHARS + 256
_sessions = itertools.count()
_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
EngineFactory = Callable[[], AutocompleteEngine]


def _default_engine() -> AutocompleteEngine:
    mode = os.environ.get("RTGATE_AUTOCOMPLETE_MODE", "emulated")
    return AutocompleteEngine.build(EngineConfig(mode="real" if mode == "real" else "emulated"))


def _error(status: int, code: str, message: str) -> JSONResponse:
    """The server's one error shape: ``{"error": {"code", "message", "type"}}``."""
    return JSONResponse(error_body(status, code, message), status_code=status)


async def _complete(request: Request) -> Response:
    body = await request.body()
    if len(body) > MAX_MESSAGE_BYTES:
        return _error(413, "body_too_large", f"body over {MAX_MESSAGE_BYTES} bytes")
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return _error(400, "invalid_json", "the body must be a JSON object")
    if not isinstance(data, dict) or "prefix" not in data:
        return _error(400, "invalid_request", 'expected {"prefix": str, "budget_ms": number}')
    engine: AutocompleteEngine = request.app.state.autocomplete
    pause = data.get("pause", False)
    if not isinstance(pause, bool):
        return _error(400, "invalid_request", "pause must be true or false")
    try:
        res = await engine.complete(data["prefix"], data.get("budget_ms", 150.0), pause=pause)
    except InvalidRequest as e:
        return _error(400, e.code, str(e))
    return JSONResponse(res.to_dict())


async def _job(job_id: str, request: Request) -> Response:
    engine: AutocompleteEngine = request.app.state.autocomplete
    found = engine.gate.job(job_id)
    if found is None:
        return _error(404, "job_not_found", f"no job {job_id!r}")
    if found.status in ("queued", "running"):
        return JSONResponse({"job_id": job_id, "status": found.status}, status_code=202)
    res = await engine.followup(job_id)
    return JSONResponse({"status": found.status, **res.to_dict()})


async def _ws(socket: WebSocket) -> None:
    await socket.accept()
    await _Session(socket, socket.app.state.autocomplete).run()


async def _page() -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html")


async def _static(name: str) -> Response:
    if name not in _FILES:
        return _error(404, "not_found", f"no file {name!r}")
    return FileResponse(STATIC / name, media_type=_FILES[name])


def make_router(factory: EngineFactory = _default_engine) -> APIRouter:
    """A router whose lifespan builds an engine with ``factory`` (tests pass their own)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = factory()
        async with engine:
            app.state.autocomplete = engine
            try:
                yield
            finally:
                app.state.autocomplete = None

    r = APIRouter(lifespan=lifespan, tags=["autocomplete"])
    # the names are the routes' (and the OpenAPI operation ids') names, without the ``_``
    summary = "Suggestions for a typed prefix within a budget"
    r.add_api_route("/v1/complete", _complete, methods=["POST"], name="complete", summary=summary)
    summary = "The cloud's suggestions for a job"
    r.add_api_route(
        "/v1/complete/jobs/{job_id}", _job, methods=["GET"], name="job", summary=summary
    )
    r.add_api_websocket_route("/v1/complete/ws", _ws, name="ws")
    r.add_api_route("/", _page, methods=["GET"], name="page", include_in_schema=False)
    r.add_api_route(
        "/autocomplete/{name}", _static, methods=["GET"], name="static", include_in_schema=False
    )
    return r


def _invalid(message: str) -> dict[str, Any]:
    return error_body(400, "invalid_request", message)


class _Session:
    """One socket: the latest prefix is answered; older inline work is cancelled and at
    most one cloud job is alive (the latest prefix's)."""

    def __init__(self, socket: WebSocket, engine: AutocompleteEngine) -> None:
        self.socket = socket
        self.engine = engine
        self.latest = -1  # the newest seq received
        self.latest_prefix = ""
        self.id = f"ws-{next(_sessions)}"
        self.job: str | None = None
        self.watch: asyncio.Task[None] | None = None
        self.inline: asyncio.Task[None] | None = None
        self.send_lock = asyncio.Lock()

    async def send(self, msg: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.socket.send_text(json.dumps(msg, ensure_ascii=False))

    async def run(self) -> None:
        try:
            while True:
                msg = await self.socket.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                raw = msg.get("text")
                if raw is None:  # a binary frame: this protocol is JSON text
                    await self.refuse(1003, "unsupported_frame", "send JSON text frames")
                    break
                await self.handle(raw)
        except WebSocketDisconnect:
            pass
        finally:
            if self.inline is not None:
                self.inline.cancel()
            self.drop_job()
            self.engine.forget(self.id)

    def drop_job(self) -> None:
        if self.watch is not None:
            self.watch.cancel()
            self.watch = None
        if self.job is not None:
            self.engine.cancel(self.job)
            self.job = None

    async def refuse(self, code: int, error: str, message: str) -> None:
        """Say why, then close with ``code``: the frame itself is unusable."""
        await self.send({"type": "error", "seq": None, **error_body(400, error, message)})
        await self.socket.close(code)

    async def handle(self, raw: str) -> None:
        try:
            if len(raw) > MAX_MESSAGE_BYTES:
                raise InvalidRequest(f"message over {MAX_MESSAGE_BYTES} bytes")
            msg = json.loads(raw)
            if not isinstance(msg, dict):
                raise InvalidRequest('expected {"seq": int, "prefix": str}')
            seq = msg.get("seq")
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise InvalidRequest("seq must be an integer")
            prefix = check_prefix(msg.get("prefix"))
            budget = check_budget(msg.get("budget_ms", 150.0))
            pause = msg.get("pause", False)
            if not isinstance(pause, bool):
                raise InvalidRequest("pause must be true or false")
        except RecursionError:
            await self.send({"type": "error", "seq": None, **_invalid("JSON nested too deeply")})
            return
        except (InvalidRequest, json.JSONDecodeError) as e:
            await self.send({"type": "error", "seq": None, **_invalid(str(e))})
            return
        if seq <= self.latest:
            await self.send({"type": "stale", "seq": seq})
            return
        if pause and prefix == self.latest_prefix and self.job is not None:
            return  # the cloud already works on this very text
        self.latest = seq
        self.latest_prefix = prefix
        # a newer prefix: the older work, inline or in the cloud, is no longer wanted
        if self.inline is not None:
            self.inline.cancel()
        self.drop_job()
        self.inline = asyncio.create_task(self.answer(seq, prefix, budget, pause))

    async def answer(self, seq: int, prefix: str, budget: float, pause: bool = False) -> None:
        res = await self.engine.complete(
            prefix, budget, session=self.id, on_late=self.late, pause=pause
        )
        if seq != self.latest:
            return  # a newer prefix arrived meanwhile: this answer is stale
        await self.send({"type": "suggestions", "seq": seq, "prefix": prefix, **res.to_dict()})
        if res.job_id is not None:
            self.job = res.job_id
            self.watch = asyncio.create_task(self.push_later(seq, res.job_id))

    def late(self, prefix: str, job_id: str) -> None:
        """The semantic check started a cloud job for ``prefix`` after its answer."""
        if prefix != self.latest_prefix or self.job is not None:
            self.engine.cancel(job_id)  # the user moved on, or a job is already alive
            return
        seq = self.latest
        self.job = job_id
        self.watch = asyncio.create_task(self.push_late(seq, job_id))

    async def push_late(self, seq: int, job_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.send({"type": "late", "seq": seq, "job_id": job_id})
        await self.push_later(seq, job_id)

    async def push_later(self, seq: int, job_id: str) -> None:
        """Push the cloud's suggestions if ``seq`` is still the latest prefix."""
        later = await self.engine.followup(job_id)
        if seq == self.latest and later.candidates:
            with contextlib.suppress(Exception):
                await self.send({"type": "followup", "seq": seq, **later.to_dict()})
        if self.job == job_id:
            self.job = None


router = make_router()

"""The fake OpenAI-compatible server: a Starlette app that misbehaves on purpose.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming and not),
``GET /v1/models``, ``GET /fake/stats`` (requests per mode, in flight), ``POST /fake/mode``
(``{"mode": SPEC}``: change the mix at run time) and ``GET /healthz``. What each request
suffers is drawn from the plan (see :mod:`rtgate.fakellm.faults`) or set by its
``X-Fake-Mode`` header; timings can be overridden per request with ``X-Fake-*`` headers.

A hanging or stalled response ends when its client disconnects: the server keeps no work
for a client that left, so its memory stays bounded by its open connections.
"""

from __future__ import annotations

import json
import logging
import random
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rtgate.core.errors import InvalidRequest
from rtgate.fakellm.faults import FakeLLMConfig, parse_plan
from rtgate.fakellm.play import ConnectionDropped, FakeLLMState, FaultResponse, Job
from rtgate.security.middleware import BodyLimitMiddleware, ErrorShieldMiddleware

__all__ = ["create_app"]

MAX_BODY = 1_048_576


class _QuietDrop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, ConnectionDropped)


def _error(status: int, message: str, kind: str, code: str) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "code": code}}
    headers = {"retry-after": "1"} if status == 429 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _parse(body: Any, chat: bool) -> tuple[str, bool, int]:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    model = body.get("model", "fake")
    if not isinstance(model, str) or not 0 < len(model) <= 256:
        raise InvalidRequest("'model' must be a non-empty string")
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise InvalidRequest("'messages' must be a non-empty list")
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InvalidRequest("each message needs a string 'role'")
            if not isinstance(m.get("content"), str | list | type(None)):
                raise InvalidRequest("a message 'content' must be a string or a list")
    elif not isinstance(body.get("prompt"), str | list):
        raise InvalidRequest("'prompt' must be a string or a list")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be true or false")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000
    ):
        raise InvalidRequest("'max_tokens' must be an integer in [1, 100000]")
    return model, stream, int(limit) if limit is not None else 100_000


def _state(request: Request) -> FakeLLMState:
    state: FakeLLMState = request.app.state.fake
    return state


async def _generate(request: Request, chat: bool) -> Response:
    """Validate a completion request, draw its fault, and answer with it."""
    state = _state(request)
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _error(
            400, "the request body is not valid JSON", "invalid_request_error", "invalid_json"
        )
    try:
        model, stream, limit = _parse(body, chat)
        spec = request.headers.get("x-fake-mode")
        plan = parse_plan(spec) if spec else state.config.plan
        timing = state.config.timing.with_headers(request.headers)
    except InvalidRequest as e:
        return _error(400, str(e), "invalid_request_error", e.code)
    mode = plan.pick(state.rng)
    state.counts[mode] += 1
    if mode == "429":
        return _error(429, "rate limited (fake-llm)", "rate_limit_error", "rate_limited")
    if mode == "500":
        return _error(500, "internal error (fake-llm)", "server_error", "server_error")
    job = Job(
        chat,
        stream,
        model,
        min(limit, timing.tokens),
        mode,
        timing,
        random.Random(state.rng.random()),
        f"fake-{next(state.ids)}",
    )
    return FaultResponse(job, state)


async def _chat(request: Request) -> Response:
    return await _generate(request, chat=True)


async def _completions(request: Request) -> Response:
    return await _generate(request, chat=False)


async def _models(request: Request) -> Response:
    data = [
        {"id": m, "object": "model", "created": 0, "owned_by": "rtgate-fake-llm"}
        for m in _state(request).config.models
    ]
    return JSONResponse({"object": "list", "data": data})


async def _stats(request: Request) -> Response:
    return JSONResponse(_state(request).stats())


async def _set_mode(request: Request) -> Response:
    state = _state(request)
    try:
        body = json.loads(await request.body())
        if not isinstance(body, dict) or not isinstance(body.get("mode"), str):
            raise InvalidRequest('send {"mode": SPEC}')
        state.config.plan = parse_plan(body["mode"])
    except ValueError as e:
        return _error(400, str(e) or "bad JSON", "invalid_request_error", "invalid_request")
    return JSONResponse(state.stats())


async def _healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


def create_app(config: FakeLLMConfig | None = None) -> Starlette:
    """The fake server's ASGI app (``app.state.fake`` holds its :class:`FakeLLMState`, which
    the handlers read from their request's app)."""
    cfg = config or FakeLLMConfig()
    state = FakeLLMState(cfg, random.Random(cfg.seed))
    logging.getLogger("uvicorn.error").addFilter(_QuietDrop())
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", _chat, methods=["POST"]),
            Route("/v1/completions", _completions, methods=["POST"]),
            Route("/v1/models", _models),
            Route("/fake/stats", _stats),
            Route("/fake/mode", _set_mode, methods=["POST"]),
            Route("/healthz", _healthz),
        ],
        middleware=[
            Middleware(ErrorShieldMiddleware, quiet=(ConnectionDropped,)),
            Middleware(BodyLimitMiddleware, max_bytes=MAX_BODY),
        ],
    )
    app.state.fake = state
    return app

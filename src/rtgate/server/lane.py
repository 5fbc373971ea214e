"""The passthrough lane: a chat completion for a named upstream, answered without the
web framework's routing.

The innermost layer of the server's stack (inside the front door, the error shield, the
body limit and the key check, so every one of them still applies). For
``POST /v1/chat/completions`` it reads the body once, and when the body names an upstream
(:func:`~rtgate.server.passthrough.upstreams`) and passes the same checks the route makes
(the request schema, the budget, the key's caps, rtgate's own fields), it answers through
:func:`~rtgate.server.passthrough.answer` directly. Anything else (model ``auto``, an
unknown model, a body any check refuses) goes on to the routed app with the body replayed,
so errors come from one place and read the same either way.

Why: FastAPI's routing, dependency injection and its own layers cost about a tenth of a
proxied request (`rtgate bench proxy`'s profile); a gateway pays that on every request.
"""

from __future__ import annotations

import json

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rtgate.core.errors import RtgateError
from rtgate.server import passthrough
from rtgate.server.schemas import ChatCompletionRequest
from rtgate.server.state import ServerState, key_in

__all__ = ["PATH", "PassthroughLane"]

PATH = "/v1/chat/completions"


class PassthroughLane:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        st = _state(scope)
        if st is None:  # not started (or the app is not rtgate's)
            await self.app(scope, receive, send)
            return
        body, disconnected = await _read_body(receive)
        if disconnected:
            return  # the client left before it finished asking
        prep = _prepare(st, scope, body)
        if prep is None:
            await self.app(scope, _replay(body, receive), send)
            return
        await passthrough.answer(st, prep, scope, receive, send)


def _state(scope: Scope) -> ServerState | None:
    app = scope.get("app")
    st = getattr(getattr(app, "state", None), "rtgate", None)
    return st if isinstance(st, ServerState) else None


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", True
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts), False


def _prepare(st: ServerState, scope: Scope, body: bytes) -> passthrough.Prepared | None:
    """The request ready for its upstream, or ``None`` when the routed app must answer it
    (not a named upstream, or refused by a check: the route refuses it the same way)."""
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):  # the route says what is wrong with it
        return None
    if not isinstance(raw, dict):
        return None
    model = raw.get("model")
    if not isinstance(model, str) or model in st.config.server.models:
        return None
    up = passthrough.upstreams(st).get(model)
    if up is None:
        return None
    try:
        checked = ChatCompletionRequest.model_validate(raw)
        key = key_in(scope)
        budget = st.budget_ms(_header(scope, b"x-budget-ms"), checked.budget_ms, key)
        return passthrough.prepare(st, up, raw, budget, key)
    except (ValidationError, RtgateError):
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope["headers"]:
        if k == name:
            return str(v.decode("latin-1"))
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` first, then whatever the client sends next."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again

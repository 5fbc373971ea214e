"""ASGI middleware: API-key authentication with per-key rate limits, body size limits, and a
shield that turns any unhandled exception into a JSON error without a stack trace.

Every error the client sees has one shape: ``{"error": {"code", "message", "type"}}``
(``type`` as in OpenAI's errors, so SDKs classify them; the server's own errors match).

- 401 ``missing_api_key`` / ``invalid_api_key`` (with ``WWW-Authenticate: Bearer``)
- 429 ``rate_limited`` (with ``Retry-After`` in whole seconds)
- 413 ``body_too_large``
- 500 ``internal_error`` (the message carries a reference id; the traceback goes to the log)

The key is read from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; for a
WebSocket (browsers cannot set headers there) also from the ``api_key`` query parameter.
The verified :class:`~rtgate.security.keys.KeyRecord` is put in ``scope["state"]["api_key"]``
(``request.state.api_key`` in Starlette) so a route can apply the key's caps, and the store
in ``scope["state"]["api_key_store"]``, so a WebSocket can charge each message it serves.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rtgate.core.errors import (
    BackendError,
    InvalidRequest,
    QueueFull,
    RateLimited,
    RtgateError,
)
from rtgate.security.keys import KeyStore

__all__ = [
    "APIKeyMiddleware",
    "BodyLimitMiddleware",
    "ErrorShieldMiddleware",
    "error_body",
    "request_key",
    "send_error",
]

log = logging.getLogger("rtgate.security")


_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def error_body(code: str, message: str, status: int = 400) -> bytes:
    """The JSON error; ``type`` follows the OpenAI error shape, as the server's own do."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return json.dumps({"error": {"code": code, "message": message, "type": kind}}).encode()


async def send_error(
    scope: Scope,
    send: Send,
    status: int,
    code: str,
    message: str,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """Send a JSON error as the whole response (HTTP) or refuse the handshake (WebSocket)."""
    body = error_body(code, message, status)
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().encode(), v.encode()) for k, v in headers),
    ]
    if scope["type"] == "websocket":
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": status, "headers": raw})
            await send({"type": "websocket.http.response.body", "body": body})
        else:  # 1008: policy violation
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return bytes(v).decode("latin-1")
    return None


class APIKeyMiddleware:
    """Requires a valid API key on every HTTP and WebSocket request except ``exempt`` paths
    and CORS preflights (``OPTIONS``), and charges the key's rate limit."""

    def __init__(
        self,
        app: ASGIApp,
        store: KeyStore,
        *,
        exempt: Iterable[str] = ("/healthz", "/metrics"),
    ) -> None:
        self.app = app
        self.store = store
        self.exempt = frozenset(exempt)

    def extract(self, scope: Scope) -> str | None:
        auth = _header(scope, b"authorization")
        if auth is not None:
            scheme, _, value = auth.strip().partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
        key = _header(scope, b"x-api-key")
        if key is not None and key.strip():
            return key.strip()
        if scope["type"] == "websocket":
            qs = bytes(scope.get("query_string", b"")).decode("latin-1")
            for k, v in parse_qsl(qs):
                if k == "api_key" and v:
                    return v
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)  # CORS preflight carries no credentials
            return
        key = self.extract(scope)
        if key is None:
            message = "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'"
            await self._refuse(scope, receive, send, 401, "missing_api_key", message)
            return
        rec = self.store.verify(key)
        if rec is None:
            await self._refuse(
                scope, receive, send, 401, "invalid_api_key", "the API key is not valid"
            )
            return
        wait_s = self.store.take(rec)
        if wait_s > 0:
            retry = max(1, math.ceil(wait_s))
            log.info("rate limited key %s (%s)", rec.key_id, rec.name)
            await self._refuse(
                scope,
                receive,
                send,
                429,
                "rate_limited",
                f"too many requests for this API key; retry in {retry} s",
                [("retry-after", str(retry))],
            )
            return
        st = scope.setdefault("state", {})
        st["api_key"] = rec
        st["api_key_store"] = self.store
        await self.app(scope, receive, send)

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        code: str,
        message: str,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        hdrs = list(headers or [])
        if status == 401:
            hdrs.append(("www-authenticate", "Bearer"))
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
        await send_error(scope, send, status, code, message, hdrs)


class _BodyTooLarge(HTTPException):
    """Raised from ``receive`` past the limit. An ``HTTPException`` so that a framework
    reading the body (FastAPI turns other errors there into a 400) answers it as a 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than {max_bytes} bytes")


class BodyLimitMiddleware:
    """Refuses HTTP bodies over ``max_bytes`` with 413, by ``Content-Length`` at once or
    while reading a chunked body (the app never sees more than ``max_bytes``)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > self.max_bytes):
            await self._too_large(scope, send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge(self.max_bytes)
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await self._too_large(scope, send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        message = f"the request body is larger than {self.max_bytes} bytes"
        await send_error(scope, send, 413, "body_too_large", message)


_STATUS: list[tuple[type[RtgateError], int]] = [
    (InvalidRequest, 400),
    (QueueFull, 503),
    (RateLimited, 429),
    (BackendError, 502),
]


class ErrorShieldMiddleware:
    """The outermost layer: an exception that escapes the app becomes a JSON error (an
    ``RtgateError`` keeps its code; anything else is a 500 with a reference id), and the
    traceback is logged, never sent."""

    def __init__(self, app: ASGIApp, *, quiet: tuple[type[BaseException], ...] = ()) -> None:
        self.app = app
        self.quiet = quiet  # re-raised as they are, not logged (deliberate connection drops)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] in ("http.response.start", "websocket.accept", "websocket.close"):
                started = True
            await send(msg)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if isinstance(exc, self.quiet):
                raise
            ref = secrets.token_hex(4)
            status, code, message = self._describe(exc, ref)
            if status >= 500:
                log.error("unhandled error [ref %s] on %s", ref, scope.get("path"), exc_info=exc)
            if started:
                raise  # the response is under way: the server can only drop the connection
            await send_error(scope, send, status, code, message)

    @staticmethod
    def _describe(exc: Exception, ref: str) -> tuple[int, str, str]:
        if isinstance(exc, RtgateError):
            for cls, status in _STATUS:
                if isinstance(exc, cls):
                    return status, exc.code, str(exc)[:500]
        return 500, "internal_error", f"internal error (reference {ref})"


def request_key(scope: Scope) -> Any:
    """The verified key record of a request, if the key middleware ran."""
    return scope.get("state", {}).get("api_key")

"""The server's front door, the outermost layer: it stamps each request's arrival (when
the HTTP protocol did not: :mod:`rtgate.server.arrival`) and answers ``503 overloaded``
with ``Retry-After`` at once, before any other work, to an answer request that comes past
``server.max_inflight`` answer requests in progress, or while the event loop is more than
``server.max_loop_lag_ms`` behind (:class:`~rtgate.server.arrival.LoopWatch`; the
protocol refuses those even earlier, :class:`~rtgate.server.arrival.StampedHttpTools`).
One layer for all: every request passes it.

When more requests arrive than the process can answer within their budgets, serving them
all makes every one late. A refusal here costs a few tens of microseconds (no body read, no
routing, no validation, a pre-encoded body), so the requests let in keep their budgets and
the others learn at once to retry. Only the routes that ask for an answer are counted
(``POST /v1/gate``, ``/v1/chat/completions``, ``/v1/complete``); health, metrics and job
reads always get through. A request let in can still be shed later, when its budget was
spent waiting (:meth:`rtgate.server.state.ServerState.begin`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from rtgate.server.arrival import ANSWER_PATHS, ARRIVAL, BEHIND_MESSAGE, WATCH, LoopWatch

__all__ = ["ANSWER_PATHS", "FrontDoor"]


def _refusal(message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A pre-encoded ``503 overloaded``: its headers and body."""
    error = {"code": "overloaded", "message": message, "type": "server_error"}
    body = json.dumps({"error": error}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
    ]
    return headers, body


_FULL = _refusal("the server is at its limit of requests in flight; retry shortly")
_BEHIND = _refusal(BEHIND_MESSAGE)


class FrontDoor:
    """Stamps arrivals; counts the answer requests in progress; past ``limit``, or while
    ``watch`` says the loop is more than ``max_lag_ms`` behind (``None``: no such limit),
    refuses the newcomer."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        paths: frozenset[str] = ANSWER_PATHS,
        max_lag_ms: float | None = None,
        watch: LoopWatch = WATCH,
    ) -> None:
        self.app = app
        self.limit = limit
        self.paths = paths
        self.max_lag_ms = max_lag_ms
        self.watch = watch
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            state: dict[str, Any] = scope.setdefault("state", {})
            if ARRIVAL not in state:  # the protocol did not stamp it (h11, WebSockets, tests)
                state[ARRIVAL] = self.watch.arrival(asyncio.get_running_loop().time())
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        refusal = None
        if self.active >= self.limit:
            refusal = _FULL
        elif self.max_lag_ms is not None:
            if self.watch.behind_ms(asyncio.get_running_loop().time()) > self.max_lag_ms:
                refusal = _BEHIND
        if refusal is not None:
            headers, body = refusal
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1

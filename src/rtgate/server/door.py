"""The server's front door, the outermost layer: it stamps each request's arrival (when
the HTTP protocol did not: :mod:`rtgate.server.arrival`) and, past ``server.max_inflight``
answer requests in progress, answers the next one ``503 overloaded`` with ``Retry-After``
at once. One layer for both: every request passes it.

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

from rtgate.server.arrival import ARRIVAL

__all__ = ["ANSWER_PATHS", "FrontDoor"]

ANSWER_PATHS = frozenset({"/v1/gate", "/v1/chat/completions", "/v1/complete"})

_BODY = json.dumps(
    {
        "error": {
            "code": "overloaded",
            "message": "the server is at its limit of requests in flight; retry shortly",
            "type": "server_error",
        }
    }
).encode()
_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_BODY)).encode()),
    (b"retry-after", b"1"),
]


class FrontDoor:
    """Stamps arrivals; counts the answer requests in progress; past ``limit``, refuses
    the newcomer."""

    def __init__(self, app: ASGIApp, limit: int, paths: frozenset[str] = ANSWER_PATHS) -> None:
        self.app = app
        self.limit = limit
        self.paths = paths
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            state: dict[str, Any] = scope.setdefault("state", {})
            if ARRIVAL not in state:  # the protocol did not stamp it (h11, WebSockets, tests)
                state[ARRIVAL] = asyncio.get_running_loop().time()
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            await send({"type": "http.response.start", "status": 503, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": _BODY})
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1

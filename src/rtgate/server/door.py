"""The server's front door: past ``server.max_inflight`` answer requests in progress, the
next one is answered ``503 overloaded`` with ``Retry-After`` at once.

When more requests arrive than the process can answer within their budgets, serving them
all makes every one late. A refusal here costs a few tens of microseconds (no body read, no
routing, no validation, a pre-encoded body), so the requests let in keep their budgets and
the others learn at once to retry. Only the routes that ask for an answer are counted
(``POST /v1/gate``, ``/v1/chat/completions``, ``/v1/complete``); health, metrics and job
reads always get through. A request let in can still be shed later, when its budget was
spent waiting (:meth:`rtgate.server.state.ServerState.begin`).
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

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
    """Counts the answer requests in progress; past ``limit``, refuses the newcomer."""

    def __init__(self, app: ASGIApp, limit: int, paths: frozenset[str] = ANSWER_PATHS) -> None:
        self.app = app
        self.limit = limit
        self.paths = paths
        self.active = 0
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            self.refused += 1
            await send({"type": "http.response.start", "status": 503, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": _BODY})
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1

"""The server's front door, the outermost layer: it stamps each request's arrival (when
the HTTP protocol did not: :mod:`rtgate.server.arrival`) and answers ``503 overloaded``
with ``Retry-After`` at once, before any other work, to an answer request that comes past
``server.max_inflight`` answer requests in progress, or while the event loop is more than
``server.max_loop_lag_ms`` behind (:class:`~rtgate.server.arrival.LoopWatch`; the
protocol refuses those even earlier, :class:`~rtgate.server.arrival.StampedHttpTools`).
One layer for all: every request passes it.

While the loop runs behind, the limit on answers in progress also adapts (additive
increase, multiplicative decrease, as TCP's congestion window): when the loop is more
than half of ``max_loop_lag_ms`` behind, the limit drops to four fifths of the answers in
progress (at most once per :data:`CUT_EVERY_S`, never under :data:`MIN_LIMIT`); while the
loop keeps up, a request that finds the limit reached raises it by one, up to
``server.max_inflight``. Refusing on the lag alone admits a burst each time the lag dips
under the line, and a burst let in all at once finishes late together (measured with
``rtgate bench proxy-scale`` at three times a capped worker's capacity).

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

__all__ = ["ANSWER_PATHS", "CUT_EVERY_S", "MIN_LIMIT", "FrontDoor"]

MIN_LIMIT = 8
CUT_EVERY_S = 0.05


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
    """Stamps arrivals; counts the answer requests in progress; past the limit (at most
    ``limit``; adapted to the loop's lag when ``max_lag_ms`` is set), or while ``watch``
    says the loop is more than ``max_lag_ms`` behind, refuses the newcomer."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        paths: frozenset[str] = ANSWER_PATHS,
        max_lag_ms: float | None = None,
        watch: LoopWatch = WATCH,
    ) -> None:
        self.app = app
        self.max_limit = limit
        self.limit = limit  # what is let in now (adapted between MIN_LIMIT and max_limit)
        self._cut_at = -1e9
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
        if self.max_lag_ms is not None:
            refusal = self._adapt(asyncio.get_running_loop().time(), self.max_lag_ms)
        elif self.active >= self.limit:
            self.watch.count("door_full")
            refusal = _FULL
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

    def _adapt(
        self, now: float, max_lag_ms: float
    ) -> tuple[list[tuple[bytes, bytes]], bytes] | None:
        """Adapt the limit to the loop's lag; the refusal for this request, or ``None``."""
        lag = self.watch.behind_ms(now)
        if lag > max_lag_ms / 2 and now - self._cut_at >= CUT_EVERY_S:
            self.limit = max(MIN_LIMIT, min(self.limit, self.active * 4 // 5))
            self._cut_at = now
        if lag > max_lag_ms:
            self.watch.count("door_behind")
            return _BEHIND
        if self.active < self.limit:
            return None
        if lag == 0.0 and self.limit < self.max_limit:
            self.limit += 1
            return None
        self.watch.count("door_full")
        return _FULL

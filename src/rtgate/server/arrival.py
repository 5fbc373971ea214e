"""When a request arrived, so its budget is counted from there and not from when its
handler got to run.

Under a burst the event loop has a queue of its own: a request whose bytes arrived at
``t`` may reach its handler tens or hundreds of milliseconds later. A budget started in
the handler would hide that wait, and the caller would get a "300 ms" answer 500 ms after
asking. So the arrival is stamped as early as the process can see it:

- :class:`StampedHttpTools`: uvicorn's httptools protocol, stamping ``scope["state"]``
  when the request line starts to parse (inside the socket's read callback), before the
  request waits for a task of its own;
- :class:`~rtgate.server.door.FrontDoor`: the outermost ASGI layer, stamping what the
  protocol did not (another protocol, WebSockets, tests without a server).

:func:`arrival_of` reads the stamp, on the event loop's clock (the clock of
:class:`~rtgate.core.budget.Budget`).

A stamp taken when the bytes are *read* still misses the time they waited in the socket
while the loop was busy: under overload one pass of the loop over a thousand ready
requests takes hundreds of milliseconds, and a request that arrived at its start is read
at its end. :class:`LoopWatch` ticks on the loop every few milliseconds; when the last tick
is older than two intervals the loop is behind, and the stamp is the last tick instead of
the time of reading (the loop was last free then; the bytes can have arrived since). So a
budget counts the unseen wait too, and the front door can refuse a request that waited
too long before the process could even read it.

While the loop is more than ``server.max_loop_lag_ms`` behind, :class:`StampedHttpTools`
refuses an answer request (``POST`` to :data:`ANSWER_PATHS`) as soon as its headers are
parsed: a pre-encoded ``503 overloaded`` written straight to the socket, with no task, no
ASGI call and its body dropped. Under overload, refusing is then a small part of what
answering costs, so the requests let in still finish within their budgets.
"""

from __future__ import annotations

import asyncio
import json
import math

from starlette.requests import HTTPConnection
from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "ANSWER_PATHS",
    "ARRIVAL",
    "BEHIND_MESSAGE",
    "WATCH",
    "LoopWatch",
    "StampedHttpTools",
    "arrival_in",
    "arrival_of",
]

ARRIVAL = "rtgate.arrival"
ANSWER_PATHS = frozenset({"/v1/gate", "/v1/chat/completions", "/v1/complete"})
"""The routes that ask for an answer: what overload refuses (health, metrics and job reads
always get through)."""
BEHIND_MESSAGE = "the server is behind on its requests; retry shortly"


class LoopWatch:
    """When the event loop was last free to run a timer, so a request read while it is
    behind is stamped from then (:meth:`arrival`). One per process (:data:`WATCH`): the
    server starts it with its lifespan; stopped, it stamps the time of reading."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval = interval_s
        self.shed_above_ms: float | None = None  # refuse answer requests this far behind
        self.refused: dict[str, int] = {}  # answer requests refused, by where and why
        self.last_tick = -math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stop()
        self._loop = loop
        self._tick()

    def _tick(self) -> None:
        loop = self._loop
        if loop is None:
            return
        self.last_tick = loop.time()
        self._handle = loop.call_later(self.interval, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._loop, self._handle, self.last_tick = None, None, -math.inf

    @property
    def running(self) -> bool:
        return self._handle is not None

    def behind_ms(self, now: float) -> float:
        """How long the loop has not been free to tick (0 when it keeps up, or stopped)."""
        late = now - self.last_tick
        return late * 1000.0 if self._handle is not None and late > 2 * self.interval else 0.0

    def count(self, why: str) -> None:
        """One more answer request refused for ``why`` (``/metrics``, ``/healthz``)."""
        self.refused[why] = self.refused.get(why, 0) + 1

    def arrival(self, now: float) -> float:
        """The arrival to stamp for a request read at ``now``: the last tick when the loop
        is behind, else ``now``."""
        return self.last_tick if self.behind_ms(now) else now


WATCH = LoopWatch()
"""The process's watch on its event loop (started by the server's lifespan)."""


_ANSWER_PATHS = frozenset(p.encode() for p in ANSWER_PATHS)
_BODY = json.dumps(
    {"error": {"code": "overloaded", "message": BEHIND_MESSAGE, "type": "server_error"}}
).encode()
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nretry-after: 1\r\n\r\n%s" % (len(_BODY), _BODY)
)


class _Signal:
    def set(self) -> None:
        pass


class _Refused:
    """Stands for the request/response cycle of a refused request: finished, so the
    protocol drops its body and starts the next request on the connection normally."""

    response_complete = True
    keep_alive = True
    disconnected = False
    message_event = _Signal()


_REFUSED = _Refused()


class StampedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, with each request's arrival in ``scope["state"]``,
    refusing answer requests at once while the loop is behind (:data:`WATCH`)."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["state"][ARRIVAL] = WATCH.arrival(self.loop.time())

    def on_headers_complete(self) -> None:
        limit = WATCH.shed_above_ms
        if (
            limit is not None
            and (self.cycle is None or self.cycle.response_complete)  # not pipelined
            and WATCH.behind_ms(self.loop.time()) > limit
            and self.parser.get_method() == b"POST"
            and self.url.split(b"?", 1)[0] in _ANSWER_PATHS
        ):
            WATCH.count("protocol_behind")
            self.cycle = _REFUSED  # type: ignore[assignment]
            self.transport.write(_REFUSAL)
            if self.parser.should_keep_alive():
                self.on_response_complete()
            else:
                self.transport.close()
            return
        super().on_headers_complete()


def arrival_of(conn: HTTPConnection) -> float | None:
    """The request's arrival on the loop's clock, if stamped."""
    return arrival_in(conn.scope)


def arrival_in(scope: Scope) -> float | None:
    """:func:`arrival_of` for an ASGI scope."""
    t = scope.get("state", {}).get(ARRIVAL)
    return t if isinstance(t, float) else None

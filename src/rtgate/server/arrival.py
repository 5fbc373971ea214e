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
"""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ARRIVAL", "StampedHttpTools", "arrival_in", "arrival_of"]

ARRIVAL = "rtgate.arrival"


class StampedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, with each request's arrival in ``scope["state"]``."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["state"][ARRIVAL] = self.loop.time()


def arrival_of(conn: HTTPConnection) -> float | None:
    """The request's arrival on the loop's clock, if stamped."""
    return arrival_in(conn.scope)


def arrival_in(scope: Scope) -> float | None:
    """:func:`arrival_of` for an ASGI scope."""
    t = scope.get("state", {}).get(ARRIVAL)
    return t if isinstance(t, float) else None

"""What every endpoint shares: the config, the gate, and how a request is checked and built.

Endpoints get it with the async :func:`state` dependency (``Depends(state)``) or by calling
:func:`get_state` on a request or WebSocket; routers that applications mount do the same
to reach the gate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection
from starlette.requests import Request as HttpRequest

from rtgate.assemble import Assembly
from rtgate.budget import MAX_BUDGET_MS
from rtgate.config import Config
from rtgate.errors import InvalidBudget
from rtgate.gate import Gate, GateResult
from rtgate.server.errors import ApiError
from rtgate.server.streams import unless_disconnected
from rtgate.tiers.base import Message, Request
from rtgate.tiers.textnorm import lang_of

__all__ = ["ServerState", "get_state", "state"]


@dataclass(slots=True)
class ServerState:
    """The running server's shared objects."""

    config: Config
    assembly: Assembly
    started: float = field(default_factory=time.time)

    @property
    def gate(self) -> Gate:
        return self.assembly.gate

    def budget_ms(self, header: str | None, body: float | None) -> float:
        """The request's budget: the tighter of the ``X-Budget-Ms`` header and the
        ``budget_ms`` field, else the configured default. Raises ``InvalidBudget``."""
        s = self.config.server
        values: list[float] = []
        if header is not None and header.strip():
            try:
                values.append(float(header))
            except ValueError:
                raise InvalidBudget(f"X-Budget-Ms must be a number, got {header!r}") from None
        if body is not None:
            values.append(body)
        budget = min(values) if values else s.default_budget_ms
        limit = min(s.max_budget_ms, MAX_BUDGET_MS)
        if not 0 < budget <= limit:  # also false for NaN
            raise InvalidBudget(f"budget_ms must be in (0, {limit:g}], got {budget:g}")
        return budget

    async def answer(self, http: HttpRequest, request: Request, budget_ms: float) -> GateResult:
        """``gate.answer`` for a plain (not streamed) response, cancelled if the client
        disconnects. Budgets up to ``server.watch_disconnect_ms`` are not watched: they end
        within that time anyway, and the watcher would cost more than it saves."""
        work = self.gate.answer(request, budget_ms)
        if budget_ms <= self.config.server.watch_disconnect_ms:
            return await work
        return await unless_disconnected(http, work)

    def request(
        self,
        text: str,
        messages: Sequence[Message] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] = (),
        delegate: bool | None = None,
    ) -> Request:
        """A gate request, after the size limits; the placeholder follows the language."""
        s = self.config.server
        size = len(text) + sum(len(m.content) for m in messages)
        if size > s.max_input_chars:
            raise ApiError(
                400,
                "prompt_too_long",
                f"the prompt has {size} characters; the limit is {s.max_input_chars}",
            )
        if len(messages) > s.max_messages:
            raise ApiError(
                400, "too_many_messages", f"at most {s.max_messages} messages, got {len(messages)}"
            )
        if max_tokens is not None and max_tokens > s.max_tokens:
            raise ApiError(
                400, "max_tokens_too_large", f"max_tokens must be <= {s.max_tokens}", "max_tokens"
            )
        g = self.config.gate
        placeholder = g.placeholder_zh if lang_of(text) == "zh" else g.placeholder
        return Request(
            input=text,
            messages=tuple(messages),
            max_tokens=max_tokens if max_tokens is not None else 128,
            temperature=0.0 if temperature is None else temperature,
            stop=tuple(stop),
            delegate=delegate,
            meta={"placeholder": placeholder},
        )


def get_state(conn: HTTPConnection) -> ServerState:
    """The server state (a FastAPI dependency for HTTP and WebSocket endpoints)."""
    state: ServerState | None = getattr(conn.app.state, "rtgate", None)
    if state is None:
        raise ApiError(503, "starting", "the server is starting")
    return state


async def state(conn: HTTPConnection) -> ServerState:
    """:func:`get_state` as an async dependency (a sync one would run in a thread pool)."""
    return get_state(conn)

"""What every endpoint shares: the config, the gate, and how a request is checked and built.

Endpoints get it with the async :func:`state` dependency (``Depends(state)``) or by calling
:func:`get_state` on a request or WebSocket; routers that applications mount do the same
to reach the gate.

With API keys on, the verified key (:func:`api_key`) carries caps on ``budget_ms`` and
``max_tokens``: :meth:`ServerState.budget_ms` and :meth:`ServerState.request` refuse a
request that asks for more (``key_limit_exceeded``), and use the cap as the default when
the request asks for nothing and the server's default is above it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection
from starlette.requests import Request as HttpRequest
from starlette.types import Scope

from rtgate.assembly.build import Assembly
from rtgate.config.loader import Config
from rtgate.core.budget import MAX_BUDGET_MS, Budget
from rtgate.core.errors import ApiError, InvalidBudget, Overloaded
from rtgate.core.request import Message, Piece, Request
from rtgate.core.text_rules import check_text
from rtgate.core.trace import Trace
from rtgate.gate import DoneEvent, Gate, GateEvent, GateResult
from rtgate.security.keys import KeyRecord, KeyStore
from rtgate.server.arrival import arrival_of
from rtgate.server.streams import unless_disconnected
from rtgate.tiers.textnorm import lang_of

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ServerState",
    "api_key",
    "get_state",
    "key_store",
    "owner_of",
    "state",
]

log = logging.getLogger("rtgate.server")
DEFAULT_MAX_TOKENS = 128


def api_key(conn: HTTPConnection) -> KeyRecord | None:
    """The verified API key of a request or WebSocket (``None`` when keys are off)."""
    return key_in(conn.scope)


def key_in(scope: Scope) -> KeyRecord | None:
    """:func:`api_key` for an ASGI scope."""
    rec = scope.get("state", {}).get("api_key")
    return rec if isinstance(rec, KeyRecord) else None


def key_store(conn: HTTPConnection) -> KeyStore | None:
    """The key store that verified the request (to charge a WebSocket's messages)."""
    store = conn.scope.get("state", {}).get("api_key_store")
    return store if isinstance(store, KeyStore) else None


@dataclass(slots=True)
class ServerState:
    """The running server's shared objects.

    ``auth`` is ``"api_keys"`` or ``"open"``; ``fleet`` says what shared latency was
    loaded (:mod:`rtgate.server.fleet`). Background work started on behalf of
    requests (cancelling a job on the broker after its client left) is held in
    ``background``, at most ``max_background`` tasks; past that it is skipped and logged.
    """

    config: Config
    assembly: Assembly
    started: float = field(default_factory=time.time)
    auth: str = "open"
    fleet: dict[str, Any] = field(default_factory=lambda: {"enabled": False})
    max_background: int = 1024
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    upstream_cache: dict[str, Any] | None = None  # passthrough.upstreams fills it once

    @property
    def gate(self) -> Gate:
        return self.assembly.gate

    def spawn(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        """Run ``work`` in the background, held here until it ends (errors are logged)."""
        if len(self.background) >= self.max_background:
            work.close()
            log.warning("background work skipped (%d running): %s", len(self.background), what)
            return
        task = asyncio.ensure_future(work)
        self.background.add(task)
        task.add_done_callback(lambda t: self._reap(t, what))

    def _reap(self, task: asyncio.Task[Any], what: str) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed: %s", what, task.exception())

    async def aclose(self) -> None:
        """Cancel and await the background work."""
        tasks = list(self.background)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def budget_ms(
        self, header: str | None, body: float | None, key: KeyRecord | None = None
    ) -> float:
        """The request's budget: the tighter of the ``X-Budget-Ms`` header and the
        ``budget_ms`` field, else the configured default (capped by ``key``'s limit).
        Raises ``InvalidBudget``, or ``KeyLimitExceeded`` above ``key``'s limit."""
        s = self.config.server
        values: list[float] = []
        if header is not None and header.strip():
            try:
                values.append(float(header))
            except ValueError:
                shown = header.encode("latin-1", "replace").decode("utf-8", "replace")
                raise InvalidBudget(f"X-Budget-Ms must be a number, got {shown!r}") from None
        if body is not None:
            values.append(body)
        budget = min(values) if values else s.default_budget_ms
        cap = key.policy.max_budget_ms if key is not None else None
        if not values and cap is not None:
            budget = min(budget, cap)
        limit = min(s.max_budget_ms, MAX_BUDGET_MS)
        if not 0 < budget <= limit:  # also false for NaN
            raise InvalidBudget(f"budget_ms must be in (0, {limit:g}], got {budget:g}")
        if key is not None:
            key.policy.check(budget_ms=budget)
        return budget

    def begin(
        self, conn: HTTPConnection, request: Request, budget_ms: float
    ) -> Budget | GateResult:
        """The request's budget, counted from its arrival (:mod:`rtgate.server.arrival`);
        or, when it cannot be served in time (less than ``shed_margin_ms`` of its budget left
        after waiting for the server), its answer now. (Past ``server.max_inflight`` the
        front door has already refused it: :mod:`rtgate.server.door`.) That answer is the
        placeholder, or with
        ``server.overload = "error"`` an ``Overloaded`` (503 with Retry-After) raised here,
        before any response has started. Never an answer past the budget."""
        s = self.config.server
        budget = Budget(budget_ms, start=arrival_of(conn))
        reason = self.behind(budget)
        if reason is None:
            return budget
        if s.overload == "error":
            raise Overloaded(f"the server is overloaded: {reason}", retry_after_s=1.0)
        return self._placeholder(request, budget, reason)

    def behind(self, budget: Budget, max_wait_ms: float | None = None) -> str | None:
        """Why a request with ``budget`` (counted from its arrival) is too late to start,
        or ``None``: less than ``server.shed_margin_ms`` of it left, or (when given) more
        than ``max_wait_ms`` spent waiting for the server already."""
        waited = budget.elapsed_ms()
        if budget.left_ms() <= self.config.server.shed_margin_ms:
            return f"it waited {waited:.0f} ms of its {budget.budget_ms:g} ms budget for the server"
        if max_wait_ms is not None and waited > max_wait_ms:
            return f"it waited {waited:.0f} ms for the server (the most is {max_wait_ms:g})"
        return None

    def _placeholder(self, request: Request, budget: Budget, reason: str) -> GateResult:
        text = str(request.meta.get("placeholder", ""))
        trace = Trace(request.id, budget.budget_ms)
        trace.route, trace.degraded = "silent", f"shed: {reason}"
        trace.elapsed_ms = budget.elapsed_ms()
        self.gate.metrics.record(
            "silent", ttft_ms=None, e2e_ms=trace.elapsed_ms, budget_ms=budget.budget_ms
        )
        return GateResult(text, [Piece(text)] if text else [], "silent", trace)

    async def answer(self, http: HttpRequest, request: Request, budget_ms: float) -> GateResult:
        """``gate.answer`` for a plain (not streamed) response, its budget counted from the
        request's arrival (shed at once when it cannot be met: :meth:`begin`), cancelled if
        the client disconnects. Budgets up to ``server.watch_disconnect_ms`` are not
        watched: they end within that time anyway, and the watcher costs more than it saves."""
        started = self.begin(http, request, budget_ms)
        if isinstance(started, GateResult):
            return started
        work = self.gate.answer(request, started)
        if budget_ms <= self.config.server.watch_disconnect_ms:
            return await work
        return await unless_disconnected(http, work)

    def events(
        self, request: Request, started: Budget | GateResult
    ) -> AsyncGenerator[GateEvent, None]:
        """``gate.stream`` from :meth:`begin`'s budget (no extra layer around it); a shed
        request is one ``DoneEvent``."""
        if isinstance(started, GateResult):
            return _done(started)
        return self.gate.stream(request, started)

    def request(
        self,
        text: str,
        messages: Sequence[Message] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] = (),
        delegate: bool | None = None,
        key: KeyRecord | None = None,
    ) -> Request:
        """A gate request, after the size limits and ``key``'s ``max_tokens`` cap; the
        placeholder follows the language."""
        s = self.config.server
        check_text(text, "input")
        for i, m in enumerate(messages):
            check_text(m.content, f"messages[{i}].content")
        for i, word in enumerate(stop):
            check_text(word, f"stop[{i}]")
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
        if key is not None:
            key.policy.check(max_tokens=max_tokens)
            if max_tokens is None and key.policy.max_tokens is not None:
                max_tokens = min(DEFAULT_MAX_TOKENS, key.policy.max_tokens)
        g = self.config.gate
        placeholder = g.placeholder_zh if lang_of(text) == "zh" else g.placeholder
        return Request(
            input=text,
            messages=tuple(messages),
            max_tokens=max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS,
            temperature=0.0 if temperature is None else temperature,
            stop=tuple(stop),
            delegate=delegate,
            meta={"placeholder": placeholder, **owner_meta(key)},
        )


async def _done(result: GateResult) -> AsyncGenerator[GateEvent, None]:
    yield DoneEvent(result)


def owner_of(key: KeyRecord | None) -> str | None:
    """Who owns the jobs a request with ``key`` creates: the key (its id), or nobody on an
    open server, where a job's 128-bit random id is what grants access to it."""
    return None if key is None else f"key:{key.key_id}"


def owner_meta(key: KeyRecord | None) -> dict[str, str]:
    owner = owner_of(key)
    return {} if owner is None else {"owner": owner}


def get_state(conn: HTTPConnection) -> ServerState:
    """The server state (a FastAPI dependency for HTTP and WebSocket endpoints)."""
    state: ServerState | None = getattr(conn.app.state, "rtgate", None)
    if state is None:
        raise ApiError(503, "starting", "the server is starting")
    return state


async def state(conn: HTTPConnection) -> ServerState:
    """:func:`get_state` as an async dependency (a sync one would run in a thread pool)."""
    return get_state(conn)

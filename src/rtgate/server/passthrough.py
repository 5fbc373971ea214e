"""Named upstream models on ``/v1/chat/completions``: the client's body goes to the
upstream as it is, and the upstream's answer comes back as it is.

Every ``openai``-kind tier (an ``LLMTier`` over an ``OpenAICompatBackend``) is a model a
client can name, by its tier name or by its upstream ``model``. For such a request rtgate
drops only its own fields (``budget_ms``, ``delegate``, ``rtgate``), sets ``model`` to the
upstream's name, and relays the answer: the JSON bytes, or the SSE bytes as they arrive
(``id``, ``model``, ``usage``, tool calls untouched). What rtgate adds is in headers
(``X-Rtgate-Route``).

The budget bounds the whole answer when it is not streamed, and the time to the first
bytes of a stream (which then runs up to the tier's ``timeout_s``). Past it, or when the
upstream fails, the answer is an OpenAI-shaped error: ``504 upstream_timeout``,
``502 upstream_error``, ``503 upstream_unavailable`` (the circuit is open or the upstream
said 503; with ``Retry-After``). The upstream's ``429`` (with its ``Retry-After``) and
other 4xx answers are passed through. With ``"rtgate": {"on_timeout": "placeholder"}`` in
the body, a timeout or failure is answered with the gate's placeholder instead.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request as HttpRequest
from starlette.responses import Response, StreamingResponse

from rtgate.backends.openai_compat import OpenAICompatBackend
from rtgate.core.budget import Budget
from rtgate.core.errors import ApiError, BackendUnavailable
from rtgate.gate import Gate
from rtgate.resilience import BreakerTier, TierWrapper
from rtgate.resilience.breaker import CircuitBreaker, Outcome, Permit
from rtgate.security.keys import KeyRecord
from rtgate.server.arrival import arrival_of
from rtgate.server.error_responses import error_body, error_response
from rtgate.server.state import ServerState
from rtgate.server.streams import json_response, sse, sse_response, unless_disconnected
from rtgate.tiers.base import Tier
from rtgate.tiers.llm import LLMTier
from rtgate.tiers.remember import RememberAnswers

__all__ = ["Upstream", "forward", "named_upstreams"]

_OWN_FIELDS = frozenset({"budget_ms", "delegate", "rtgate"})
_ON_TIMEOUT = ("error", "placeholder")


@dataclass(frozen=True, slots=True)
class Upstream:
    """A named upstream: its tier's name, its backend and the breaker guarding it."""

    tier: str
    backend: OpenAICompatBackend
    breaker: CircuitBreaker | None


def _upstream_of(tier: Tier) -> Upstream | None:
    breaker = None
    t: Tier = tier
    while isinstance(t, TierWrapper | RememberAnswers):
        if isinstance(t, BreakerTier) and breaker is None:
            breaker = t.breaker
        t = t.inner
    if isinstance(t, LLMTier) and isinstance(t.backend, OpenAICompatBackend):
        return Upstream(tier.name, t.backend, breaker)
    return None


def named_upstreams(gate: Gate) -> dict[str, Upstream]:
    """The gate's OpenAI-compatible tiers by the names a client may use: each tier's
    name, and its upstream ``model`` (the first tier wins; a tier name beats a model)."""
    ups = [u for u in map(_upstream_of, gate.tiers) if u is not None]
    out = {u.tier: u for u in ups}
    for u in ups:
        out.setdefault(u.backend.model, u)
    return out


class _Failed(Exception):
    """The upstream could not answer: an error (or, when asked for, the placeholder)."""

    def __init__(
        self, status: int, code: str, message: str, outcome: Outcome, retry_after: str | None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.outcome, self.retry_after = outcome, retry_after


@dataclass(slots=True)
class _Call:
    """One upstream call: its budget and breaker permit; :meth:`end` records it once."""

    st: ServerState
    up: Upstream
    budget: Budget
    permit: Permit | None
    ended: bool = False

    def end(self, outcome: Outcome, ttft_ms: float | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        if self.permit is not None and self.up.breaker is not None:
            self.up.breaker.record(self.permit, outcome)
        if outcome == "success":
            e2e = self.budget.elapsed_ms()
            self.st.gate.metrics.record(
                self.up.tier, ttft_ms=ttft_ms, e2e_ms=e2e, budget_ms=self.budget.budget_ms
            )

    def timed_out(self) -> _Failed:
        breaker = self.up.breaker
        slow = breaker.config.slow_ms if breaker is not None else None
        late = slow is not None and self.budget.elapsed_ms() >= slow
        message = f"{self.up.tier} did not answer within {self.budget.budget_ms:g} ms"
        return _Failed(504, "upstream_timeout", message, "failure" if late else "neutral", None)


def _policy(raw: dict[str, Any]) -> str:
    opts = raw.get("rtgate")
    if opts is None:
        return "error"
    on_timeout = opts.get("on_timeout", "error") if isinstance(opts, dict) else None
    if on_timeout not in _ON_TIMEOUT:
        raise ApiError(
            400, "invalid_request", "rtgate.on_timeout must be 'error' or 'placeholder'", "rtgate"
        )
    return str(on_timeout)


def _limit_tokens(st: ServerState, raw: dict[str, Any], key: KeyRecord | None) -> None:
    """The server's and the key's ``max_tokens`` caps; a key's cap is sent upstream when the
    client asked for no limit (the only field rtgate may add)."""
    asked = raw.get("max_completion_tokens") or raw.get("max_tokens")
    limit = asked if isinstance(asked, int) else None
    if limit is not None and limit > st.config.server.max_tokens:
        raise ApiError(
            400,
            "max_tokens_too_large",
            f"max_tokens must be <= {st.config.server.max_tokens}",
            "max_tokens",
        )
    if key is not None:
        key.policy.check(max_tokens=limit)
        if limit is None and key.policy.max_tokens is not None:
            raw["max_tokens"] = key.policy.max_tokens


async def forward(
    st: ServerState,
    up: Upstream,
    http: HttpRequest,
    raw: dict[str, Any],
    budget_ms: float,
    key: KeyRecord | None,
) -> Response:
    """Answer ``raw`` (the client's JSON body) from ``up`` within ``budget_ms``."""
    policy = _policy(raw)
    _limit_tokens(st, raw, key)
    body = {k: v for k, v in raw.items() if k not in _OWN_FIELDS}
    stream = bool(raw.get("stream"))
    budget = Budget(budget_ms, start=arrival_of(http))
    permit = up.breaker.allow() if up.breaker is not None else None
    call = _Call(st, up, budget, permit)
    try:
        if up.breaker is not None and permit is None:
            wait = max(1, math.ceil(up.breaker.open_until - up.breaker.clock()))
            message = f"{up.tier}: circuit open"
            raise _Failed(503, "upstream_unavailable", message, "neutral", str(wait))
        if stream:
            return await _streamed(call, body)
        work = _whole(call, body)
        if budget_ms <= st.config.server.watch_disconnect_ms:
            return await work
        return await unless_disconnected(http, work)
    except _Failed as f:
        call.end(f.outcome)
        if policy == "placeholder":
            return _placeholder(call, f, stream)
        headers = {"X-Rtgate-Route": up.tier}
        if f.retry_after is not None:
            headers["Retry-After"] = f.retry_after
        return error_response(f.status, f.code, f.message, **headers)
    except BaseException:
        call.end("neutral")  # the client left, or a bug: no verdict on the upstream
        raise


async def _open(call: _Call, body: dict[str, Any]) -> httpx.Response:
    """The upstream's response (200, body unread), or :class:`_Failed`. Other answers:
    4xx (429 included) are raised as a :class:`_Passed` to relay as they are."""
    backend = call.up.backend
    try:
        resp = await backend.open_chat(body, backend.timeout_s)
    except BackendUnavailable as e:
        raise _Failed(502, "upstream_error", str(e), "failure", None) from None
    if resp.status_code == 200:
        return resp
    try:
        content = await resp.aread()
    finally:
        await resp.aclose()
    code = resp.status_code
    if 400 <= code < 500 and code not in (401, 403):
        raise _Passed(code, content, resp.headers)
    detail = f"{call.up.tier}: HTTP {code} from the upstream: {_detail(content)}"
    if code == 503:
        retry = resp.headers.get("retry-after", "1")
        raise _Failed(503, "upstream_unavailable", detail, "failure", retry)
    raise _Failed(502, "upstream_error", detail, "failure", None)


class _Passed(Exception):
    """An upstream answer relayed as it is (a 4xx: the request's fault, or 429)."""

    def __init__(self, status: int, content: bytes, headers: httpx.Headers) -> None:
        super().__init__(status)
        self.status, self.content, self.headers = status, content, headers

    def response(self, call: _Call) -> Response:
        call.end("neutral")
        out = {"X-Rtgate-Route": call.up.tier}
        if "retry-after" in self.headers:
            out["Retry-After"] = self.headers["retry-after"]
        ctype = self.headers.get("content-type", "application/json")
        return Response(self.content, self.status, headers=out, media_type=ctype)


def _detail(content: bytes) -> str:
    try:
        err = json.loads(content).get("error")
        return str(err.get("message") if isinstance(err, dict) else err)[:300]
    except (ValueError, AttributeError):
        return content[:300].decode("utf-8", "replace")


async def _whole(call: _Call, body: dict[str, Any]) -> Response:
    resp: httpx.Response | None = None
    try:
        async with asyncio.timeout(call.budget.left_s()):
            resp = await _open(call, body)
            content = await resp.aread()
    except _Passed as p:
        return p.response(call)
    except TimeoutError:
        raise call.timed_out() from None
    except httpx.HTTPError as e:
        message = f"{call.up.tier}: {type(e).__name__} reading the answer"
        raise _Failed(502, "upstream_error", message, "failure", None) from None
    finally:
        if resp is not None:
            await resp.aclose()
    call.end("success")
    ctype = resp.headers.get("content-type", "application/json")
    return Response(content, 200, headers={"X-Rtgate-Route": call.up.tier}, media_type=ctype)


async def _streamed(call: _Call, body: dict[str, Any]) -> Response:
    resp: httpx.Response | None = None
    try:
        async with asyncio.timeout(call.budget.left_s()):
            resp = await _open(call, body)
            chunks = resp.aiter_bytes()
            first = await anext(chunks, b"")
    except _Passed as p:
        return p.response(call)
    except BaseException as e:
        if resp is not None:
            await resp.aclose()
        if isinstance(e, TimeoutError):
            raise call.timed_out() from None
        if isinstance(e, httpx.HTTPError):
            message = f"{call.up.tier}: {type(e).__name__} before the first bytes"
            raise _Failed(502, "upstream_error", message, "failure", None) from None
        raise
    ttft = call.budget.elapsed_ms()
    ctype = resp.headers.get("content-type", "text/event-stream")
    return StreamingResponse(
        _relay(call, resp, first, chunks, ttft),
        media_type=ctype,
        headers={"Cache-Control": "no-cache", "X-Rtgate-Route": call.up.tier},
    )


async def _relay(
    call: _Call, resp: httpx.Response, first: bytes, chunks: AsyncIterator[bytes], ttft: float
) -> AsyncIterator[bytes]:
    outcome: Outcome = "neutral"
    try:
        if first:
            yield first
        async for chunk in chunks:
            yield chunk
        outcome = "success"
    except httpx.HTTPError as e:
        outcome = "failure"
        message = f"{call.up.tier}: the stream broke: {type(e).__name__}"
        yield sse(None, error_body(502, "upstream_error", message))
    finally:
        await resp.aclose()
        call.end(outcome, ttft_ms=ttft)


def _placeholder(call: _Call, failed: _Failed, stream: bool) -> Response:
    """The gate's placeholder as a completion (the client asked for it over an error)."""
    text = call.st.config.gate.placeholder
    budget = call.budget
    call.st.gate.metrics.record(
        "silent", ttft_ms=None, e2e_ms=budget.elapsed_ms(), budget_ms=budget.budget_ms
    )
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "created": int(time.time()),
        "model": call.up.backend.model,
    }
    extra = {"route": "silent", "placeholder": True, "degraded": f"{failed.code}: {failed}"}
    headers = {"X-Rtgate-Route": "silent"}
    if not stream:
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
        obj = {**head, "object": "chat.completion", "choices": [choice], "rtgate": extra}
        return json_response(obj, headers=headers)

    def chunk(delta: dict[str, Any], finish: str | None, **more: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse(None, {**head, "object": "chat.completion.chunk", "choices": [choice], **more})

    async def events() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": text}, None)
        yield chunk({}, "stop", rtgate=extra)
        yield sse(None, "[DONE]")

    return sse_response(events(), headers=headers)

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
the body (or ``on_timeout = "placeholder"`` in the upstream's tier settings, which a
request's own choice overrides), a timeout or failure is answered with the gate's
placeholder instead, marked as such.
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

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from rtgate.backends.http1 import Http1Response
from rtgate.backends.openai_compat import OpenAICompatBackend
from rtgate.core.budget import Budget
from rtgate.core.errors import ApiError, BackendUnavailable, ClientGone
from rtgate.gate import Gate
from rtgate.resilience import BreakerTier, TierWrapper
from rtgate.resilience.breaker import CircuitBreaker, Outcome, Permit
from rtgate.security.keys import KeyRecord
from rtgate.server.arrival import arrival_in
from rtgate.server.error_responses import error_body, error_response
from rtgate.server.state import ServerState
from rtgate.server.streams import json_response, sse, sse_response, watch_disconnect
from rtgate.tiers.base import Tier
from rtgate.tiers.llm import LLMTier
from rtgate.tiers.remember import RememberAnswers

__all__ = [
    "AsgiAnswer",
    "Prepared",
    "Upstream",
    "answer",
    "named_upstreams",
    "prepare",
    "upstreams",
]

_OWN_FIELDS = frozenset({"budget_ms", "delegate", "rtgate"})
_ON_TIMEOUT = ("error", "placeholder")


@dataclass(frozen=True, slots=True)
class Upstream:
    """A named upstream: its tier's name, its backend and the breaker guarding it."""

    tier: str
    backend: OpenAICompatBackend
    breaker: CircuitBreaker | None

    @property
    def route_header(self) -> bytes:
        return self.tier.encode("latin-1", "replace")


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


def upstreams(st: ServerState) -> dict[str, Upstream]:
    """:func:`named_upstreams` of the server's gate, found once (its tiers do not change)."""
    found = st.upstream_cache
    if found is None:
        found = st.upstream_cache = named_upstreams(st.gate)
    return found


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
    sent: float = 0.0  # when it went upstream, on the budget's clock

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
            model = self.st.gate.models.get(self.up.tier)
            if model is not None:  # what the gate learns of the tier, for `auto` requests
                upstream_ms = (self.budget.clock() - self.sent) * 1000.0
                first = upstream_ms if ttft_ms is None else ttft_ms - (e2e - upstream_ms)
                model.observe(first, upstream_ms)

    def timed_out(self) -> _Failed:
        breaker = self.up.breaker
        slow = breaker.config.slow_ms if breaker is not None else None
        late = slow is not None and self.budget.elapsed_ms() >= slow
        message = f"{self.up.tier} did not answer within {self.budget.budget_ms:g} ms"
        return _Failed(504, "upstream_timeout", message, "failure" if late else "neutral", None)


def _policy(raw: dict[str, Any], default: str) -> str:
    """The request's ``rtgate.on_timeout``, else the upstream's (``on_timeout`` in its
    tier's settings: ``error`` unless configured)."""
    opts = raw.get("rtgate")
    if opts is None:
        return default
    on_timeout = opts.get("on_timeout", default) if isinstance(opts, dict) else None
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


@dataclass(slots=True)
class Prepared:
    """A passthrough request checked and ready to send: what :func:`answer` needs."""

    up: Upstream
    payload: bytes
    stream: bool
    policy: str
    budget_ms: float


def prepare(
    st: ServerState, up: Upstream, raw: dict[str, Any], budget_ms: float, key: KeyRecord | None
) -> Prepared:
    """Check ``raw`` (the client's JSON body) for rtgate's own rules (``rtgate.on_timeout``,
    the ``max_tokens`` caps) and encode what goes upstream: the body as sent, less rtgate's
    fields, with the upstream's ``model``. Raises ``ApiError`` or ``KeyLimitExceeded``."""
    policy = _policy(raw, up.backend.on_timeout)
    _limit_tokens(st, raw, key)
    body = {k: v for k, v in raw.items() if k not in _OWN_FIELDS}
    body["model"] = up.backend.model
    payload = json.dumps(body, separators=(",", ":")).encode()  # ASCII: any text survives
    return Prepared(up, payload, bool(raw.get("stream")), policy, budget_ms)


async def answer(
    st: ServerState, prep: Prepared, scope: Scope, receive: Receive, send: Send
) -> None:
    """Answer ``prep`` from its upstream within its budget (counted from the request's
    arrival), as an ASGI app: the upstream's answer relayed, or an OpenAI-shaped error (or
    the placeholder, when asked for). A client that leaves cancels the upstream call."""
    up = prep.up
    budget = Budget(prep.budget_ms, start=arrival_in(scope))
    s = st.config.server
    late = st.behind(budget, s.max_queue_ms)
    permit = up.breaker.allow() if up.breaker is not None and late is None else None
    call = _Call(st, up, budget, permit)
    try:
        if late is not None:  # this process is behind: refuse now rather than answer late
            raise _Failed(503, "overloaded", f"rtgate is overloaded: {late}", "neutral", "1")
        if up.breaker is not None and permit is None:
            wait = max(1, math.ceil(up.breaker.open_until - up.breaker.clock()))
            message = f"{up.tier}: circuit open"
            raise _Failed(503, "upstream_unavailable", message, "neutral", str(wait))
        work = _streamed(call, prep, send) if prep.stream else _whole(call, prep, send)
        if not prep.stream and prep.budget_ms <= s.watch_disconnect_ms:
            await work
        else:
            await watch_disconnect(receive, work)
    except _Passed as p:
        call.end("neutral")
        await p.response(up)(scope, receive, send)
    except _Failed as f:
        call.end(f.outcome)
        if prep.policy == "placeholder":
            await _placeholder(call, f, prep.stream)(scope, receive, send)
            return
        headers = {"X-Rtgate-Route": up.tier}
        if f.retry_after is not None:
            headers["Retry-After"] = f.retry_after
        await error_response(f.status, f.code, f.message, **headers)(scope, receive, send)
    except ClientGone:
        call.end("neutral")  # nobody to answer: no verdict on the upstream
    except BaseException:
        call.end("neutral")  # a bug, or the server stopping: no verdict on the upstream
        raise


class AsgiAnswer(Response):
    """A Starlette response that runs :func:`answer` (for the routed path)."""

    def __init__(self, st: ServerState, prep: Prepared) -> None:
        super().__init__()
        self.st, self.prep = st, prep

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await answer(self.st, self.prep, scope, receive, send)


async def _open(call: _Call, prep: Prepared) -> Http1Response:
    """The upstream's response (200, body unread), or :class:`_Failed`. Other answers:
    4xx (429 included) are raised as a :class:`_Passed` to relay as they are."""
    call.sent = call.budget.clock()
    try:
        resp = await call.up.backend.send_chat(prep.payload, prep.stream)
    except BackendUnavailable as e:
        raise _Failed(502, "upstream_error", str(e), "failure", None) from None
    if resp.status == 200:
        return resp
    try:
        content = await resp.read()
    except BackendUnavailable:
        content = b""
    finally:
        resp.close()
    code = resp.status
    if 400 <= code < 500 and code not in (401, 403):
        raise _Passed(code, content, resp)
    detail = f"{call.up.tier}: HTTP {code} from the upstream: {_detail(content)}"
    if code == 503:
        retry = (resp.header(b"retry-after") or b"1").decode("latin-1")
        raise _Failed(503, "upstream_unavailable", detail, "failure", retry)
    raise _Failed(502, "upstream_error", detail, "failure", None)


class _Passed(Exception):
    """An upstream answer relayed as it is (a 4xx: the request's fault, or 429)."""

    def __init__(self, status: int, content: bytes, resp: Http1Response) -> None:
        super().__init__(status)
        self.status, self.content = status, content
        self.retry_after = resp.header(b"retry-after")
        self.ctype = (resp.header(b"content-type") or b"application/json").decode("latin-1")

    def response(self, up: Upstream) -> Response:
        out = {"X-Rtgate-Route": up.tier}
        if self.retry_after is not None:
            out["Retry-After"] = self.retry_after.decode("latin-1")
        return Response(self.content, self.status, headers=out, media_type=self.ctype)


def _detail(content: bytes) -> str:
    try:
        err = json.loads(content).get("error")
        return str(err.get("message") if isinstance(err, dict) else err)[:300]
    except (ValueError, AttributeError):
        return content[:300].decode("utf-8", "replace")


def _head(call: _Call, resp: Http1Response, length: int | None) -> dict[str, Any]:
    headers = resp.end_to_end_headers()
    headers.append((b"x-rtgate-route", call.up.route_header))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http.response.start", "status": 200, "headers": headers}


async def _whole(call: _Call, prep: Prepared, send: Send) -> None:
    resp: Http1Response | None = None
    try:
        async with asyncio.timeout(call.budget.left_s()):
            resp = await _open(call, prep)
            content = await resp.read()
    except TimeoutError:
        raise call.timed_out() from None
    except BackendUnavailable as e:
        message = f"{call.up.tier}: {e} (reading the answer)"
        raise _Failed(502, "upstream_error", message, "failure", None) from None
    finally:
        if resp is not None:
            resp.close()
    call.end("success")
    await send(_head(call, resp, len(content)))
    await send({"type": "http.response.body", "body": content})


async def _streamed(call: _Call, prep: Prepared, send: Send) -> None:
    resp: Http1Response | None = None
    try:
        async with asyncio.timeout(call.budget.left_s()):
            resp = await _open(call, prep)
            chunks = aiter(resp)
            first = await anext(chunks, b"")
    except BaseException as e:
        if resp is not None:
            resp.close()
        if isinstance(e, TimeoutError):
            raise call.timed_out() from None
        if isinstance(e, BackendUnavailable):
            message = f"{call.up.tier}: {e} (before the first bytes)"
            raise _Failed(502, "upstream_error", message, "failure", None) from None
        raise
    ttft = call.budget.elapsed_ms()
    outcome: Outcome = "neutral"
    try:
        head = _head(call, resp, None)
        head["headers"].append((b"cache-control", b"no-cache"))
        await send(head)
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        idle_s = call.up.backend.timeout_s  # the most between two chunks
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(loop.time() + idle_s) as quiet:
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                quiet.reschedule(loop.time() + idle_s)
        outcome = "success"
    except TimeoutError:
        outcome = "failure"
        message = f"{call.up.tier}: the stream stalled for {call.up.backend.timeout_s:g} s"
        await send(_stream_error(message))
    except BackendUnavailable as e:
        outcome = "failure"
        await send(_stream_error(f"{call.up.tier}: the stream broke: {e}"))
    finally:
        resp.close()
        call.end(outcome, ttft_ms=ttft)
    await send({"type": "http.response.body", "body": b""})


def _stream_error(message: str) -> dict[str, Any]:
    event = sse(None, error_body(502, "upstream_error", message))
    return {"type": "http.response.body", "body": event, "more_body": True}


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

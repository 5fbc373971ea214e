"""A streaming client for OpenAI-compatible servers (vLLM, llama.cpp server, Ollama, hosted).

``base_url`` is what the OpenAI SDK calls ``base_url``: the URL the API paths hang off,
*including* the version prefix: ``http://127.0.0.1:8000/v1`` (vLLM, ``llama_cpp.server``),
``http://127.0.0.1:11434/v1`` (Ollama), ``https://api.openai.com/v1``, or a provider's own
prefix (``…/openai/v1``). A bare host (``http://127.0.0.1:8000``, empty path) gets ``/v1``
added. Chats go to ``{base_url}/chat/completions``, raw prompts to ``{base_url}/completions``,
both with ``stream: true``. Warm-up uses only the ``endpoint`` the backend is configured
with (``chat`` by default: many hosted APIs have no ``/completions``).
:meth:`OpenAICompatBackend.send_chat` forwards a client's body as it is (passthrough), through
a pooled HTTP/1.1 client of its own (:mod:`rtgate.backends.http1`: httpx cost half of a
proxied request's CPU).

Deltas are yielded as each server-sent event arrives, never buffered. Errors:
429 → ``RateLimited``; 5xx, refused or reset connections → ``BackendUnavailable``; an
``error`` object or malformed chunk inside the stream → ``BackendProtocolError``; a timeout
set from the budget → ``TimeoutError``. Cancelling the consumer closes the HTTP connection
(its response body is unread, so it is not returned to the pool).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import httpx

from rtgate.backends.base import Backend, Generation
from rtgate.backends.http1 import Http1Pool, Http1Response
from rtgate.backends.sse import SSEDecoder, SSEEvent
from rtgate.core.budget import Budget
from rtgate.core.errors import (
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    InvalidRequest,
    RateLimited,
)
from rtgate.core.request import Message

__all__ = ["Endpoint", "OpenAICompatBackend", "normalize_base_url"]

_ERROR_BODY_LIMIT = 16_384
Endpoint = Literal["chat", "completions"]


def normalize_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash, with ``/v1`` added to a bare host."""
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise InvalidRequest(f"base_url must be an http(s) URL, got {base_url!r}")
    if url.path in ("", "/"):
        url = url.copy_with(path="/v1")
    return str(url).rstrip("/")


class OpenAICompatBackend(Backend):
    """Chat/completions with ``stream=true`` over httpx.

    Args:
        base_url: see the module docstring (``…/v1``).
        model: the model name the server expects.
        api_key: sent as ``Authorization: Bearer …`` when given.
        extra_body: merged into every request body (e.g. vLLM's ``top_k``).
        max_tokens_field: ``"max_completion_tokens"`` for providers that want it.
        timeout_s: timeouts when no budget is given; with a budget, its time left.
        max_connections: connections open at once, in each of the two pools (httpx's
            for the gate's calls, :meth:`pool` for the passthrough).
        transport: an httpx transport (e.g. ``httpx.MockTransport``) instead of the network.
        endpoint: what warm-up calls: ``"chat"`` (``/chat/completions``) or
            ``"completions"`` (``/completions``, for servers of raw prompts).
        on_timeout: what a passthrough request for this upstream gets when it cannot be
            answered in time, unless the request says: ``"error"`` (an OpenAI-shaped
            504/502/503) or ``"placeholder"`` (the gate's, marked as such).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_tokens_field: str = "max_tokens",
        connect_timeout_s: float = 5.0,
        timeout_s: float = 60.0,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
        name: str | None = None,
        endpoint: Endpoint = "chat",
        on_timeout: str = "error",
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.name = name or f"openai:{model}"
        self.extra_body = dict(extra_body or {})
        self.max_tokens_field = max_tokens_field
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.endpoint: Endpoint = endpoint
        self.on_timeout = on_timeout
        self.max_connections = max_connections
        hdrs = {"Accept": "text/event-stream", **(headers or {})}
        if api_key:
            hdrs["Authorization"] = f"Bearer {api_key}"
        self._pool_headers = [(k, v) for k, v in hdrs.items() if k.lower() != "accept"]
        self._pool: Http1Pool | None = None
        self._client = httpx.AsyncClient(
            headers=hdrs,
            transport=transport,
            limits=httpx.Limits(max_connections=max_connections),  # bounded pool: waits, then
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),  # PoolTimeout
        )

    def request_for(self, gen: Generation) -> tuple[str, dict[str, Any]]:
        """The URL and JSON body that ``gen`` becomes."""
        body: dict[str, Any] = {"model": self.model, "stream": True}
        if gen.prompt is not None:
            url = f"{self.base_url}/completions"
            body["prompt"] = gen.prompt
        elif gen.messages:
            url = f"{self.base_url}/chat/completions"
            body["messages"] = [{"role": m.role, "content": m.content} for m in gen.messages]
        else:
            raise InvalidRequest("a Generation needs messages or a prompt")
        body[self.max_tokens_field] = gen.max_tokens
        body["temperature"] = gen.temperature
        if gen.stop:
            body["stop"] = list(gen.stop)
        body.update(self.extra_body)
        return url, body

    def _timeout(self, budget: Budget | None) -> httpx.Timeout:
        if budget is None:
            return httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)
        left = budget.left_s()
        if left <= 0:
            raise TimeoutError("budget spent before the request")
        return httpx.Timeout(left, connect=min(self.connect_timeout_s, left))

    async def generate(self, gen: Generation, budget: Budget | None = None) -> AsyncIterator[str]:
        url, body = self.request_for(gen)
        timeout = self._timeout(budget)
        try:
            async with self._client.stream("POST", url, json=body, timeout=timeout) as resp:
                if resp.status_code != 200:
                    await _raise_for_status(resp)
                ctype = resp.headers.get("content-type", "")
                if ctype.startswith("application/json"):  # the server ignored stream=true
                    for delta in _whole_response(await resp.aread()):
                        yield delta
                    return
                async for delta in _stream_deltas(resp, budget):
                    yield delta
        except httpx.TimeoutException as exc:
            if budget is not None:
                raise TimeoutError(f"{type(exc).__name__} within the budget") from exc
            raise BackendUnavailable(f"{self.name}: {type(exc).__name__}") from exc
        except httpx.TransportError as exc:  # refused, reset, broken chunking, ...
            raise BackendUnavailable(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    async def warmup(self) -> None:
        """Open a connection and run one token on the configured ``endpoint`` only, so the
        first real request is not cold."""
        if self.endpoint == "chat":
            gen = Generation(messages=(Message("user", "Hi"),), max_tokens=1)
        else:
            gen = Generation(prompt="Hi", max_tokens=1)
        async for _ in self.generate(gen):
            pass

    def pool(self) -> Http1Pool:
        """The passthrough's connection pool to this upstream (made on first use, inside
        the event loop that uses it): at most ``max_connections`` connections."""
        if self._pool is None:
            self._pool = Http1Pool(
                self.base_url,
                size=self.max_connections,
                connect_timeout_s=self.connect_timeout_s,
                headers=self._pool_headers,
                name=self.name,
            )
        return self._pool

    async def send_chat(self, payload: bytes, stream: bool) -> Http1Response:
        """POST ``payload`` (a JSON body, already encoded) to ``{base_url}/chat/completions``
        through :meth:`pool`: the response, any status, once its head has come (read it,
        then ``close`` it). The caller holds the deadline. Raises ``BackendUnavailable``
        or ``TimeoutError`` (connecting)."""
        accept = "text/event-stream" if stream else "application/json"
        headers = (("Content-Type", "application/json"), ("Accept", accept))
        return await self.pool().request("POST", "/chat/completions", payload, headers)

    async def aclose(self) -> None:
        await self._client.aclose()
        if self._pool is not None:
            await self._pool.aclose()


async def _stream_deltas(resp: httpx.Response, budget: Budget | None) -> AsyncIterator[str]:
    decoder = SSEDecoder()
    finished = False
    async for chunk in resp.aiter_bytes():
        for ev in decoder.feed(chunk):
            parsed = _interpret(ev)
            if parsed is None:
                return
            text, fin = parsed
            finished = finished or fin
            if text:
                yield text
        if budget is not None and budget.expired:
            raise TimeoutError("budget spent while streaming")
    for ev in decoder.flush():
        parsed = _interpret(ev)
        if parsed is None:
            return
        text, fin = parsed
        finished = finished or fin
        if text:
            yield text
    if not finished:
        raise BackendProtocolError("stream ended without [DONE] or a finish_reason")


def _interpret(ev: SSEEvent) -> tuple[str, bool] | None:
    """An event's (text delta, finished) or ``None`` for ``[DONE]``."""
    if ev.data.strip() == "[DONE]":
        return None
    try:
        obj = json.loads(ev.data)
    except ValueError as exc:
        raise BackendProtocolError(f"malformed stream chunk: {ev.data[:200]!r}") from exc
    if ev.event == "error" or (isinstance(obj, dict) and obj.get("error")):
        raise BackendProtocolError(f"error in stream: {_message(obj)}")
    if not isinstance(obj, dict):
        raise BackendProtocolError(f"stream chunk is not an object: {ev.data[:200]!r}")
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise BackendProtocolError(f"'choices' is not a list: {ev.data[:200]!r}")
    if not choices:
        return "", False  # e.g. a usage-only chunk
    choice = choices[0]
    if not isinstance(choice, dict):
        raise BackendProtocolError("a choice is not an object")
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return (text if isinstance(text, str) else ""), bool(choice.get("finish_reason"))


def _whole_response(raw: bytes) -> list[str]:
    try:
        obj = json.loads(raw)
        choice = obj["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BackendProtocolError(f"unexpected JSON response: {raw[:200]!r}") from exc
    return [text] if isinstance(text, str) and text else []


def _message(obj: Any) -> str:
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err if err is not None else obj)[:500]


async def _raise_for_status(resp: httpx.Response) -> None:
    raw = b""
    async for chunk in resp.aiter_bytes():
        raw += chunk
        if len(raw) >= _ERROR_BODY_LIMIT:
            break
    try:
        detail = _message(json.loads(raw))
    except ValueError:
        detail = raw[:500].decode("utf-8", "replace")
    code = resp.status_code
    text = f"HTTP {code} from {resp.request.url}: {detail}"
    if code == 429:
        after = resp.headers.get("retry-after")
        raise RateLimited(text + (f" (retry after {after} s)" if after else ""))
    if code >= 500:
        raise BackendUnavailable(text)
    raise BackendError(text)

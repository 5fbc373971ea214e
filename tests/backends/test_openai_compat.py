"""The OpenAI-compatible client against real loopback sockets (scripted raw HTTP servers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from rtgate.backends.base import Generation
from rtgate.backends.openai_compat import OpenAICompatBackend, normalize_base_url
from rtgate.core.budget import Budget
from rtgate.core.errors import (
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    InvalidRequest,
    RateLimited,
)
from rtgate.core.request import Message

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CHAT = Generation(messages=[Message("user", "hi")], max_tokens=8)
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def chunk(text: str, finish: str | None = None) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


async def read_request(reader: asyncio.StreamReader) -> dict[str, object]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode().split("\r\n"):
        if line.lower().startswith("content-length:"):
            length = int(line.split(":")[1])
    body = json.loads(await reader.readexactly(length))
    assert isinstance(body, dict)
    return {"head": head.decode(), **body}


class RawServer:
    """A real HTTP/1.1 server on 127.0.0.1 whose replies each test scripts."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[dict[str, object]] = []
        self.port = 0

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.requests.append(await read_request(reader))
            await self.handler(reader, writer)
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    def backend(self, **kw: object) -> OpenAICompatBackend:
        return OpenAICompatBackend(f"http://127.0.0.1:{self.port}/v1", "m", **kw)  # type: ignore[arg-type]


def replying(*parts: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for p in parts:
            writer.write(p)
            await writer.drain()

    return handler


async def run(backend: OpenAICompatBackend, gen: Generation = CHAT) -> list[str]:
    try:
        return [d async for d in backend.generate(gen)]
    finally:
        await backend.aclose()


def test_base_url_rules() -> None:
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalize_base_url("https://x.ai/openai/v1") == "https://x.ai/openai/v1"
    with pytest.raises(InvalidRequest):
        normalize_base_url("h:8000")


async def test_streams_chat_deltas_and_sends_the_openai_body() -> None:
    body = [SSE_HEAD, b": keep-alive\n\n", chunk("Hel"), chunk("lo"), chunk("", "stop")]
    async with RawServer(replying(*body, b"data: [DONE]\n\n")) as srv:
        got = await run(srv.backend(api_key="k"), Generation(messages=CHAT.messages, stop=["\n"]))
    assert got == ["Hel", "lo"]
    req = srv.requests[0]
    assert "POST /v1/chat/completions" in str(req["head"])
    assert "authorization: bearer k" in str(req["head"]).lower()
    assert req["stream"] is True and req["stop"] == ["\n"] and req["model"] == "m"
    assert req["messages"] == [{"role": "user", "content": "hi"}]


async def test_raw_prompt_goes_to_completions() -> None:
    text_chunk = b'data: {"choices":[{"text":"ok","finish_reason":"stop"}]}\n\n'
    async with RawServer(replying(SSE_HEAD, text_chunk)) as srv:
        got = await run(srv.backend(), Generation(prompt="Q: 1+1\nA:"))
    assert got == ["ok"]  # no [DONE], but a finish_reason: a complete stream
    assert "POST /v1/completions" in str(srv.requests[0]["head"])


async def test_warmup_calls_only_the_configured_endpoint() -> None:
    body = [SSE_HEAD, chunk("ok", "stop")]
    async with RawServer(replying(*body)) as srv:
        chat = srv.backend()
        try:
            await chat.warmup()
        finally:
            await chat.aclose()
        raw = srv.backend(endpoint="completions")
        try:
            await raw.warmup()
        finally:
            await raw.aclose()
    heads = [str(r["head"]).split("\r\n")[0] for r in srv.requests]
    assert heads == ["POST /v1/chat/completions HTTP/1.1", "POST /v1/completions HTTP/1.1"]
    assert srv.requests[0]["messages"] == [{"role": "user", "content": "Hi"}]


async def test_deltas_are_yielded_as_they_arrive() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD + chunk("first"))
        await writer.drain()
        await release.wait()  # the rest only comes after the client has shown "first"
        writer.write(chunk("second", "stop") + b"data: [DONE]\n\n")
        await writer.drain()

    async with RawServer(handler) as srv:
        backend = srv.backend()
        got: list[str] = []
        async with asyncio.timeout(10):
            async for d in backend.generate(CHAT):
                got.append(d)
                release.set()
        await backend.aclose()
    assert got == ["first", "second"]


async def test_cancelling_the_consumer_closes_the_connection() -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD + chunk("a"))
        await writer.drain()
        assert await reader.read() == b""  # EOF: the client hung up
        closed.set()

    async with RawServer(handler) as srv:
        backend = srv.backend()
        agen = backend.generate(CHAT)
        assert await agen.__anext__() == "a"
        await agen.aclose()  # type: ignore[attr-defined]
        async with asyncio.timeout(10):
            await closed.wait()
        await backend.aclose()


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, RateLimited), (500, BackendUnavailable), (503, BackendUnavailable), (404, BackendError)],
)
async def test_http_errors_map_to_rtgate_errors(status: int, error: type[Exception]) -> None:
    payload = b'{"error": {"message": "nope"}}'
    head = (
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nretry-after: 2\r\n"
        f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n"
    ).encode()
    async with RawServer(replying(head + payload)) as srv:
        with pytest.raises(error, match="nope") as info:
            await run(srv.backend())
    assert type(info.value) is error
    if status == 429:
        assert "retry after 2" in str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        b'data: {"error": {"message": "model crashed"}}\n\n',
        b'event: error\ndata: {"message": "model crashed"}\n\n',
        b"data: {not json\n\n",
        b'data: ["a list"]\n\n',
        chunk("half a stream"),  # connection closed with no [DONE] and no finish_reason
    ],
)
async def test_bad_streams_are_protocol_errors(body: bytes) -> None:
    async with RawServer(replying(SSE_HEAD, chunk("x"), body)) as srv:
        with pytest.raises(BackendProtocolError):
            await run(srv.backend())


async def test_json_reply_to_a_stream_request_is_accepted() -> None:
    payload = b'{"choices":[{"message":{"role":"assistant","content":"whole"}}]}'
    head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(payload)}\r\n\r\n"
    async with RawServer(replying(head.encode() + payload)) as srv:
        assert await run(srv.backend()) == ["whole"]


async def test_connection_refused_is_unavailable() -> None:
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    with pytest.raises(BackendUnavailable):
        await run(OpenAICompatBackend(f"http://127.0.0.1:{port}", "m"))


async def test_silent_server_times_out_within_the_budget() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD)
        await writer.drain()
        await reader.read()

    async with RawServer(handler) as srv:
        backend = srv.backend()
        with pytest.raises(TimeoutError):
            async for _ in backend.generate(CHAT, Budget(50)):
                pass
        await backend.aclose()


async def test_extra_body_and_max_tokens_field() -> None:
    async with RawServer(replying(SSE_HEAD, chunk("k", "stop"))) as srv:
        backend = srv.backend(extra_body={"top_k": 5}, max_tokens_field="max_completion_tokens")
        assert await run(backend) == ["k"]
    req = srv.requests[0]
    assert req["top_k"] == 5 and req["max_completion_tokens"] == 8 and "max_tokens" not in req

"""A bare OpenAI-compatible upstream for ``rtgate bench proxy``: it parses the request and
answers one fixed chat completion at once, so what is measured in front of it is the
gateway's own cost. A streamed request (``stream: true``) gets :data:`STREAM_CHUNKS` chunks
:data:`STREAM_GAP_S` apart (the first at once), then the usage chunk when
``stream_options.include_usage`` asks, then ``[DONE]``: what the gateway adds to the time
to the first chunk and between chunks is then measurable at the client.
``python -m rtgate.bench._bare_upstream PORT`` serves it (uvicorn, httptools, one worker)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["MODEL", "STREAM_CHUNKS", "STREAM_GAP_S", "app", "chat_answer"]

MODEL = "bare"
STREAM_CHUNKS = 8
STREAM_GAP_S = 0.005
USAGE = {"prompt_tokens": 5, "completion_tokens": STREAM_CHUNKS, "total_tokens": 13}


async def _chunks(model: str, usage: bool) -> AsyncIterator[bytes]:
    head = {"id": "chatcmpl-bare-s", "object": "chat.completion.chunk", "created": 0}
    head["model"] = model
    for i in range(STREAM_CHUNKS):
        if i:
            await asyncio.sleep(STREAM_GAP_S)
        delta = {"role": "assistant", "content": "ok"} if i == 0 else {"content": " ok"}
        last = i == STREAM_CHUNKS - 1
        choice = {"index": 0, "delta": delta, "finish_reason": "stop" if last else None}
        yield b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n"
    if usage:
        yield b"data: " + json.dumps({**head, "choices": [], "usage": USAGE}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


async def _chat(request: Request) -> Response:
    body = json.loads(await request.body())
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = _chunks(body.get("model", MODEL), usage)
        return StreamingResponse(events, media_type="text/event-stream")
    answer = chat_answer(body.get("model", MODEL), int(time.time()))
    return Response(json.dumps(answer), media_type="application/json")


def chat_answer(model: str, created: int) -> dict[str, Any]:
    """The one chat completion a bare upstream answers."""
    return {
        "id": "chatcmpl-bare",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }


async def _models(request: Request) -> Response:
    data = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}
    return Response(json.dumps(data), media_type="application/json")


app = Starlette(
    routes=[
        Route("/v1/chat/completions", _chat, methods=["POST"]),
        Route("/v1/models", _models, methods=["GET"]),
    ]
)


def main() -> None:
    import uvicorn

    port = int(sys.argv[1])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="httptools")


if __name__ == "__main__":
    main()
